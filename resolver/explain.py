"""Explaining an unsatisfiable launch: minimal conflicts and verified fixes.

A conflict is *minimal*: the user values and hard rules it names are together unsatisfiable, and
dropping any one of them makes the rest satisfiable. We find it with QuickXplain (divide and
conquer over the candidates), and every check is cheap because facts and user values are constants.

Fixes are the smallest changes to what the user typed: the value a rule's `fix` names (what
upstream would have forced, so `--relax` reproduces upstream), another value of an involved flag,
or dropping the flag. Each one is verified by solving again before it is offered.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from resolver.expr import UnknownFact
from resolver.rules import Rule
from resolver.solve import Env, Plan, RelaxedValues

MAX_FIXES = 5
_DROP = object()


@dataclasses.dataclass(frozen=True)
class Fix:
    """A change to the user's flags: flag -> new value, or -> None with `drop` to unset it."""

    changes: tuple[tuple[str, Any], ...]
    drops: tuple[str, ...] = ()
    rule: str | None = None          # the rule whose `fix` proposed it (upstream's choice)

    def apply(self, user: Mapping[str, Any]) -> dict[str, Any]:
        """The values after this fix; the flags it changed now hold upstream's value, not the user's."""
        out = {k: v for k, v in user.items() if k not in self.drops}
        out.update(self.changes)
        return RelaxedValues(out, getattr(user, "relaxed", frozenset()) | {name for name, _ in self.changes})

    def size(self) -> int:
        return len(self.changes) + len(self.drops)


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
        fixes = _fixes(plan, isolated, facts, flags, rules)
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


def _fixes(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
           flags: list[str], rules: list[Rule]) -> list[Fix]:
    """Verified single-step fixes, most faithful to upstream first, then smallest."""
    proposals: list[Fix] = []
    env = Env(plan, dict(user), facts, {})
    for rule in rules:
        if not rule.fix:
            continue
        try:
            values = [(flag, expr(env)) for flag, expr in rule.fix]
        except UnknownFact:
            continue
        # A fix that sets a flag to None is the same as removing it from the command.
        proposals.append(Fix(changes=tuple((f, v) for f, v in values if v is not None),
                             drops=tuple(f for f, v in values if v is None and f in user), rule=rule.id))
    for name in flags:
        proposals.append(Fix(changes=(), drops=(name,)))
        for value in _alternatives(plan, name, user[name]):
            proposals.append(Fix(changes=((name, value),)))
    seen, verified = set(), []
    for fix in proposals:
        key = (fix.changes, fix.drops)
        unchanged = not fix.drops and all(user.get(k, _DROP) == v for k, v in fix.changes)
        if key in seen or unchanged:
            continue
        seen.add(key)
        if plan.satisfiable(fix.apply(user), facts):
            verified.append(fix)
    upstream = [f for f in verified if f.rule]
    others = sorted((f for f in verified if not f.rule), key=lambda f: f.size())  # stable: drops first
    return (upstream + others)[:MAX_FIXES]


def _alternatives(plan: Plan, name: str, current: Any) -> list[Any]:
    """Other values worth pinning for a flag: its finite domain, the solver's preferred ones first.

    None, and False for a plain switch, are left out: dropping the flag already says that.
    """
    flag = plan.catalog[name]
    domain = flag.finite_domain
    if domain is None:
        if flag.type == "int" and isinstance(current, int) and current > 1:
            # Sizes are mostly powers of two: the neighbours are the likeliest legal values.
            return [v for v in (current // 2, current * 2, current // 4) if v >= 1]
        return []
    preferred = plan.domain(name) if name in plan.prefer_rules else []
    ordered = [v for v in preferred if v in domain] + [v for v in domain if v not in preferred]
    plain_switch = flag.type == "bool" and not flag.negated and not flag.value_optional
    return [v for v in ordered if v != current and v is not None and not (plain_switch and v is False)]
