"""Who reads whom: one dependency graph per compiled plan, and what it says given the set flags.

The graph is built once per `Plan` (itself built once per rule set, resolver/language/plancache.py)
from the rules alone: per flag what its computing rules read (its value: the `reads_flags` of a
decision's prefer rules or a derived flag's default rules; widely: every expression of its default
and prefer rules, `is_set` questions too) and who reads it back, per hard or warn rule the flags it
reads, per hard rule the flags its condition and requirement read. A flag the user set reads
nothing (its value is the user's), so every walk depends on which flags are set; `Reach` is the
graph given them, kept by the solver's cache layer (store `reach`) and asked by every step:

- `depends` / `rule_depends`: the decisions a flag's value or a hard rule's verdict depends on
  (the solver's structure, resolver/solving/core.py, and `Env`'s decision-free derived values);
- `affected` / `touched`: every unset flag whose value may follow from a few changed flags, and
  the rules reading any of them (a `Launch`'s changed children, resolver/solving/launch.py);
- `reach` / `touching` / `linked` / `repair_flags`: what can change a flag or a hard rule, and the
  rules a few pins can change or share a decision with (its pinned children, resolver/solving/pinning.py).

What a walk finds for these set flags is kept on the `Reach` (bounded), so it is walked once.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping

from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving.env import PlanView, RelaxedValues

# The plan a graph belongs to: solve.py's `Plan` (a `PlanView` with its rule lists, `cache` and
# `decision_groups`); solve.py imports this module, so nothing here imports it back.
Plan = PlanView

WALKS_KEPT = 8192  # answers of one walk kept per `Reach` before it starts again (bounded memory)


def _reads(rule: Rule) -> frozenset[str]:
    """Every flag a rule's expressions read or ask `is_set`/`user_value` about."""
    return frozenset().union(*(e.flags | e.set_checks for e in rule.expressions()))


def _constrains(rule: Rule) -> frozenset[str]:
    """The flags a hard rule's condition and requirement read (`is_set` questions too)."""
    return frozenset().union(*(e.flags | e.set_checks for e in (rule.when, rule.require) if e is not None))


class DependencyGraph:
    """The plan's flags and rules, each with what it reads and who reads it (see the module
    docstring). What `depends` needs is built with the plan; the wide reads on first use."""

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
        self._wide: tuple | None = None

    def wide(self) -> tuple[dict[str, frozenset[str]], dict[str, set[str]], dict[str, list[Rule]], dict[int, frozenset[str]]]:
        """(flag -> every flag its default and prefer rules read, flag -> the computed flags reading
        it, flag -> the hard and warn rules reading it, id(hard rule) -> the flags it constrains)."""
        if self._wide is None:
            plan = self.plan
            reads: dict[str, frozenset[str]] = {}
            readers: dict[str, set[str]] = {}
            for name, rules in (*plan.default_rules.items(), *plan.prefer_rules.items()):
                for rule in rules:
                    found = _reads(rule)
                    reads[name] = reads.get(name, frozenset()) | found
                    for read in found:
                        readers.setdefault(read, set()).add(name)
            rules_reading: dict[str, list[Rule]] = {}
            for rule in (*plan.hard_rules, *plan.warn_rules):
                for read in _reads(rule):
                    rules_reading.setdefault(read, []).append(rule)
            constrains = {id(rule): _constrains(rule) for rule in plan.hard_rules}
            self._wide = (reads, readers, rules_reading, constrains)
        return self._wide

    def depends(self, names: Iterable[str], user: Mapping[str, Any], memo: dict[str, frozenset]) -> frozenset:
        """The decisions the given flags' values depend on, with `user`'s flags set (`memo`: the
        working memo of a `Reach` for these set flags)."""
        out: set[str] = set()
        for name in names:
            if name in user:
                continue
            found = memo.get(name)
            if found is None:
                reads = self.value_reads.get(name)
                if reads is None:  # not a flag of the catalog
                    continue
                memo[name] = frozenset()  # breaks cycles; lint rejects them anyway
                deps = self.depends(reads, user, memo)
                found = memo[name] = deps | {name} if name in self.decisions else deps
            out |= found
        return frozenset(out)

    def given(self, user: Mapping[str, Any]) -> Reach:
        """The graph given which flags `user` sets, kept by the solver's cache layer."""
        set_flags = frozenset(user)
        return self.plan.cache.lookup("reach", set_flags, lambda: Reach(self, set_flags), 512)


def _kept(table: dict, key: Any, make) -> Any:
    found = table.get(key)
    if found is None:
        if len(table) >= WALKS_KEPT:
            table.clear()
        found = table[key] = make()
    return found


