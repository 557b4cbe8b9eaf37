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
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable, Mapping

from resolver.expr import UnknownFact
from resolver.rules import Rule
from resolver.solve import Env, Plan, RelaxedValues, check


def _reads(rule: Rule) -> frozenset[str]:
    """Every flag a rule's expressions read or ask `is_set`/`user_value` about."""
    return frozenset().union(*(e.flags | e.set_checks for e in rule.expressions()))


class _Index:
    """Who reads whom, given which flags the user set: an unset flag's default and prefer rules make
    it a reader of the flags they read; a set flag reads nothing (its value is the user's)."""

    def __init__(self, plan: Plan, set_flags: frozenset[str]):
        self.readers: dict[str, set[str]] = {}
        for name, rules in (*plan.default_rules.items(), *plan.prefer_rules.items()):
            if name in set_flags:
                continue
            for rule in rules:
                for read in _reads(rule):
                    self.readers.setdefault(read, set()).add(name)
        self.rules_reading: dict[str, list[Rule]] = {}
        for rule in (*plan.hard_rules, *plan.warn_rules):
            for read in _reads(rule):
                self.rules_reading.setdefault(read, []).append(rule)

    def affected(self, changed: Iterable[str]) -> set[str]:
        """The changed flags and every unset flag whose value may follow from them."""
        found = set(changed)
        pending = list(found)
        while pending:
            for reader in self.readers.get(pending.pop(), ()):
                if reader not in found:
                    found.add(reader)
                    pending.append(reader)
        return found

    def touched(self, flags: Iterable[str]) -> dict[int, Rule]:
        """The hard and warn rules reading any of `flags`, by id."""
        return {id(rule): rule for name in flags for rule in self.rules_reading.get(name, ())}


@functools.lru_cache(maxsize=64)
def _index(plan: Plan, set_flags: frozenset[str]) -> _Index:
    return _Index(plan, set_flags)


@dataclasses.dataclass
class Neighbour:
    """A satisfiable neighbour: its values, the decisions `solve` makes for it, and the flags whose
    value may differ from the base command's under the base decisions (None: any of them)."""

    values: Mapping[str, Any]
    decided: dict[str, Any]
    differ: set[str] | None


