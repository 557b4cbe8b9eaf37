"""Fixes an operator would apply: candidate changes to a conflicting launch, verified and ranked.

A conflict (resolver/explaining/explain.py) names the user values and rules that cannot hold together. Its fixes
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
import json
from typing import Any, Mapping

from accord.resolver.language.expr import UnknownFact
from accord.resolver.language.ruleset import Rule
from accord.resolver.solving.nearby import nearby_for
from accord.resolver.solving.solve import Env, Plan, RelaxedValues

MAX_FIXES = 5


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
    explanation's `Nearby` objects, see resolver/solving/nearby.py).

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


