"""Checking many launches that differ from one launch in a few flags, without re-checking every rule.

An explanation asks about dozens of neighbours of one command: the command under subsets of the
rules (QuickXplain), and the command with one candidate fix applied (is it satisfiable, and which
warnings does it raise?). A fix can only change what reads, directly or through unset derived flags,
a flag the fix changes; everything else keeps the base command's answer. `Nearby` works out the
base command's answers once and gives, for each neighbour, exactly what solving it would:

- most hard rules read no solver decision, so their verdict depends on user values and facts alone:
  a neighbour that leaves a broken one untouched is unsatisfiable with no solve, and only the
  verdicts of the rules it touches are computed (the others, and the derived values nothing
  changed, are copied from the base command);
- decisions fall into independent groups (`Plan.decision_groups`); a group reading nothing the
  change reaches decides as in the base command, so only the other groups are decided again;
- the warnings (and `solve`'s final check of the decision-reading rules) are read again only for
  rules that read something whose value may differ.

What a rule reads is taken widely (every expression of a rule, `is_set` questions too), so copying
is never wrong, only sometimes more cautious than needed.

Each answer is what a plain question to the core about that neighbour gives (its `plan.decisions`,
`plan.satisfiable`, the warnings of its `plan.solve`); tests/test_solver_queries.py holds every
answer, with the cache layer on and off, to those full solves (tests/reference_solver.py, the
oracle). With the layer off the same code runs and simply keeps nothing between questions.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving.depgraph import layout_of
from accord.resolver.solving.solve import Env, Plan, RelaxedValues, check, holds


@dataclasses.dataclass
class Neighbour:
    """A satisfiable neighbour: its values, the decisions `solve` makes for it, the flags whose
    value may differ from the base command's under the base decisions (None: any of them), and its
    decision-reading rules."""

    values: Mapping[str, Any]
    decided: dict[str, Any]
    differ: set[str] | None
    constrained: set[int]        # ids of its decision-reading hard rules
    held: bool = False           # every one of them is known to hold under these decisions


class Nearby:
    """A base command and what solving it gives; `solve` and `warnings` answer for its neighbours."""

    def __init__(self, plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                 cache: dict | None = None):
        # A copy: callers go on changing theirs (find_conflicts drops the flags of each conflict).
        user = RelaxedValues(user, user.relaxed) if isinstance(user, RelaxedValues) else dict(user)
        self.plan, self.user, self.facts = plan, user, facts
        self._cache = cache                            # the explanation's other Nearby objects
        self._all: tuple | None = None                 # (plan.decisions(user, facts), all rules held)
        self.shared = plan.shared(user, facts)
        self._env = Env(plan, user, facts, {}, self.shared)
        # Ids of the decision-free rules that hold whatever the values (`Plan.holds_anyway`): their
        # verdict is True without evaluating them.
        self._anyway = plan.holds_anyway(user, facts)[0]
        self._index = plan.reach(user)                  # who reads whom, with these flags set
        self._verdicts: dict[int, Any] | None = None   # id(rule) -> every decision-free verdict
        layout = layout_of(plan, user)
        self._groups = layout.groups                    # decision groups: (decisions, rules)
        self._constrained = layout.constrained          # ids of the decision-reading rules
        self._group_keys = layout.keys
        self._broken: set[int] | None = None          # ids of the broken decision-free rules
        self._decided: tuple | None = None             # (decisions under its decision rules alone, all held)
        self._final: dict[int, Any] | None = None      # id(rule) -> its reading under those decisions
        self._rejecters: list[Rule] = []               # rules that proved neighbours unsatisfiable, latest first
        self._reach: dict[frozenset, tuple] = {}       # changed flags -> (flags reached, rules reading them)
        self._warned: tuple | None = None              # (decisions, warnings) of the base command itself

    def verdict(self, rule: Rule) -> Any:
        """True, False or the missing fact's key for a decision-free rule; None for the others."""
        if id(rule) in self._constrained:
            return None
        if id(rule) in self._anyway:
            return True
        return _verdict(rule, self._env, self.shared)

    def verdicts(self) -> dict[int, Any]:
        """The verdict of every decision-free hard rule of the base command, by rule id."""
        if self._verdicts is None:
            found = ((id(rule), self.verdict(rule)) for rule in self.plan.hard_rules)
            self._verdicts = {rid: verdict for rid, verdict in found if verdict is not None}
        return self._verdicts

    def decisions(self) -> dict[str, Any] | None:
        """`plan.decisions(user, facts)` for the base command, solved once."""
        if self._all is None:
            plan = self.plan
            if any(self.verdict(rule) is False for rule in plan.hard_rules):
                self._all = (None, False)
            else:
                found = _preferred(plan, self.user, self.facts, self._groups)
                self._all = (found, True) if found is not None else (plan.decisions(self.user, self.facts), False)
        return self._all[0]

    def base_decisions(self) -> dict[str, Any] | None:
        """The decisions of the base command under its decision-reading rules alone (None when
        those rules have no solution together), solved once."""
        if self._decided is None:
            found = _preferred(self.plan, self.user, self.facts, self._groups)
            if found is not None:
                self._decided = (found, True)
            else:
                rules = [rule for _, group in self._groups for rule in group]
                self._decided = (self.plan.decisions(self.user, self.facts, rules), False)
        return self._decided[0]

    def rules_unsatisfiable(self, rules: list[Rule]) -> bool:
        """`not plan.satisfiable(user, facts, rules)` for the base command under a subset of the hard
        rules. A broken decision-free rule decides it; without one, the subset is satisfiable when
        the decision-reading rules all together are (fewer rules never remove a solution: the
        decision search is complete, its look-ahead exact); anything else is solved."""
        known, constrained, decision_free = self.shared.verdicts, self._constrained, True
        for rule in rules:  # a plain loop: QuickXplain asks this about hundreds of rules at a time
            rid = id(rule)
            if rid in constrained:
                decision_free = False
                continue
            verdict = known.get(rid)
            if verdict is None and rid not in self._anyway:
                verdict = _verdict(rule, self._env, self.shared)
            if verdict is False:
                return True
        if decision_free or self.base_decisions() is not None:
            return False
        return not self.plan.satisfiable(self.user, self.facts, rules)

    def seed(self, values: Mapping[str, Any]) -> None:
        """Copy into the solver's memo for `values` (`Plan.shared`) the decision-free verdicts and
        derived values of the base command that the flags in which they differ cannot reach, so
        no solve of `values` computes them again (with the cache layer off that memo is not kept,
        and a solve of `values` computes them afresh)."""
        if getattr(values, "relaxed", None) or getattr(self.user, "relaxed", None):
            return  # `is_set` reads relaxed flags differently: not worth the care
        missing = object()
        changed = {k for k in {*values, *self.user} if values.get(k, missing) != self.user.get(k, missing)}
        flags, touched = self._reached(changed)
        shared = self.plan.shared(values, self.facts)
        self._seed_derived(shared, flags)
        self._seed_verdicts(shared, touched)

    def _reached(self, changed: set[str]) -> tuple[set[str], dict[int, Rule]]:
        key = frozenset(changed)
        found = self._reach.get(key)
        if found is None:
            flags = self._index.affected(changed)
            found = self._reach[key] = (flags, self._index.touched(flags))
        return found

    def _seed_derived(self, shared, flags: set[str]) -> None:
        for name, value in self.shared.derived.items():
            if name not in flags:
                shared.derived.setdefault(name, value)

    def _seed_verdicts(self, shared, touched: dict[int, Rule]) -> None:
        for rid, verdict in self.shared.verdicts.items():
            if rid not in touched:
                shared.verdicts.setdefault(rid, verdict)

    def solve(self, values: Mapping[str, Any], changed: set[str]) -> Neighbour | None:
        """What `plan.decisions(values, facts)` says about `values`, which differ from the base
        command only in the flags `changed` (set, unset or given another value): None when it is
        unsatisfiable, else its decisions."""
        plan = self.plan
        known = self._known(values)
        if known is not None:  # solved in full already (say, a drop that two conflicts share)
            decided, held = known._all
            return None if decided is None else Neighbour(values, decided, None, known._constrained, held)
        if self._broken is None:
            self._broken = {rid for rid, verdict in self.verdicts().items() if verdict is False}
        flags, touched = self._reached(changed)
        if any(rid not in touched for rid in self._broken):
            return None  # a broken rule reads nothing the change reaches
        layout = layout_of(plan, values)
        # The rules that rejected earlier neighbours are the likeliest to reject this one: they are
        # tried first, in a bare Env (most neighbours stop here, and need no solver memo).
        quick = Env(plan, values, self.facts, {})
        for rule in self._rejecters:
            if id(rule) in touched and id(rule) not in layout.constrained and _reading(rule, quick) is False:
                self._rejected_by(rule)
                return None
        shared = plan.shared(values, self.facts)
        self._seed_derived(shared, flags)
        env = Env(plan, values, self.facts, {}, shared)
        anyway = plan.holds_anyway(values, self.facts)[0]
        for rule in touched.values():
            if rule.is_hard and id(rule) not in layout.constrained and id(rule) not in anyway \
                    and _verdict(rule, env, shared) is False:
                self._rejected_by(rule)
                return None
        self._seed_verdicts(shared, touched)
        decided = self.base_decisions()
        if decided is None:
            other = self._other(values)
            again = other.decisions()
            return None if again is None else Neighbour(values, again, None, layout.constrained, other._all[1])
        # Every decision-free rule holds (checked above). A decision group that is also one of the
        # base command's and reads nothing the change reaches decides as there; the others are
        # decided again (other flags set can merge or split groups).
        kept: dict[str, Any] = {}
        redo: list[tuple] = []
        for names, rules in layout.groups:
            if (names, tuple(map(id, rules))) in self._group_keys and not any(var in flags for var in names) \
                    and not any(id(rule) in touched for rule in rules):
                kept.update((var, decided[var]) for var in names)
            else:
                redo.append((names, rules))
        if not redo:
            return Neighbour(values, kept, flags, layout.constrained, self._decided[1])
        again, held = _preferred(plan, values, self.facts, redo), self._decided[1]
        if again is None:
            again, held = plan.decisions(values, self.facts, [rule for _, rules in redo for rule in rules]), False
        if again is None:
            return None
        redone = [var for names, _ in redo for var in names]
        return Neighbour(values, {**kept, **again}, self._index.affected([*changed, *redone]), layout.constrained,
                         held)

    def warnings(self, neighbour: Neighbour) -> set[str]:
        """Ids of the warn rules that fire for a satisfiable neighbour, as `solve` and a pass over
        `plan.warn_rules` give them. Like `solve`, the decision-reading hard rules are checked once
        more on the result, and a neighbour failing that has no warnings."""
        if neighbour.differ is None:
            return self.command_warnings(neighbour.values, neighbour.decided)
        return self._warnings(neighbour)

    def command_warnings(self, values: Mapping[str, Any], decided: dict[str, Any]) -> set[str]:
        """The warnings of a command with these decisions, read in full (and remembered by that
        command's own Nearby); `decided` is `plan.decisions(values, facts)`."""
        return self._other(values).own_warnings(decided)

    def own_warnings(self, decided: dict[str, Any]) -> set[str]:
        """The warnings of the base command itself with these decisions, read once."""
        if self._warned is None or self._warned[0] != decided:
            held = self._all is not None and self._all[0] == decided and self._all[1]
            self._warned = (dict(decided), self._warnings(Neighbour(self.user, decided, None, self._constrained, held)))
        return set(self._warned[1])

    def _warnings(self, neighbour: Neighbour) -> set[str]:
        plan, values = self.plan, neighbour.values
        env = Env(plan, values, self.facts, neighbour.decided, plan.shared(values, self.facts))
        final = self._base_final() if neighbour.differ is not None else {}
        touched = self._index.touched(neighbour.differ) if neighbour.differ is not None else None
        constrained = neighbour.constrained
        anyway = plan.holds_anyway(values, self.facts)[1]
        fired = set()
        # Decisions found as the preferred completion were checked against every rule that reads
        # them on exactly these values: `solve`'s final check can only agree.
        for rule in plan.warn_rules if neighbour.held else (*plan.hard_rules, *plan.warn_rules):
            if rule.is_hard and (id(rule) not in constrained or id(rule) in anyway):
                continue  # decision-free: already held before the decisions were made; or holds anyway
            if touched is not None and id(rule) not in touched:
                # (a hard rule is absent when the base decisions were checked against all of them)
                reading = final.get(id(rule), True) if rule.is_hard else final[id(rule)]
            else:
                reading = _reading(rule, env)
            if rule.is_hard and reading is False:
                return set()
            if not rule.is_hard and reading is True:
                fired.add(rule.id)
        return fired

    def _rejected_by(self, rule: Rule) -> None:
        if self._rejecters[:1] != [rule]:
            self._rejecters = [rule, *(r for r in self._rejecters if r is not rule)]

    def _known(self, values: Mapping[str, Any]) -> "Nearby | None":
        """The Nearby of `values` if the explanation has one that solved it in full."""
        if self._cache is None:
            return None
        found = self._cache.get(_key(values))
        return found if found is not None and found._all is not None else None

    def _other(self, values: Mapping[str, Any]) -> "Nearby":
        """The `Nearby` of another command (kept in the explanation's cache, if there is one)."""
        return nearby_for(self.plan, values, self.facts, self._cache)

    def _base_final(self) -> dict[int, Any]:
        """Every decision-reading hard rule's verdict and every warn rule's condition for the base
        command under its own decisions (what a neighbour copies for the rules it does not touch)."""
        if self._final is None:
            env = Env(self.plan, self.user, self.facts, self.base_decisions(), self.shared)
            held = self._decided[1]
            anyway = self.plan.holds_anyway(self.user, self.facts)[1]  # read as holding, below
            rules = [] if held else [r for r in self.plan.hard_rules
                                     if id(r) in self._constrained and id(r) not in anyway]
            self._final = {id(rule): _reading(rule, env) for rule in (*rules, *self.plan.warn_rules)}
        return self._final


