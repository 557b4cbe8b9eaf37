"""A launch and its answers: every question Accord asks about a command is asked of a `Launch`.

`Launch(plan, user, facts)` is one command. Its answers are attributes computed on first use, each
from smaller ones: the verdict of each hard rule that reads no decision, the decisions of each
independent group (`Plan.structure`, decided by resolver/solving/core.py), the reading of each warn
rule under those decisions. `decisions`, `satisfiable`, `warnings`, `minimal_rules` (QuickXplain
over `rules_unsatisfiable`) and a pinned command's `exclusions` are read off them.

`launch.changed(values)` and `launch.pinned(pins)` are what-ifs: child launches that take each small
answer from their parent when the change reaches nothing it reads on the plan's dependency graph
(resolver/solving/depgraph.py); the walk stops at what the parent never computed. A pinned child (a
dry-run value, a matrix row, a `tune` candidate) first tries its parent's resolved configuration
with the pins swapped in, and solves only when that cannot settle it.

What a rule reads is taken widely (`is_set` questions too), so sharing is never wrong, only sometimes
cautious: tests/test_solver_queries.py holds every answer, with the cache layer on and off, to full
solves (tests/reference_solver.py). `Launches` keeps one question's launches, each solved once.
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, Mapping

from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving import core
from accord.resolver.solving.depgraph import Reach
from accord.resolver.solving.env import Assignment, Env, RelaxedValues, Shared, check, holds, verdict
from accord.resolver.solving.quickxplain import quickxplain
from accord.resolver.solving.solve import Plan

# `Launch(resolved=...)` left out: the launch resolves itself when its pinned children first ask.
SOLVE_ON_DEMAND: Any = object()
_SCALARS = (str, int, float, bool)


class Launch:
    """One command (plan, user values, facts) and its answers, each computed on first use."""

    def __init__(self, plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                 family: Launches | None = None, resolved: Mapping[str, Any] | None = SOLVE_ON_DEMAND):
        # A copy: callers go on changing theirs (find_conflicts drops the flags of each conflict).
        self.user = RelaxedValues(user, user.relaxed) if isinstance(user, RelaxedValues) else dict(user)
        self.plan, self.facts, self.family = plan, facts, family
        self._resolved = resolved  # the values a resolve of it gave, if the caller has them (None: it does not resolve)
        self._parent: Launch | None = None
        self._change: frozenset[str] = frozenset()  # a child: the flags that may differ from its parent's
        self._pins: dict[str, Any] | None = None    # a pinned child: its pins
        self._looked: tuple | None = None           # a pinned child: its `_on_example`
        self._groups: dict[tuple, tuple[Assignment, bool]] = {}  # group key -> (its decisions, they hold)
        self._rejecters: list[Rule] = []            # rules that proved children unsatisfiable, latest first
        self._clean: set[tuple] = {()}              # pin sets whose resolved configuration holds
        self._examples: dict[frozenset, tuple[dict, dict]] = {}  # pinned flags -> `_example`

    # -- children ------------------------------------------------------------------------------

    def changed(self, values: Mapping[str, Any], flags: Iterable[str] | None = None) -> Launch:
        """The command `values`, which differs from this one in `flags` (set, unset or given another
        value; by default every flag whose value differs), answering from this one."""
        child = Launch(self.plan, values, self.facts, self.family)
        child._parent = self
        child._change = _differing(self.user, child.user) if flags is None else frozenset(flags)
        child._change |= _relaxed(self.user) ^ _relaxed(child.user)  # `is_set` reads those differently
        return child

    def pinned(self, pins: Mapping[str, Any]) -> Launch:
        """This command with `pins` set on top, answering from this one."""
        child = self.changed({**self.user, **pins}, pins)
        child._pins, child._pins_key = dict(pins), _pin_key(pins)
        return child

    # -- answers -------------------------------------------------------------------------------

    @functools.cached_property
    def decisions(self) -> Assignment | None:
        """The decisions `plan.decisions(user, facts)` makes (None: unsatisfiable)."""
        return None if self._a_broken_rule is not None else self.base_decisions

    @property
    def satisfiable(self) -> bool:
        """Whether some configuration of the command holds every hard rule (`plan.satisfiable`)."""
        return self._legal(full=False)

    def _legal(self, full: bool) -> bool:
        """`satisfiable`; a pinned child looks at its parent's configuration first (`full`: at every
        rule there, for its exclusions next), then at the rules alone, and solves only after."""
        parent = self._parent
        if self._pins is not None and parent._values is not None:
            if self._pins_key in parent._clean:
                return True
            failing, complete = self._on_example(full)
            if not complete or (failing and self._fixed_failing):
                return False
            if not failing and self._eligible:
                parent._clean.add(self._pins_key)
                return True
            if failing and self._eligible and self._alone:  # (else the suspects are many: solve)
                return False
        return self.decisions is not None

    @functools.cached_property
    def warnings(self) -> frozenset[str]:
        """Ids of the warn rules that fire, as `plan.solve` and a pass over the warn rules give them
        (none for an unsatisfiable command)."""
        if self.decisions is None:
            return frozenset()
        readings = self._readings
        return frozenset(rule.id for rule in self.plan.warnings_to_check(self.user) if readings[id(rule)] is True)

    @functools.cached_property
    def verdicts(self) -> dict[int, Any]:
        """The verdict of every hard rule that reads no decision (True, False or the missing fact's
        key), by rule id."""
        graph, env, shared = self._graph, self._env, self.shared
        return {id(r): verdict(r, env, shared) for r in self.plan.hard_rules if not graph.rule_depends(r)}

    @functools.cached_property
    def base_decisions(self) -> Assignment | None:
        """The decisions under its decision-reading rules alone (None when those rules have no
        solution together): every group's, each decided once (or taken from the parent)."""
        structure = self.structure
        # Every group, even after one fails: a child takes the ones its change does not reach.
        held = [self._group(key, steps) for key, steps in zip(structure.group_keys, structure.groups)]
        return {d: v for found, _ in held for d, v in found.items()} if all(ok for _, ok in held) else None

    def rules_unsatisfiable(self, rules: list[Rule]) -> bool:
        """`not plan.satisfiable(user, facts, rules)` under a subset of the hard rules (QuickXplain's
        question). A broken decision-free rule decides it; without one, the subset is satisfiable when
        the decision-reading rules all together are (fewer rules never remove a solution: the
        decision search is complete, its look-ahead exact); anything else is solved."""
        fixed, reading = self.structure.kinds
        env, shared, reads_decisions = self._env, self.shared, False
        for rule in rules:  # a plain loop: QuickXplain asks this about hundreds of rules at a time
            rid = id(rule)
            if rid in reading:
                reads_decisions = True
            elif rid in fixed and verdict(rule, env, shared) is False:
                return True
        if not reads_decisions or self.base_decisions is not None:
            return False
        return not self.plan.satisfiable(self.user, self.facts, rules)

    def minimal_rules(self, rules: Iterable[Rule] | None = None) -> list[Rule]:
        """A minimal set of hard rules (from `rules`, default all) unsatisfiable with this command
        ([] when it is satisfiable under them), in rule order."""
        pool = list(self.plan.hard_rules if rules is None else rules)
        core_ids = {id(r) for r in quickxplain(pool, self.rules_unsatisfiable)}
        return [r for r in pool if id(r) in core_ids]

    def repair_flags(self, rules: Iterable[Rule]) -> frozenset[str]:
        """Flags whose pinning could change what these rules say: only they can undo an exclusion."""
        constrains = self.plan.graph.wide.constrains
        return self._graph.upstream(frozenset().union(*(constrains[id(r)] for r in rules)))

    # -- answers of a pinned child -------------------------------------------------------------

    @property
    def exclusions(self) -> list[tuple[Rule, ...]] | None:
        """None when legal; else groups of rules, each unsatisfiable by itself with the pins: every
        rule that is so alone, each a group, in rule order; when none is, one minimal set."""
        return self._exclusions(every=True)

    @property
    def first_exclusion(self) -> list[tuple[Rule, ...]] | None:
        """None when legal; else at most one group of `exclusions` (none when no single proof is at
        hand; one reading no decision first): cheaper, for searches that only need whether and why."""
        return self._exclusions(every=False)

    @property
    def environment(self) -> Env:
        """The pinned command's values as the legality check saw them: the parent's resolved values
        the pins cannot reach and the decisions they leave alone kept, the rest derived on demand."""
        pins = self._pinned_only()
        if self._parent._values is None:
            raise ValueError("a pinned launch's environment needs its parent's resolved configuration")
        return Env(self.plan, self.user, self.facts, self._parent._example(frozenset(pins))[1])

    def _exclusions(self, every: bool) -> list[tuple[Rule, ...]] | None:
        self._pinned_only()
        if self._legal(full=every):
            return None
        if self._parent._values is None:  # its parent's own flags conflict: no single rule is looked for
            return [tuple(self.minimal_rules())] if every else []
        if every:
            return [(rule,) for rule in self._alone] or [tuple(self.minimal_rules())]
        failing, complete = self._on_example(full=False)
        first = failing[-1:] if not complete else self._fixed_failing[:1] or self._alone[:1]
        return [(first[0],)] if first else []

    def _pinned_only(self) -> dict[str, Any]:
        if self._pins is None:
            raise ValueError("exclusions and environment are answers of a pinned launch: ask launch.pinned(pins)")
        return self._pins

    def _on_example(self, full: bool = True) -> tuple[list[Rule], bool]:
        """(the hard rules the pins reach that fail on its parent's resolved configuration with the
        pins swapped in, in rule order; whether that list is complete). Not `full`: the search may
        stop at the first failing rule that reads no decision here, then the list's last."""
        found = self._looked
        if found is None or (full and not found[1]):
            env, _, reached = self._view
            failing: list[Rule] = []
            for rule in self._parent._graph.constrained(reached):
                if not holds(rule, env):
                    failing.append(rule)
                    if not full and not self._graph.rule_depends(rule):
                        break
            else:
                full = True
            found = self._looked = (failing, full)
        return found

    @functools.cached_property
    def _view(self) -> tuple[Env, Assignment, frozenset[str]]:
        """(its parent's resolved configuration with the pins swapped in (`_example`), as an `Env`;
        the resolved decisions the pins leave alone; the flags the pins reach, not past a decision,
        which keeps its value): only those can have changed. When that configuration held with one
        pin fewer, only the last pin is walked from."""
        parent, pins = self._parent, self._pins
        fresh = next((frozenset({name}) for name in pins if len(pins) > 1
                      and _pin_key({k: v for k, v in pins.items() if k != name}) in parent._clean), frozenset(pins))
        decided, example = parent._example(frozenset(pins))
        reached = parent._graph.affected(fresh, through_decisions=False)
        return Env(self.plan, self.user, self.facts, example), decided, reached

    @functools.cached_property
    def _eligible(self) -> bool:
        """Whether each decision the pins reach may still take its resolved value there: then that
        configuration is an assignment of the pinned command (and with no rule failing, a legal one)."""
        env, decided, reached = self._view
        return all(self.plan.eligible(d, decided[d], env) for d in decided.keys() & reached)

    @functools.cached_property
    def _fixed_failing(self) -> list[Rule]:
        """The rules failing on its parent's configuration (`_on_example`) that read no decision
        once pinned: each excludes the pinned command by itself, whatever the solver chooses."""
        return [rule for rule in self._on_example()[0] if not self._graph.rule_depends(rule)]

    @functools.cached_property
    def _alone(self) -> list[Rule]:
        """The hard rules that exclude this pinned command each by itself, in rule order: those of
        `_fixed_failing`, and those reading decisions that have no solution alone. When the parent's
        configuration is an assignment of the pinned command (`_eligible`), only the rules failing
        there are suspects; else every rule the pins reach that fails with each decision at its most
        preferred value."""
        failing, _ = self._on_example()
        graph, preferred = self._parent._graph, Env(self.plan, self.user, self.facts, {})
        suspects = failing if self._eligible else [
            rule for rule in graph.constrained(graph.affected(self._pins)) if not holds(rule, preferred)]
        alone = {id(rule) for rule in self._fixed_failing}
        alone.update(id(rule) for rule in suspects if id(rule) not in alone and self._graph.rule_depends(rule)
                     and not self.plan.satisfiable(self.user, self.facts, [rule]))
        return [rule for rule in suspects if id(rule) in alone]

    def _example(self, names: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the resolved decisions pins on `names` leave alone, those plus every resolved scalar
        value they cannot reach): a flag no pin reaches keeps its value while the decisions stay."""
        found = self._examples.get(names)
        if found is None:
            decisions, stable = self._stable
            decided, example = {d: v for d, v in decisions.items() if d not in names}, stable.copy()
            for name in self._graph.affected(names):
                example.pop(name, None)
            example.update(decided)
            found = self._examples[names] = (decided, example)
        return found

    @functools.cached_property
    def _values(self) -> Mapping[str, Any] | None:
        """Its resolved values (None: it is unsatisfiable, or the caller said it does not resolve)."""
        values = self._resolved
        if values is SOLVE_ON_DEMAND:
            values = self.plan.solve(self.user, self.facts).values if self.satisfiable else None
        return values

    @functools.cached_property
    def _stable(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the resolved decisions of the flags it leaves unset, every resolved scalar value of those
        flags). Scalars only: a list or mapping may be stored frozen, which a rule could tell apart."""
        values = self._values
        unset = [name for name in values if name not in self.user]
        return ({n: values[n] for n in unset if n in self.plan.prefer_rules},
                {n: values[n] for n in unset if values[n] is None or type(values[n]) in _SCALARS})

    # -- the small answers, and what a child takes from its parent ---------------------------------

    @functools.cached_property
    def structure(self) -> core.Structure:
        return self.plan.structure(self.user, self.facts)

    @functools.cached_property
    def shared(self) -> Shared:
        """The solver's memo of its decision-free values (`Plan.shared`); a child's is seeded from its
        parent's where the change cannot reach."""
        shared, parent = self.plan.shared(self.user, self.facts), self._parent
        if parent is not None:
            flags, touched = parent._reach(self._change)
            for name, value in parent.shared.derived.items():
                if name not in flags:
                    shared.derived.setdefault(name, value)
            for rid, kept in parent.shared.verdicts.items():
                if rid not in touched:
                    shared.verdicts.setdefault(rid, kept)
        return shared

    @functools.cached_property
    def _env(self) -> Env:
        return Env(self.plan, self.user, self.facts, {}, self.shared)

    @functools.cached_property
    def _graph(self) -> Reach:
        return self.plan.graph.given(self.user)

    @functools.cached_property
    def _all_broken(self) -> list[Rule]:
        return [rule for rule in self.structure.fixed if verdict(rule, self._env, self.shared) is False]

    @functools.cached_property
    def _a_broken_rule(self) -> Rule | None:
        """A decision-free hard rule that fails (None: none does). A child looks first at its
        parent's broken rules the change leaves alone, then, in a bare Env, at the rules that
        rejected its siblings (most children of a fix search stop there, with no solver memo)."""
        parent, found = self._parent, None
        if parent is not None:
            touched = parent._reach(self._change)[1]
            found = next((rule for rule in parent._all_broken if id(rule) not in touched), None)
            if found is None:
                quick, fixed = Env(self.plan, self.user, self.facts, {}), self.structure.kinds[0]
                found = next((rule for rule in parent._rejecters
                              if id(rule) in fixed and _reading(rule, quick) is False), None)
        if found is None:
            env, shared = self._env, self.shared
            found = next((rule for rule in self.structure.fixed if verdict(rule, env, shared) is False), None)
        if found is not None and parent is not None:
            parent._rejecters = [found, *(rule for rule in parent._rejecters if rule is not found)]
        return found

    def _group(self, key: tuple, steps: list[core.Step]) -> tuple[Assignment, bool]:
        """One decision group's decisions and whether its rules hold (`key`: its decisions and its
        rules' ids), taken from the parent when the change reaches none of it."""
        found = self._groups.get(key)
        if found is None:
            found = self._parents_group(key) or core.decide_group(self.plan, self.user, self.facts, steps, self.shared)
            self._groups[key] = found
        return found

    def _parents_group(self, key: tuple) -> tuple[Assignment, bool] | None:
        parent = self._parent
        if parent is None:
            return None
        parent.base_decisions  # the parent decides each of its groups once, for all its children
        flags, touched = parent._reach(self._change)
        reached = any(name in flags for name in key[0]) or any(rid in touched for rid in key[1])
        return None if reached else parent._groups.get(key)

    @functools.cached_property
    def _readings(self) -> dict[int, Any]:
        """Every warn rule's condition that may apply, under its base decisions: the parent's for
        the rules reading nothing that the change or a decision taken differently reaches."""
        decided, parent, inherited = self.base_decisions, self._parent, {}
        if parent is not None and parent.base_decisions is not None:
            before = parent.base_decisions
            differ = {d for d, v in decided.items() if d not in before or not core.same(before[d], v)}
            touched = parent._reach(self._change | differ)[1]
            inherited = {rid: reading for rid, reading in parent._readings.items() if rid not in touched}
        env = Env(self.plan, self.user, self.facts, decided, self.shared)
        return {id(rule): inherited[id(rule)] if id(rule) in inherited else _reading(rule, env)
                for rule in self.plan.warnings_to_check(self.user)}

    def _reach(self, changed: Iterable[str]) -> tuple[frozenset[str], dict[int, Rule]]:
        """(the flags a change of `changed` reaches, the rules reading any of them)."""
        flags = self._graph.affected(changed)
        return flags, self._graph.touched(flags)