class Nearby:
    """A base command and what solving it gives; `solve` and `warnings` answer for its neighbours."""

    def __init__(self, plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                 cache: dict | None = None):
        # A copy: callers go on changing theirs (find_conflicts drops the flags of each conflict).
        user = RelaxedValues(user, user.relaxed) if isinstance(user, RelaxedValues) else dict(user)
        self.plan, self.user, self.facts = plan, user, facts
        self._cache = cache                            # the explanation's other Nearby objects
        self._all: tuple[dict[str, Any] | None] | None = None   # plan.decisions(user, facts)
        self.shared = plan.shared(user, facts)
        self._env = Env(plan, user, facts, {}, self.shared)
        self._index = _index(plan, frozenset(user))
        self._verdicts: dict[int, Any] | None = None   # id(rule) -> every decision-free verdict
        self._groups = plan.decision_groups(user)     # decision groups: (decisions, rules)
        self._constrained = {id(rule) for _, rules in self._groups for rule in rules}  # decision-reading rules
        self._decided: tuple | None = None             # (the base's decisions under its decision rules,)
        self._final: dict[int, Any] | None = None      # id(rule) -> its reading under those decisions
        self._rejects: dict[int, int] = {}             # id(rule) -> neighbours it proved unsatisfiable
        self._warned: tuple | None = None              # (decisions, warnings) of the base command itself

    def verdict(self, rule: Rule) -> Any:
        """True, False or the missing fact's key for a decision-free rule; None for the others."""
        if id(rule) in self._constrained:
            return None
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
            self._all = (self.plan.decisions(self.user, self.facts),)
        return self._all[0]

    def base_decisions(self) -> dict[str, Any] | None:
        """The decisions of the base command under its decision-reading rules alone (None when
        those rules have no solution together), solved once."""
        if self._decided is None:
            rules = [rule for _, group in self._groups for rule in group]
            self._decided = (self.plan.decisions(self.user, self.facts, rules),)
        return self._decided[0]

    def rules_unsatisfiable(self, rules: list[Rule]) -> bool:
        """`not plan.satisfiable(user, facts, rules)` for the base command under a subset of the hard
        rules. A broken decision-free rule decides it; without one, the subset is satisfiable when
        the decision-reading rules all together are (fewer rules never remove a solution: the
        decision search is complete, its look-ahead exact); anything else is solved."""
        verdicts = [self.verdict(rule) for rule in rules]
        if any(verdict is False for verdict in verdicts):
            return True
        if all(verdict is not None for verdict in verdicts) or self.base_decisions() is not None:
            return False
        return not self.plan.satisfiable(self.user, self.facts, rules)

    def solve(self, values: Mapping[str, Any], changed: set[str]) -> Neighbour | None:
        """What `plan.decisions(values, facts)` says about `values`, which differ from the base
        command only in the flags `changed` (set, unset or given another value): None when it is
        unsatisfiable, else its decisions."""
        plan = self.plan
        base = self.verdicts()
        flags = self._index.affected(changed)
        touched = self._index.touched(flags)
        if any(verdict is False and rid not in touched for rid, verdict in base.items()):
            return None  # a broken rule reads nothing the change reaches
        shared = plan.shared(values, self.facts)
        for name, value in self.shared.derived.items():
            if name not in flags:
                shared.derived.setdefault(name, value)
        env = Env(plan, values, self.facts, {}, shared)
        same_flags = frozenset(values) == frozenset(self.user) and not getattr(self.user, "relaxed", None)
        constrained = self._constrained if same_flags else self._other(values)._constrained
        # The rules that rejected earlier neighbours are the likeliest to reject this one: first.
        for rule in sorted(touched.values(), key=lambda r: self._rejects.get(id(r), 0), reverse=True):
            if rule.is_hard and id(rule) not in constrained and _verdict(rule, env, shared) is False:
                self._rejects[id(rule)] = self._rejects.get(id(rule), 0) + 1
                return None
        for rid, verdict in base.items():
            if rid not in touched:
                shared.verdicts.setdefault(rid, verdict)
        decided = self.base_decisions()
        if decided is None or not same_flags:
            # Other flags set give other decision groups: decide them all.
            again = self._other(values).decisions()
            return None if again is None else Neighbour(values, again, None)
        # Every decision-free rule holds (checked above); a decision group that reads nothing the
        # change reaches decides as in the base command, so only the others are decided again.
        kept: dict[str, Any] = {}
        redo: list[Rule] = []
        redone: list[str] = []
        for names, rules in self._groups:
            if any(var in flags for var in names) or any(id(rule) in touched for rule in rules):
                redo += rules
                redone += names
            else:
                kept.update((var, decided[var]) for var in names)
        if not redo:
            return Neighbour(values, kept, flags)
        again = plan.decisions(values, self.facts, redo)
        if again is None:
            return None
        return Neighbour(values, {**kept, **again}, self._index.affected([*changed, *redone]))

    def warnings(self, neighbour: Neighbour) -> set[str]:
        """Ids of the warn rules that fire for a satisfiable neighbour, as `solve` and a pass over
        `plan.warn_rules` give them. Like `solve`, the decision-reading hard rules are checked once
        more on the result, and a neighbour failing that has no warnings."""
        if neighbour.differ is None:  # read in full, and remembered by that command's Nearby
            return self._other(neighbour.values).own_warnings(neighbour.decided)
        return self._warnings(neighbour)

    def own_warnings(self, decided: dict[str, Any]) -> set[str]:
        """The warnings of the base command itself with these decisions, read once."""
        if self._warned is None or self._warned[0] != decided:
            self._warned = (dict(decided), self._warnings(Neighbour(self.user, decided, None)))
        return set(self._warned[1])

    def _warnings(self, neighbour: Neighbour) -> set[str]:
        plan, values = self.plan, neighbour.values
        env = Env(plan, values, self.facts, neighbour.decided, plan.shared(values, self.facts))
        final = self._base_final() if neighbour.differ is not None else {}
        touched = self._index.touched(neighbour.differ) if neighbour.differ is not None else None
        constrained = self._constrained if neighbour.differ is not None else self._other(values)._constrained
        fired = set()
        for rule in (*plan.hard_rules, *plan.warn_rules):
            if rule.is_hard and id(rule) not in constrained:
                continue  # decision-free: already held before the decisions were made
            if touched is not None and id(rule) not in touched:
                reading = final[id(rule)]
            else:
                reading = _reading(rule, env)
            if rule.is_hard and reading is False:
                return set()
            if not rule.is_hard and reading is True:
                fired.add(rule.id)
        return fired

    def _other(self, values: Mapping[str, Any]) -> "Nearby":
        """The `Nearby` of another command (kept in the explanation's cache, if there is one)."""
        return nearby_for(self.plan, values, self.facts, self._cache)

    def _base_final(self) -> dict[int, Any]:
        """Every decision-reading hard rule's verdict and every warn rule's condition for the base
        command under its own decisions (what a neighbour copies for the rules it does not touch)."""
        if self._final is None:
            env = Env(self.plan, self.user, self.facts, self.base_decisions(), self.shared)
            rules = [r for r in self.plan.hard_rules if id(r) in self._constrained]
            self._final = {id(rule): _reading(rule, env) for rule in (*rules, *self.plan.warn_rules)}
        return self._final


def nearby_for(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any], cache: dict | None) -> Nearby:
    """The `Nearby` of a command, shared through `cache` (one per explanation: the facts are the
    same throughout) by the steps that ask about the same command."""
    if cache is None:
        return Nearby(plan, user, facts)
    key = (repr(sorted(user.items())), frozenset(getattr(user, "relaxed", ())))
    found = cache.get(key)
    if found is None:
        found = cache[key] = Nearby(plan, user, facts, cache)
    return found


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
