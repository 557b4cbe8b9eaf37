"""Who reads whom: one dependency graph per compiled plan, and what it says given the set flags.

`DependencyGraph` is built once per `Plan` from the rules alone: per flag, what the rules computing
its value read (narrowly, the flags their values read; widely, every expression, `is_set` questions
too) and who reads it back; per rule, the flags it reads. A flag the user set reads nothing (its
value is the user's), so every walk depends on which flags are set: `Reach` is the graph given them
(kept by the cache layer, store `reach`), and answers every walk the solver takes: the decisions a
flag or hard rule depends on (`depends`, `rule_depends`: the solver's structure and `Env`'s
decision-free values), what a change or a pin reaches (`affected`, `touched`, `constrained`: a
`Launch`'s children), and what can change a rule (`upstream`: `Launch.repair_flags`). Each walk's
answer is kept on the `Reach` (bounded), so it is walked once.
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, Mapping, NamedTuple

from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving.env import PlanView

Plan = PlanView  # solve.py's `Plan`, which imports this module: nothing here imports it back

WALKS_KEPT = 8192  # answers of one walk kept per `Reach` before it starts again (bounded memory)


def _reads(rule: Rule) -> frozenset[str]:
    """Every flag a rule's expressions read or ask `is_set`/`user_value` about."""
    return frozenset().union(*(e.flags | e.set_checks for e in rule.expressions()))


def _constrains(rule: Rule) -> frozenset[str]:
    """The flags a hard rule's condition and requirement read (`is_set` questions too)."""
    return frozenset().union(*(e.flags | e.set_checks for e in (rule.when, rule.require) if e is not None))


class Wide(NamedTuple):
    """The plan's reads taken widely (`is_set` questions too)."""

    reads: dict[str, frozenset[str]]       # flag -> every flag its default and prefer rules read
    readers: dict[str, set[str]]           # flag -> the computed flags reading it
    rules_reading: dict[str, list[Rule]]   # flag -> the hard and warn rules reading it
    constrains: dict[int, frozenset[str]]  # id(hard rule) -> the flags its condition and requirement read


class DependencyGraph:
    """The plan's flags and rules, each with what it reads and who reads it (see the module
    docstring). What `Reach.depends` reads is built with the plan; the wide reads on first use."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.decisions = frozenset(plan.prefer_rules)
        # The flags a computed value reads: a decision's eligibility, a derived flag's defaults;
        # every other catalog flag reads nothing (not in the catalog: not here at all).
        self.value_reads: dict[str, frozenset[str]] = dict.fromkeys(plan.catalog.flags, frozenset())
        for flag, rules in plan.default_rules.items():
            self.value_reads[flag] = frozenset().union(*(r.reads_flags for r in rules))
        for flag, rules in plan.prefer_rules.items():
            self.value_reads[flag] = frozenset().union(*(r.reads_flags for r in rules))

    @functools.cached_property
    def wide(self) -> Wide:
        """What the walks of `Reach` follow (see `Wide`), built on first use."""
        plan = self.plan
        wide = Wide({}, {}, {}, {id(rule): _constrains(rule) for rule in plan.hard_rules})
        for name, rules in (*plan.default_rules.items(), *plan.prefer_rules.items()):
            for rule in rules:
                found = _reads(rule)
                wide.reads[name] = wide.reads.get(name, frozenset()) | found
                for read in found:
                    wide.readers.setdefault(read, set()).add(name)
        for rule in (*plan.hard_rules, *plan.warn_rules):
            for read in _reads(rule):
                wide.rules_reading.setdefault(read, []).append(rule)
        return wide

    def given(self, user: Mapping[str, Any]) -> Reach:
        """The graph given which flags `user` sets, kept by the solver's cache layer."""
        set_flags = frozenset(user)
        return self.plan.cache.lookup("reach", set_flags, lambda: Reach(self, set_flags), 512)


