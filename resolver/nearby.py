"""Checking many launches that differ from one launch in a few flags, without re-checking every rule.

An explanation asks "is this launch satisfiable?" about dozens of neighbours of one command: the
command under subsets of the rules (QuickXplain), and the command with one candidate fix applied.
Most hard rules read no solver decision, so their verdict is a function of the user values and facts
alone; a fix can only change the verdict of a rule that reads, directly or through unset derived
flags, a flag the fix changes. `Nearby` computes the decision-free verdicts of the base launch once,
and answers each question with exactly the answer of `Plan.satisfiable`:

- a neighbour that leaves a broken decision-free rule untouched is unsatisfiable with no solve;
- the verdicts of the rules it touches are computed (the first false one answers "no"), the others
  and the derived values nothing changed are copied from the base launch, and only then does the
  solver run, over the decisions alone.

The dependency closure is a superset (every expression of a rule counts, `is_set` reads too), so
copying is never wrong, only sometimes more cautious than needed.
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, Mapping

from resolver.expr import UnknownFact
from resolver.rules import Rule
from resolver.solve import Env, Plan, check


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
        for rule in plan.hard_rules:
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
        """The hard rules reading any of `flags`, by id."""
        return {id(rule): rule for name in flags for rule in self.rules_reading.get(name, ())}


@functools.lru_cache(maxsize=64)
def _index(plan: Plan, set_flags: frozenset[str]) -> _Index:
    return _Index(plan, set_flags)


class Nearby:
    """A base launch and its decision-free verdicts; `satisfiable` answers for neighbours of it."""

    def __init__(self, plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any]):
        self.plan, self.user, self.facts = plan, user, facts
        self.shared = plan.shared(user, facts)
        self._env = Env(plan, user, facts, {}, self.shared)
        self._index = _index(plan, frozenset(user))
        self._verdicts: dict[int, Any] | None = None   # id(rule) -> every decision-free verdict

    def verdict(self, rule: Rule) -> Any:
        """True, False or the missing fact's key for a decision-free rule; None for the others."""
        if self.plan.rule_depends(rule, self.user):
            return None
        return _verdict(rule, self._env, self.shared)

    def verdicts(self) -> dict[int, Any]:
        """The verdict of every decision-free hard rule of the base launch, by rule id."""
        if self._verdicts is None:
            found = ((id(rule), self.verdict(rule)) for rule in self.plan.hard_rules)
            self._verdicts = {rid: verdict for rid, verdict in found if verdict is not None}
        return self._verdicts

    def rules_unsatisfiable(self, rules: list[Rule]) -> bool:
        """`not plan.satisfiable(user, facts, rules)` for the base launch under a subset of the hard
        rules: a broken decision-free rule decides it, a subset of decision-free rules that hold
        is satisfiable, and anything else is solved."""
        verdicts = [self.verdict(rule) for rule in rules]
        if any(verdict is False for verdict in verdicts):
            return True
        if all(verdict is not None for verdict in verdicts):
            return False
        return not self.plan.satisfiable(self.user, self.facts, rules)

    def satisfiable(self, values: Mapping[str, Any], changed: set[str]) -> bool:
        """`plan.satisfiable(values, facts)` for `values`, which differ from the base launch only in
        the flags `changed` (set, unset or given another value)."""
        plan = self.plan
        base = self.verdicts()
        flags = self._index.affected(changed)
        touched = self._index.touched(flags)
        if any(verdict is False and rid not in touched for rid, verdict in base.items()):
            return False  # a broken rule reads nothing the change reaches
        shared = plan.shared(values, self.facts)
        for name, value in self.shared.derived.items():
            if name not in flags:
                shared.derived.setdefault(name, value)
        env = Env(plan, values, self.facts, {}, shared)
        for rule in touched.values():
            if not plan.rule_depends(rule, values) and _verdict(rule, env, shared) is False:
                return False
        for rid, verdict in base.items():
            if rid not in touched:
                shared.verdicts.setdefault(rid, verdict)
        return plan.satisfiable(values, self.facts)


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
