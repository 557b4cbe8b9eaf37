"""Who reads whom, given which flags are set: what a change to a few flags can reach.

`Nearby` (resolver/solving/nearby.py) answers for a command's neighbours by recomputing only what
the changed flags reach; the index of readers and the layout of decision groups it needs depend on
which flags are set alone, and are kept by the solver's cache layer (resolver/solving/cache.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping

from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving.solve import Plan, RelaxedValues


def _reads(rule: Rule) -> frozenset[str]:
    """Every flag a rule's expressions read or ask `is_set`/`user_value` about."""
    return frozenset().union(*(e.flags | e.set_checks for e in rule.expressions()))


class _Index:
    """Who reads whom, given which flags the user set: an unset flag's default and prefer rules make
    it a reader of the flags they read; a set flag reads nothing (its value is the user's).

    `affected` and `touched` answer from flag names alone, so the cache layer keeps their answers
    (by the set flags and the question: every explanation of launches with these flags set shares
    them, and one explanation asks about the same few changes from several commands)."""

    MEMO_LIMIT = 8192  # answers kept before the store starts again (bounded memory)

    def __init__(self, plan: Plan, set_flags: frozenset[str]):
        self._cache = plan.cache
        self._set_flags = set_flags
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

    def affected(self, changed: Iterable[str]) -> frozenset[str]:
        """The changed flags and every unset flag whose value may follow from them."""
        key = frozenset(changed)

        def make() -> frozenset[str]:
            reached = set(key)
            pending = list(reached)
            while pending:
                for reader in self.readers.get(pending.pop(), ()):
                    if reader not in reached:
                        reached.add(reader)
                        pending.append(reader)
            return frozenset(reached)
        return self._cache.lookup("reach_affected", (self._set_flags, key), make, self.MEMO_LIMIT)

    def touched(self, flags: Iterable[str]) -> dict[int, Rule]:
        """The hard and warn rules reading any of `flags`, by id (shared: callers only read it)."""
        key = frozenset(flags)
        return self._cache.lookup("reach_touched", (self._set_flags, key),
                                  lambda: {id(rule): rule for name in key for rule in self.rules_reading.get(name, ())},
                                  self.MEMO_LIMIT)


def index_of(plan: Plan, set_flags: frozenset[str]) -> _Index:
    """The `_Index` of launches with these flags set, kept by the solver's cache layer."""
    return plan.cache.lookup("reach_index", set_flags, lambda: _Index(plan, set_flags), 64)


@dataclasses.dataclass(frozen=True)
class _Layout:
    """The decision groups of the commands with these flags set, as `Plan.decision_groups` gives
    them, with the ids of the rules in them (the decision-reading ones) and a key per group."""

    groups: tuple
    constrained: frozenset[int]
    keys: frozenset


def _layout_for(plan: Plan, set_flags: frozenset[str], relaxed: frozenset[str]) -> _Layout:
    return plan.cache.lookup("reach_layout", (set_flags, relaxed),
                             lambda: _make_layout(plan, set_flags, relaxed), 256)


def _make_layout(plan: Plan, set_flags: frozenset[str], relaxed: frozenset[str]) -> _Layout:
    groups = tuple(plan.decision_groups(RelaxedValues(dict.fromkeys(set_flags), relaxed)))
    return _Layout(groups, frozenset(id(rule) for _, rules in groups for rule in rules),
                   frozenset((names, tuple(map(id, rules))) for names, rules in groups))


def layout_of(plan: Plan, user: Mapping[str, Any]) -> _Layout:
    return _layout_for(plan, frozenset(user), frozenset(getattr(user, "relaxed", ())))