class Reach:
    """What the dependency graph says with these flags set (see the module docstring)."""

    def __init__(self, graph: DependencyGraph, set_flags: frozenset[str]):
        self.graph = graph
        self.set_flags = set_flags
        self._depends_of: dict[str, frozenset] = {}  # flag -> the decisions its value depends on
        self._by_rule: dict[int, frozenset] = {}     # id(hard rule) -> the decisions it reads
        self._walks: dict[tuple, Any] = {}          # (walk, its argument) -> what it found

    def depends(self, names: Iterable[str]) -> frozenset:
        """The decisions the given flags' values depend on."""
        out: set[str] = set()
        for name in names:
            found = self._depends_of.get(name)
            if found is None:
                reads = self.graph.value_reads.get(name)
                if reads is None or name in self.set_flags:  # not a catalog flag, or the user's value
                    continue
                self._depends_of[name] = frozenset()  # breaks cycles; lint rejects them anyway
                found = self.depends(reads)
                found = self._depends_of[name] = found | {name} if name in self.graph.decisions else found
            out |= found
        return frozenset(out)

    def eligibility(self, decision: str) -> frozenset:
        """The other decisions a decision's eligibility (its prefer rules' conditions) depends on."""
        return self.depends(self.graph.value_reads[decision]) - {decision}

    def rule_depends(self, rule: Rule) -> frozenset:
        """The decisions a hard rule's verdict depends on."""
        deps = self._by_rule.get(id(rule))
        if deps is None:
            deps = self._by_rule[id(rule)] = self.depends(rule.constrained_flags)
        return deps

    def _walk(self, key: tuple, make) -> Any:
        """What a walk found for `key`, walked once (bounded: the table starts again when full)."""
        found = self._walks.get(key)
        if found is None:
            if len(self._walks) >= WALKS_KEPT:
                self._walks.clear()
            found = self._walks[key] = make()
        return found

    def affected(self, changed: Iterable[str], through_decisions: bool = True) -> frozenset[str]:
        """The changed flags and every unset flag whose value may follow from them. Without
        `through_decisions`, a decision reached is not walked past: what reads it is not reached
        through it (while the decisions stay fixed, as in a pinned launch's `_on_example`)."""
        key = frozenset(changed)

        def make() -> frozenset[str]:
            readers, reached = self.graph.wide.readers, set(key)
            pending = list(reached)
            while pending:
                for reader in readers.get(pending.pop(), ()):
                    if reader not in reached and reader not in self.set_flags:
                        reached.add(reader)
                        if through_decisions or reader not in self.graph.decisions:
                            pending.append(reader)
            return frozenset(reached)
        return self._walk(("affected", key, through_decisions), make)

    def touched(self, flags: Iterable[str]) -> dict[int, Rule]:
        """The hard and warn rules reading any of `flags`, by id (shared: callers only read it)."""
        key, rules_reading = frozenset(flags), self.graph.wide.rules_reading
        return self._walk(("touched", key),
                          lambda: {id(rule): rule for name in key for rule in rules_reading.get(name, ())})

    def constrained(self, flags: Iterable[str]) -> list[Rule]:
        """The hard rules whose condition or requirement reads any of `flags`, in rule order: the
        only ones whose verdict these flags can change (`touched` less warnings and messages)."""
        key, constrains = frozenset(flags), self.graph.wide.constrains
        rules = self.graph.plan.hard_rules
        return self._walk(("constrained", key), lambda: [r for r in rules if not constrains[id(r)].isdisjoint(key)])

    def upstream(self, names: Iterable[str]) -> frozenset[str]:
        """`names` and every flag whose value can change one of theirs: while a flag is unset, what
        its default and prefer rules read, and so on (the reverse walk of `affected`)."""
        reads, reached = self.graph.wide.reads, set(names)
        pending = [name for name in reached if name not in self.set_flags]
        while pending:
            for read in reads.get(pending.pop(), ()):
                if read not in reached:
                    reached.add(read)
                    if read not in self.set_flags:
                        pending.append(read)
        return frozenset(reached)