class Launches:
    """The launches one question asks about (an explanation: the command, the command without each
    conflict's flags, their fixes), under one plan and one set of facts: each made once."""

    def __init__(self, plan: Plan, facts: Mapping[str, Any]):
        self.plan, self.facts = plan, facts
        self._by_command: dict[tuple, Launch] = {}

    def of(self, user: Mapping[str, Any], near: Launch | None = None) -> Launch:
        """The launch of `user`; made, when new, as a child of `near` (a launch of this family
        differing in a few flags), which it then answers from."""
        key = _key(user)
        found = self._by_command.get(key)
        if found is None:
            found = Launch(self.plan, user, self.facts, self) if near is None else near.changed(user)
            self._by_command[key] = found
        return found


def _differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> frozenset[str]:
    missing = object()
    return frozenset(k for k in {*a, *b} if a.get(k, missing) != b.get(k, missing))


def _relaxed(values: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(getattr(values, "relaxed", ()))


def _key(user: Mapping[str, Any]) -> tuple:
    return repr(sorted(user.items())), _relaxed(user)


def _pin_key(pins: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in pins.items()))


def _reading(rule: Rule, env: Env) -> Any:
    """A hard rule's verdict or a warn rule's condition in `env`; None when a fact is unknown (an
    unchecked rule is not violated, and an unknown fact silences a warning)."""
    try:
        if rule.is_hard:
            return check(rule, env)
        return rule.when is None or bool(rule.when(env))
    except UnknownFact:
        return None

