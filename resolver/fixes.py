"""Fixes an operator would apply: candidate changes to a conflicting launch, verified and ranked.

A conflict (resolver/explain.py) names the user values and rules that cannot hold together. Its fixes
are changes to the command that make it resolve, each verified by solving again. Candidates come
from three places:
- the rules' `fix:` hints (what upstream would have set; a hint may set flags the user did not
  type, such as `--nnodes` with a `--dist-init-addr` placeholder to fill in);
- the involved user flags: another value from the flag's finite domain (or a power-of-two
  neighbour of a size), or dropping the flag;
- the unset flags the violated rules read: each value of their finite domain.

Ranking, best first: fewest changed flags; then the rule's own hint; then the ones that keep the
user's intent (no warning the command did not already have, such as weights that no longer fit; no
typed value changed or dropped); then preference order (other values nearest to the typed one,
then added flags, then drops). `--relax` applies the best one, and several conflicts get one combined
fix that is verified as a whole.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any, Mapping

from resolver.expr import UnknownFact
from resolver.nearby import nearby_for
from resolver.rules import Rule
from resolver.solve import Env, Plan, RelaxedValues

MAX_FIXES = 5
MAX_COMBINATIONS = 64     # combined-fix candidates tried before falling back to fixing in rounds
MAX_ROUNDS = 8            # rounds of "apply the best fix, explain what is left" for a combined fix


@dataclasses.dataclass(frozen=True)
class Fix:
    """A change to the user's flags: flag -> new value, and flags to drop (unset).

    `fill_in` names the changed flags whose value is a placeholder (`HOST:PORT`) the user must
    replace, with what to put there; `rule` is the rule whose `fix:` hint proposed it.
    """

    changes: tuple[tuple[str, Any], ...]
    drops: tuple[str, ...] = ()
    rule: str | None = None
    fill_in: tuple[tuple[str, str], ...] = ()

    def apply(self, user: Mapping[str, Any], as_upstream: bool = False) -> dict[str, Any]:
        """The user's values with this fix done. `as_upstream` (for `--relax`): the changed flags
        hold the value upstream would have put there, so rules asking `is_set` (did the user type
        it?) see them as not typed, and a rule about a typed value does not fire on its own fix."""
        out = {k: v for k, v in user.items() if k not in self.drops}
        out.update(self.changes)
        if not as_upstream:
            return out
        return RelaxedValues(out, getattr(user, "relaxed", frozenset()) | {name for name, _ in self.changes})

    def size(self) -> int:
        return len(self.changes) + len(self.drops)

    def flags(self) -> set[str]:
        return {name for name, _ in self.changes} | set(self.drops)

    def key(self) -> str:
        """What the fix does, as canonical text (values may be lists, which do not hash)."""
        return json.dumps([sorted(self.changes, key=lambda c: c[0]), sorted(self.drops)],
                          sort_keys=True, default=str)


def combine(fixes: list[Fix]) -> Fix | None:
    """One fix doing all of `fixes`, or None when two of them disagree about a flag (its `rule`
    is the first part's hint, for a one-line summary; each part keeps its own)."""
    changes: dict[str, Any] = {}
    drops: list[str] = []
    fill_in: dict[str, str] = {}
    for fix in fixes:
        for name, value in fix.changes:
            if name in drops or changes.get(name, value) != value:
                return None
            changes[name] = value
        for name in fix.drops:
            if name in changes:
                return None
            if name not in drops:
                drops.append(name)
        fill_in.update(fix.fill_in)
    rule = next((f.rule for f in fixes if f.rule), None)
    return Fix(tuple(changes.items()), tuple(drops), rule, tuple(sorted(fill_in.items())))


def find_fixes(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
               flags: list[str], rules: list[Rule], cache: dict | None = None) -> list[Fix]:
    """The verified fixes of one conflict (its user `flags` and `rules`), best first (`cache`: the
    explanation's `Nearby` objects, see resolver/nearby.py).

    Rank, smaller first: (changed flags, not the rule's own hint, warnings the fix adds, typed
    values changed or dropped, preference order). A hint is upstream's answer (or the rule
    author's), so at equal size it comes first and `--relax` reproduces upstream; among the other
    ways out, those that add no warning (weights that no longer fit, say) and keep every typed
    value (adding a flag instead) keep the user's intent best.

    Only what can reach the first MAX_FIXES places is verified and ranked. The rank's first two
    parts (size, hint or not) and last two (typed values touched, preference order) need no solve,
    so the candidates are taken group by group (equal size and hint-ness), each group in
    (touched, order) order; within a group a fix that adds no warning cannot be passed by a later
    one, so the group is done once enough verified fixes add none. The result is the same as
    verifying and ranking every candidate.
    """
    seen, groups = set(), {}
    for order, fix in enumerate(_proposals(plan, user, facts, flags, rules)):
        key = fix.key()
        if fix.size() == 0 or key in seen:
            continue
        seen.add(key)
        touched = sum(1 for name in fix.flags() if name in user)
        groups.setdefault((fix.size(), 0 if fix.rule else 1), []).append((touched, order, fix))
    nearby = nearby_for(plan, dict(user), facts, cache)  # `Fix.apply` gives plain dicts
    before: set[str] | None = None
    chosen: list[Fix] = []
    for key in sorted(groups):
        room = MAX_FIXES - len(chosen)
        if room <= 0:
            break
        members = sorted(groups[key], key=lambda item: item[:2])
        scored, clean = [], 0
        for touched, order, fix in members:
            solved = nearby.solve(fix.apply(user), fix.flags())
            if solved is None:
                continue
            if len(members) == 1:
                scored.append((0, touched, order, fix))  # alone in its group: nothing to order
                break
            if before is None:
                decided = plan.decisions(user, facts)
                before = set() if decided is None else nearby.command_warnings(user, decided)
            added = len(nearby.warnings(solved) - before)
            scored.append((added, touched, order, fix))
            clean += added == 0
            if clean == room:
                break
        scored.sort(key=lambda item: item[:3])
        chosen += [fix for *_, fix in scored[:room]]
    return chosen


def _proposals(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
               flags: list[str], rules: list[Rule]) -> list[Fix]:
    """Every candidate in preference order: hints, other values, added flags, drops."""
    env = Env(plan, dict(user), facts, {})
    hints = [fix for rule in rules if (fix := hint_fix(rule, env, user)) is not None]
    values = [Fix(changes=((name, value),)) for name in flags
              for value in _alternatives(plan, name, user[name])]
    added = []
    for rule in rules:
        for name in sorted(rule.constrained_flags, key=plan.order.get):
            flag = plan.catalog.flags.get(name)
            if name in user or flag is None or flag.meta or flag.finite_domain is None:
                continue
            try:
                current = env.flag(name)
            except UnknownFact:
                current = None
            added += [Fix(changes=((name, v),)) for v in _ordered_domain(plan, name) if v != current]
    drops = [Fix(changes=(), drops=(name,)) for name in flags]
    return hints + values + added + drops


def hint_fix(rule: Rule, env: Env, user: Mapping[str, Any]) -> Fix | None:
    """The change a rule's `fix:` hint names for this command (None when it cannot be computed).

    A hint value equal to what the user typed is no change; None means "remove the flag".
    """
    if not rule.fix:
        return None
    try:
        values = [(name, expr(env)) for name, expr in rule.fix]
    except UnknownFact:
        return None
    changes = tuple((n, v) for n, v in values if v is not None and not (n in user and user[n] == v))
    drops = tuple(n for n, v in values if v is None and n in user)
    changed = {n for n, _ in changes}
    fill_in = tuple((n, what) for n, what in rule.fix_fill_in if n in changed)
    return Fix(changes=changes, drops=drops, rule=rule.id, fill_in=fill_in)


def _ordered_domain(plan: Plan, name: str) -> list[Any]:
    """A finite domain with the solver's preferred values first."""
    domain = plan.catalog[name].finite_domain or []
    preferred = plan.domain(name) if name in plan.prefer_rules else []
    return [v for v in preferred if v in domain] + [v for v in domain if v not in preferred]


def _alternatives(plan: Plan, name: str, current: Any) -> list[Any]:
    """Other values worth pinning for a typed flag, nearest first.

    None, and False for a plain switch, are left out: dropping the flag already says that.
    """
    flag = plan.catalog[name]
    if flag.finite_domain is None:
        if flag.type == "int" and isinstance(current, int) and current > 1:
            # Sizes are mostly powers of two: the neighbours are the likeliest legal values.
            return [v for v in (current // 2, current * 2, current // 4) if v >= 1]
        return []
    plain_switch = flag.type == "bool" and not flag.negated and not flag.value_optional
    return [v for v in _ordered_domain(plan, name)
            if v != current and v is not None and not (plain_switch and v is False)]


def combined_fix(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any], conflicts: list,
                 avoid_fill_in: bool = False) -> list[tuple[Fix, Any]] | None:
    """Fixes that together resolve every conflict, verified as a whole, each with the conflict it
    answers (None when none was found).

    First the conflicts' own fixes, combined best-first (fewest changes); if no combination
    resolves (fixing one conflict can expose another rule), fix in rounds: apply the best fix,
    explain what is left, repeat. `avoid_fill_in` (for --relax) passes over fixes with placeholders
    while another exists, since a placeholder cannot launch as is. `combine` merges the parts.
    """
    lists = [_usable(c.fixes, avoid_fill_in) for c in conflicts]
    if not lists or not all(lists):
        return None
    combos = sorted(itertools.islice(itertools.product(*lists), MAX_COMBINATIONS * 4),
                    key=lambda combo: (sum(f.size() for f in combo),
                                       [lists[i].index(f) for i, f in enumerate(combo)]))
    for combo in combos[:MAX_COMBINATIONS]:
        fix = combine(list(combo))
        if fix is not None and plan.satisfiable(fix.apply(user), facts):
            return list(zip(combo, conflicts))
    return _in_rounds(plan, user, facts, [(lst[0], c) for lst, c in zip(lists, conflicts)], avoid_fill_in)


def upstream_rewrite(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                     conflicts: list) -> list[tuple[Fix, Any]] | None:
    """For `--relax`: every conflict answered by its rule's own `fix:` hint (upstream's rewrite),
    verified with those values counted as upstream's rather than typed (None when a conflict has
    no hint, a hint needs a placeholder, or the rewrites together do not resolve)."""
    by_id = plan.ruleset.by_id()
    env = Env(plan, dict(user), facts, {})
    parts = []
    for conflict in conflicts:
        hints = [fix for rid in conflict.rules if (fix := hint_fix(by_id[rid], env, user)) is not None]
        if not hints or hints[0].fill_in or hints[0].size() == 0:
            return None
        parts.append((hints[0], conflict))
    fix = combine([part for part, _ in parts])
    if fix is None or not plan.satisfiable(fix.apply(user, as_upstream=True), facts):
        return None
    return parts


def _usable(fixes, avoid_fill_in: bool) -> list[Fix]:
    plain = [f for f in fixes if not f.fill_in]
    return plain if avoid_fill_in and plain else list(fixes)


def _in_rounds(plan: Plan, user, facts, first: list, avoid_fill_in: bool) -> list | None:
    from resolver.explain import find_conflicts  # explain builds fixes with this module

    applied = list(first)
    for _ in range(MAX_ROUNDS):
        fix = combine([part for part, _ in applied])
        if fix is None:
            return None
        values = fix.apply(user)
        if plan.satisfiable(values, facts):
            return applied
        rest = find_conflicts(plan, values, facts)
        nexts = [_usable(c.fixes, avoid_fill_in) for c in rest]
        if not rest or not all(nexts):
            return None
        applied += [(lst[0], c) for lst, c in zip(nexts, rest)]
    return None


@dataclasses.dataclass(frozen=True)
class Chain:
    """Dropping a flag of a conflict exposes another rule: which, and the fix of both (if any)."""

    dropped: str
    flags: tuple[str, ...]
    rules: tuple[str, ...]
    then: Fix | None


def drop_chains(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                flags: list[str], fixes: list[Fix]) -> list[Chain]:
    """For each flag of a conflict whose drop is not a fix: the rule that still fails without it.

    This is PubGrub's "and because ..." step: the first conflict's way out leads into a second
    one, and the report says so instead of silently leaving the drop out.
    """
    from resolver.explain import minimal_flags, minimal_rules

    offered = {f.key() for f in fixes}
    chains = []
    for name in flags:
        drop = Fix(changes=(), drops=(name,))
        if drop.key() in offered:
            continue
        rest = drop.apply(user)
        if plan.satisfiable(rest, facts):
            continue  # verified but ranked below the offered fixes
        broken = minimal_rules(plan, rest, facts)
        culprits = minimal_flags(plan, rest, facts, broken)
        broken = minimal_rules(plan, {k: rest[k] for k in culprits}, facts, broken)
        then = None
        for fix in find_fixes(plan, rest, facts, culprits, broken):
            both = combine([drop, dataclasses.replace(fix, rule=None)])
            if both is None or any(_within(f, both) for f in fixes):
                continue  # an offered fix does less and already works
            if plan.satisfiable(both.apply(user), facts):
                then = both
                break
        chains.append(Chain(name, tuple(culprits), tuple(r.id for r in broken), then))
    return chains


def _within(small: Fix, big: Fix) -> bool:
    """Whether every change of `small` is also made by `big`."""
    return set(small.drops) <= set(big.drops) and all(c in big.changes for c in small.changes)