class Reach:
    """What the dependency graph says with these flags set (see the module docstring)."""

    def __init__(self, graph: DependencyGraph, set_flags: frozenset[str]):
        self.graph = graph
        self.set_flags = set_flags
        self.depends_of: dict[str, frozenset] = {}     # flag -> the decisions its value depends on
        self.by_rule: dict[int, frozenset] = {}          # id(hard rule) -> the decisions it reads
        self._affected: dict[frozenset, frozenset[str]] = {}
        self._touched: dict[frozenset, dict[int, Rule]] = {}
        self._reach: dict[str, frozenset[str]] = {}
        self._rule_reach: dict[int, frozenset[str]] = {}
        self._touching: dict[frozenset, list[Rule]] = {}
        self._linked: dict[frozenset, list[Rule]] = {}

    # -- decisions (the solver) ----------------------------------------------------------------

    def depends(self, names: Iterable[str]) -> frozenset:
        return self.graph.depends(names, self.set_flags, self.depends_of)

    def rule_depends(self, rule: Rule) -> frozenset:
        """The decisions a hard rule's verdict depends on."""
        deps = self.by_rule.get(id(rule))
        if deps is None:
            deps = self.by_rule[id(rule)] = self.graph.depends(rule.constrained_flags, self.set_flags,
                                                               self.depends_of)
        return deps

    # -- changed flags (`Launch.changed`) -------------------------------------------------------

    def affected(self, changed: Iterable[str]) -> frozenset[str]:
        """The changed flags and every unset flag whose value may follow from them."""
        key = frozenset(changed)

        def make() -> frozenset[str]:
            readers, set_flags = self.graph.wide()[1], self.set_flags
            reached = set(key)
            pending = list(reached)
            while pending:
                for reader in readers.get(pending.pop(), ()):
                    if reader not in reached and reader not in set_flags:
                        reached.add(reader)
                        pending.append(reader)
            return frozenset(reached)
        return _kept(self._affected, key, make)

    def touched(self, flags: Iterable[str]) -> dict[int, Rule]:
        """The hard and warn rules reading any of `flags`, by id (shared: callers only read it)."""
        key = frozenset(flags)
        rules_reading = self.graph.wide()[2]
        return _kept(self._touched, key,
                     lambda: {id(rule): rule for name in key for rule in rules_reading.get(name, ())})

    # -- pinned flags (`Launch.pinned`) ---------------------------------------------------------

    def reach(self, name: str) -> frozenset[str]:
        """Every flag whose value can change `name`'s: itself and, while unset, what its default
        and prefer rules read, and so on."""
        found = self._reach.get(name)
        if found is None:
            found = self._reach[name] = frozenset({name})  # placeholder breaks cycles (lint rejects them)
            reads = self.graph.wide()[0].get(name)
            if name not in self.set_flags and name in self.graph.value_reads and reads:
                found = self._reach[name] = frozenset({name}).union(*(self.reach(n) for n in reads))
        return found

    def rule_reach(self, rule: Rule) -> frozenset[str]:
        """Every flag whose pinning can change what a hard rule says."""
        found = self._rule_reach.get(id(rule))
        if found is None:
            names = self.graph.wide()[3][id(rule)]
            found = self._rule_reach[id(rule)] = frozenset().union(*(self.reach(n) for n in names))
        return found

    def touching(self, names: frozenset[str]) -> list[Rule]:
        """The hard rules whose verdict can change when these flags are pinned, in rule order."""
        return _kept(self._touching, names,
                     lambda: [r for r in self.graph.plan.hard_rules if self.rule_reach(r) & names])

    def linked(self, names: frozenset[str]) -> list[Rule]:
        """The rules touching pinned `names` plus every rule sharing a decision with them,
        transitively (decisions as they are with `names` set too), in rule order."""
        return _kept(self._linked, names, lambda: self._link(names))

    def _link(self, names: frozenset[str]) -> list[Rule]:
        plan = self.graph.plan
        pinned = self.graph.given(self.set_flags | names)
        deps = [(rule, pinned.rule_depends(rule)) for rule in plan.hard_rules]
        chosen = {id(r) for r in self.touching(names)}
        variables: set[str] = set().union(*(d for r, d in deps if id(r) in chosen))
        grown = True
        while grown:
            grown = False
            for var in list(variables):
                new = pinned.depends(self.graph.value_reads[var] if var in plan.prefer_rules else ()) - variables
                if new:
                    variables |= new
                    grown = True
            for rule, d in deps:
                if id(rule) not in chosen and d & variables:
                    chosen.add(id(rule))
                    variables |= d
                    grown = True
        return [rule for rule, _ in deps if id(rule) in chosen]


@dataclasses.dataclass(frozen=True)
class Layout:
    """The decision groups of the commands with these flags set, as `Plan.decision_groups` gives
    them, with the ids of the rules in them (the decision-reading ones) and a key per group."""

    groups: tuple
    constrained: frozenset[int]
    keys: frozenset


def layout_of(plan: Plan, user: Mapping[str, Any]) -> Layout:
    """The `Layout` of launches with these flags set (and relaxed), kept by the cache layer."""
    set_flags, relaxed = frozenset(user), frozenset(getattr(user, "relaxed", ()))

    def make() -> Layout:
        groups = tuple(plan.decision_groups(RelaxedValues(dict.fromkeys(set_flags), relaxed)))
        return Layout(groups, frozenset(id(rule) for _, rules in groups for rule in rules),
                      frozenset((names, tuple(map(id, rules))) for names, rules in groups))
    return plan.cache.lookup("reach_layout", (set_flags, relaxed), make, 256)
