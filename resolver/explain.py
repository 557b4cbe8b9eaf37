"""Explaining an unsatisfiable launch: minimal conflicts and verified fixes.

A conflict is *minimal*: the user values and hard rules it names are together unsatisfiable, and
dropping any one of them makes the rest satisfiable. We find it with QuickXplain (divide and
conquer over the candidates), and every check is cheap because facts and user values are constants.

Each conflict carries its verified fixes, found and ranked by resolver/fixes.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from resolver.fixes import Fix, find_fixes
from resolver.rules import Rule
from resolver.solve import Plan


@dataclasses.dataclass(frozen=True)
class Conflict:
    flags: tuple[str, ...]            # user flags in the minimal conflict
    rules: tuple[str, ...]            # hard rule ids in the minimal conflict
    facts: tuple[str, ...]            # facts those rules read
    fixes: tuple[Fix, ...]


def quickxplain(items: list, unsat) -> list:
    """A minimal subset of `items` for which `unsat` holds (Junker's QuickXplain).

    `unsat(items)` must be true. Splitting the list in halves finds a k-element core of n items in
    about k·log(n/k) checks instead of deletion's n, which matters with hundreds of rules.
    """
    def search(background: list, added: bool, candidates: list) -> list:
        if added and unsat(background):
            return []
        if len(candidates) == 1:
            return list(candidates)
        half = len(candidates) // 2
        first, second = candidates[:half], candidates[half:]
        core2 = search(background + first, bool(first), second)
        core1 = search(background + core2, bool(core2), first)
        return core1 + core2

    if not items or unsat([]):
        return []
    return search([], False, list(items))


def find_conflicts(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any]) -> list[Conflict]:
    """Every independent minimal conflict of an unsatisfiable request, each with its fixes.

    The rules the launch breaks are found first (with every user value in place), then the fewest
    user values that break them, then the fewest of those rules those values break. Looking at the
    broken rules first keeps the blame where the launch put it: dropping a value can only make the
    defaults come back, which may break some other rule.
    """
    found: list[tuple[list[str], list[Rule]]] = []
    remaining = dict(user)
    while not plan.satisfiable(remaining, facts):
        broken = minimal_rules(plan, remaining, facts)
        flags = minimal_flags(plan, remaining, facts, broken)
        rules = minimal_rules(plan, {k: remaining[k] for k in flags}, facts, broken)
        found.append((flags, rules))
        if not flags:
            break  # the facts alone are contradictory: nothing the user can drop separates more
        for name in flags:
            remaining.pop(name)
    found.sort(key=lambda item: [plan.order[name] for name in item[0]])
    conflicts = []
    for flags, rules in found:
        # Judge each conflict's fixes without the others, so independent conflicts each get theirs.
        others = {name for other, _ in found if other is not flags for name in other}
        isolated = {k: v for k, v in user.items() if k not in others}
        read_facts = sorted(set().union(*(r.reads_facts for r in rules)) & set(facts))
        fixes = find_fixes(plan, isolated, facts, flags, rules)
        conflicts.append(Conflict(tuple(flags), tuple(r.id for r in rules), tuple(read_facts), tuple(fixes)))
    return conflicts


def minimal_flags(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                  rules: list[Rule] | None = None) -> list[str]:
    """A minimal set of user values that is unsatisfiable under `rules` (in catalog order)."""
    names = sorted(user, key=plan.order.get)
    core = quickxplain(names, lambda subset: not plan.satisfiable({k: user[k] for k in subset}, facts, rules))
    return sorted(core, key=plan.order.get)


def minimal_rules(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                  rules: list[Rule] | None = None) -> list[Rule]:
    """A minimal set of hard rules (from `rules`, default all) that, with `user`, is unsatisfiable."""
    pool = list(plan.hard_rules if rules is None else rules)
    core = set(id(r) for r in quickxplain(pool, lambda subset: not plan.satisfiable(user, facts, subset)))
    return [r for r in pool if id(r) in core]