def nearby_for(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any], cache: dict | None) -> Nearby:
    """The `Nearby` of a command, shared through `cache` (one per explanation: the facts are the
    same throughout) by the steps that ask about the same command."""
    if cache is None:
        return Nearby(plan, user, facts)
    key = _key(user)
    found = cache.get(key)
    if found is None:
        found = cache[key] = Nearby(plan, user, facts, cache)
    return found


def seed_from_all(cache: dict, values: Mapping[str, Any]) -> None:
    """Seed `values` from every command the explanation has solved (each copies what the flags in
    which it differs cannot reach; together they leave little to compute)."""
    for nearby in list(cache.values()):
        nearby.seed(values)


def _preferred(plan: Plan, values: Mapping[str, Any], facts: Mapping[str, Any], groups) -> dict[str, Any] | None:
    """The decisions of these groups when every decision's most preferred eligible value already
    satisfies their rules, else None (then the caller solves). The greedy search would pick exactly
    these: at each step the first candidate closes its rules and the preferred completion is its
    own look-ahead witness. Each value is kept as it is read (in decision order, so a decision
    whose eligibility others read comes first): an undecided value is otherwise recomputed on
    every read."""
    decided: dict[str, Any] = {}
    env = Env(plan, values, facts, decided, plan.shared(values, facts))
    for names, _ in groups:
        for var in names:
            decided[var] = env.flag(var)
    anyway = plan.holds_anyway(values, facts)[1]  # hold whatever the decisions: not checked
    if all(holds(rule, env) for _, rules in groups for rule in rules if id(rule) not in anyway):
        return decided
    return None


def _key(user: Mapping[str, Any]) -> tuple:
    return repr(sorted(user.items())), frozenset(getattr(user, "relaxed", ()))


def _reading(rule: Rule, env: Env) -> Any:
    """A hard rule's verdict or a warn rule's condition in `env`; None when a fact is unknown (an
    unchecked rule is not violated, and an unknown fact silences a warning)."""
    try:
        if rule.is_hard:
            return check(rule, env)
        return rule.when is None or bool(rule.when(env))
    except UnknownFact:
        return None


def _verdict(rule: Rule, env: Env, shared) -> Any:
    """A decision-free rule's verdict (True, False or the missing fact's key), kept in `shared`
    where the solver looks for it."""
    verdict = shared.verdicts.get(id(rule))
    if verdict is None:
        try:
            verdict = check(rule, env)
        except UnknownFact as missing:
            verdict = missing.key
        shared.verdicts[id(rule)] = verdict
    return verdict
