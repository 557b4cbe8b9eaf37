"""Legality of pinned values: "is this command still legal with these flags pinned?", fast.

The dry-run asks it for every value of every backend-like flag, the CI matrix for every partial
row and `tune` for every candidate, each as `launch.pinned(pins)` (resolver/solving/launch.py):
one `Pinning` per launch answers its pinned children from its one resolve. Each answer is what a
full solve of the pinned command gives (tests/reference_solver.py `exclusions`, the oracle that
tests/test_solver_queries.py holds it to, with the cache layer on and off).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving.depgraph import Reach
from accord.resolver.solving.solve import Env, Plan, holds


class Pinning:
    """Answers "is this command still legal with these flags pinned?" for many pins, from one resolve.

    `reach(x)` is every flag whose value can change x's value: x itself and, while x is unset, what
    its default and prefer rules read. A hard rule can only change verdict when a flag in its reach
    is pinned, so only those rules are checked, against the resolved configuration with the pinned
    values swapped in (the *example*). When the example breaks a rule, the rules unsatisfiable on
    their own name the exclusion; otherwise the solver decides, given only the rules linked to the
    pinned flags through shared decisions (the other components are untouched and stay legal).

    Without a resolved configuration (the user's flags conflict by themselves) every question goes
    to the solver.

    `legal`, `first_exclusion` and `exclusions` answer as one full solve of the pinned
    command would (tests/reference_solver.py `exclusions`; tests/test_solver_queries.py holds the
    two to the same answers). `environment` is not a solve:
    it is the example the check above reads (the resolved decisions the pins leave alone kept).
    """

    def __init__(self, plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                 resolved: Mapping[str, Any] | None, graph: Reach,
                 minimal_rules: Callable[[Mapping[str, Any], list[Rule]], list[Rule]]):
        self.plan = plan
        # A minimal set of the given rules unsatisfiable with a pinned command (`Launch.minimal_rules`).
        self._minimal = minimal_rules
        self.user = dict(user)
        self.facts = facts
        self.decisions = None if resolved is None else {d: resolved[d] for d in plan.prefer_rules}
        # Scalars only: a resolved list or mapping may be stored frozen (a tuple, a read-only
        # mapping), which a rule could tell apart from the list a default computes.
        self._values = {} if resolved is None else {
            n: v for n, v in resolved.items() if v is None or type(v) in (str, int, float, bool)}
        self._stable = {n: v for n, v in self._values.items() if n not in self.user}
        # Reach, and the rules pins touch, depend only on which flags are set, never on values:
        # shared by every Pinning of a launch with the same flags set (the UI's next change).
        self._graph = graph
        self._examples: dict[frozenset[str], tuple[dict[str, Any], dict[str, Any]]] = {}
        self._clean: set[tuple] = {()}  # pin sets whose example holds (no pins: the resolved config)

    def legal(self, pins: Mapping[str, Any]) -> bool:
        """Whether the command with `pins` is satisfiable (`plan.satisfiable` of it)."""
        return self._judge(pins, every=False) is None

    def first_exclusion(self, pins: Mapping[str, Any]) -> list[tuple[Rule, ...]] | None:
        """None when legal; else at most one group of rules (none when no single proof is at hand):
        cheaper than `exclusions`, for searches that only need to know whether and roughly why."""
        return self._judge(pins, every=False)

    def exclusions(self, pins: Mapping[str, Any]) -> list[tuple[Rule, ...]] | None:
        """None when legal; else groups of rules, each unsatisfiable by itself with these pins."""
        return self._judge(pins, every=True)

    def _judge(self, pins: Mapping[str, Any], every: bool) -> list[tuple[Rule, ...]] | None:
        """The exclusions of `pins`; without `every`, only the first proof found (possibly empty)."""
        names = frozenset(pins)
        pinned = {**self.user, **pins}
        if self.decisions is None:
            if self.plan.satisfiable(pinned, self.facts):
                return None
            return [tuple(self._minimal(pinned, self.plan.hard_rules))] if every else []
        key = _pin_key(pins)
        if key in self._clean:
            return None
        fresh = self._unchecked(pins)
        decided, example = self._example(names)
        env = Env(self.plan, pinned, self.facts, example)
        broken = []
        for rule in self._graph.touching(fresh):
            if not holds(rule, env):
                if not every and self._fixed(names, rule):
                    return [(rule,)]
                broken.append(rule)
        if not broken and self._still_eligible(fresh, decided, env):
            self._clean.add(key)
            return None
        alone = []
        for rule in broken:
            if self._fixed(names, rule) or not self.plan.satisfiable(pinned, self.facts, [rule]):
                if not every:
                    return [(rule,)]
                alone.append((rule,))
        if alone:
            return alone
        linked = self.linked(names)
        if self.plan.satisfiable(pinned, self.facts, linked):
            return None
        return [tuple(self._minimal(pinned, linked))] if every else []

    def environment(self, pins: Mapping[str, Any]) -> Env:
        """The command's values with `pins`, as the legality check saw them: resolved values the
        pins cannot reach and the decisions they leave alone kept, the rest derived on demand.
        Needs the resolved configuration (a Pinning built with one)."""
        if self.decisions is None:
            raise ValueError("Pinning.environment needs the resolved configuration of the command")
        _, example = self._example(frozenset(pins))
        return Env(self.plan, {**self.user, **pins}, self.facts, example)

    def _example(self, names: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the resolved decisions the pins leave alone, those plus every resolved value they cannot reach).

        A flag whose reach holds no pinned flag keeps its resolved value while the decisions stay
        fixed, so the example gives it as a constant instead of deriving it again for each pin."""
        found = self._examples.get(names)
        if found is None:
            decided = {d: v for d, v in self.decisions.items() if d not in self.user and d not in names}
            example = self._stable.copy()
            for name in self._reached_from(names):
                example.pop(name, None)
            example.update(decided)
            found = self._examples[names] = (decided, example)
        return found

    def _reached_from(self, names: frozenset[str]) -> set[str]:
        """Every flag whose reach holds one of `names` (they themselves included)."""
        return set(self._graph.affected(names))

    def _unchecked(self, pins: Mapping[str, Any]) -> frozenset[str]:
        """The pinned flags whose rules must be checked: all of them, unless the example already
        held with one pin fewer, in which case only that last pin can have broken something."""
        for name in pins:
            if _pin_key({k: v for k, v in pins.items() if k != name}) in self._clean:
                return frozenset({name})
        return frozenset(pins)

    def _still_eligible(self, names: frozenset[str], decided: Mapping[str, Any], env: Env) -> bool:
        """Every decision the pins can influence may still take its resolved value."""
        return all(value in [v for v, _ in self.plan.candidates(decision, env)]
                   for decision, value in decided.items() if self._graph.reach(decision) & names)

    def _fixed(self, names: frozenset[str], rule: Rule) -> bool:
        """The rule reads no decision once `names` are pinned: no choice of the solver changes it."""
        return not self.plan.rule_depends(rule, {**self.user, **dict.fromkeys(names)})

    def linked(self, names: frozenset[str]) -> list[Rule]:
        """The rules touching `names` plus every rule sharing a decision with them, transitively."""
        return self._graph.linked(names)


def _pin_key(pins: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in pins.items()))
