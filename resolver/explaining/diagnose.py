"""Diagnosis: every conflict of an unsatisfiable launch with its fixes, the chains a drop leads
into, and one combined fix for all of them.

The layers below answer one question each: explain.py finds a minimal conflict (the user values and
rules that cannot hold together), fixes.py finds and ranks the changes that resolve one conflict.
Here they meet: each independent conflict gets its own fixes, a dropped flag that leads into another
rule becomes a chain (PubGrub's "and because ..."), and the conflicts' fixes are combined into one
change that is verified as a whole (what `--relax` applies).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Mapping

from accord.resolver.explaining.explain import minimal_flags
from accord.resolver.explaining.fixes import Fix, combine, find_fixes, hint_fix
from accord.resolver.explaining.ranking import fix_allowed
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving.launch import Launch, Launches
from accord.resolver.solving.solve import Env, Plan

MAX_COMBINATIONS = 64     # combined-fix candidates tried before falling back to fixing in rounds
MAX_ROUNDS = 8            # rounds of "apply the best fix, explain what is left" for a combined fix


@dataclasses.dataclass(frozen=True)
class Conflict:
    flags: tuple[str, ...]            # user flags in the minimal conflict
    rules: tuple[str, ...]            # hard rule ids in the minimal conflict
    facts: tuple[str, ...]            # facts those rules read
    fixes: tuple[Fix, ...]
    # typed flags the rules read that the minimal conflict leaves out, because unsetting them
    # changes nothing (`--tp-size 1`, the default) or the defaults alone break the rules
    # (`--tp-size 4` where the weights need 8): reported and fixed with `flags`
    named: tuple[str, ...] = ()

    def typed(self) -> tuple[str, ...]:
        """The user flags the report shows and the fixes change: the minimal ones, then the named."""
        return self.flags + self.named


def find_conflicts(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any]) -> list[Conflict]:
    """Every independent minimal conflict of an unsatisfiable request, each with its fixes.

    The rules the launch breaks are found first (with every user value in place), then the fewest
    user values that break them, then the fewest of those rules those values break. Looking at the
    broken rules first keeps the blame where the launch put it: dropping a value can only make the
    defaults come back, which may break some other rule.
    """
    found: list[tuple[list[str], list[Rule]]] = []
    # What solving each command gave, shared by every step; each command below is the launch with
    # some values dropped, so it starts from what the launch's own solve found (resolver/solving/launch.py).
    family = Launches(plan, facts)
    before = family.of(user)
    remaining = dict(user)
    while not before.satisfiable:
        broken = before.minimal_rules()
        flags = minimal_flags(plan, remaining, facts, broken)
        rules = family.of({k: remaining[k] for k in flags}).minimal_rules(broken)
        found.append((flags, rules, _typed_as_default(plan, remaining, facts, flags, rules)))
        if not flags:
            break  # the facts alone are contradictory: nothing the user can drop separates more
        for name in flags:
            remaining.pop(name)
        before = family.of(remaining, near=before)
    found.sort(key=lambda item: [plan.order[name] for name in item[0] + item[2]])
    conflicts = []
    for flags, rules, named in found:
        # Judge each conflict's fixes without the others, so independent conflicts each get theirs.
        others = {name for other, _, _ in found if other is not flags for name in other}
        isolated = {k: v for k, v in user.items() if k not in others}
        read_facts = sorted(set().union(*(r.reads_facts for r in rules)) & set(facts))
        named = [name for name in named if name in isolated]  # another conflict's flag is that one's
        fixes = find_fixes(family.of(isolated, near=family.of(user)), flags + named, rules)
        conflicts.append(Conflict(tuple(flags), tuple(r.id for r in rules), tuple(read_facts), tuple(fixes),
                                  tuple(named)))
    return _one_fix_for_all(family, user, _defaults_are_free(conflicts))


def _typed_as_default(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any], flags: list[str],
                      rules: list[Rule]) -> list[str]:
    """Typed flags the conflict's rules read whose typed value is the one they would have unset
    (`--tp-size 1` where 1 is the default), or, when the defaults alone break the rules, every
    typed flag they read: deleting them changed nothing, so the minimal conflict left them out,
    but the user did type them, and the report and the fixes must say so."""
    read = set().union(*(r.constrained_flags for r in rules)) if rules else set()
    found = []
    for name in sorted((n for n in user if n in read and n not in flags), key=plan.order.get):
        if not flags:
            # Defaults alone break the rules, but the user typed a value they read (`--tp-size 4`
            # where 8 is needed): the typed value is what the report and the fixes are about.
            found.append(name)
            continue
        rest = {k: v for k, v in user.items() if k != name}
        try:
            unset = Env(plan, rest, facts, {}).flag(name)
        except UnknownFact:
            continue
        if unset == user[name]:
            found.append(name)
    return found


def _one_fix_for_all(family: Launches, user: Mapping[str, Any], conflicts: list[Conflict]) -> list[Conflict]:
    """One conflict instead of several when one of its fixes resolves the whole launch.

    Separating conflicts drops the flags of each from the others, so a typed value the first one
    holds (`--nnodes 2`) is missing from the second, which then reads the default back (`nnodes =
    1 (unset)`) and blames the launch for it. When a fix of one conflict resolves the launch as
    typed, the others were made by that separation: the report keeps that conflict alone, with its
    fixes that resolve the whole launch."""
    if len(conflicts) < 2:
        return conflicts
    by_id = family.plan.ruleset.by_id()
    launch = family.of(user)

    def resolves(fix: Fix) -> bool:
        return launch.changed(fix.apply(user), fix.flags()).satisfiable

    broken = [c for c in conflicts if launch.rules_unsatisfiable([by_id[r] for r in c.rules])]
    # (a conflict whose rules the launch as typed does not break was made by the separation)
    for conflict in broken:
        whole = tuple(fix for fix in conflict.fixes if resolves(fix))
        if whole:
            return [dataclasses.replace(conflict, fixes=whole)]
    for conflict in broken:
        if conflict.fixes:
            continue  # fixes of its own that leave the others standing: an independent conflict
        # No fix without the other conflicts' values: judged again with every typed value in place.
        fixes = find_fixes(launch, list(conflict.typed()), [by_id[r] for r in conflict.rules])
        whole = tuple(fix for fix in fixes if resolves(fix))
        if whole:
            return [dataclasses.replace(conflict, fixes=whole)]
    return conflicts


def _defaults_are_free(conflicts: list[Conflict]) -> list[Conflict]:
    """Conflicts without the ones of defaults alone, when another conflict has a fix.

    Separating conflicts drops the flags of the first ones, so a flag the user typed (`--tp-size
    6`) falls back to its default (tp 1), and a default that cannot hold (weights that do not fit
    one GPU) shows up as a conflict the user never made. Every fix of the other conflicts is
    verified against all the rules, defaults included, so such a fix already answers it; and when
    there is no fix, a defaults conflict over the rules of a typed one repeats it."""
    if any(c.typed() and c.fixes for c in conflicts):
        return [c for c in conflicts if c.typed()]
    # No fix anywhere: still, defaults breaking the very rules a typed conflict breaks say nothing new.
    typed_rules = {rule for c in conflicts if c.typed() for rule in c.rules}
    return [c for c in conflicts if c.typed() or not set(c.rules) <= typed_rules]


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
    # Fewest changes first, except that a rule's declared alternatives keep the ranking's order.
    combos = sorted(itertools.islice(itertools.product(*lists), MAX_COMBINATIONS * 4),
                    key=lambda combo: (sum(f.size() for f in combo if f.alternative is None),
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
    no hint, a hint needs a placeholder, the preference ranking puts another of the conflict's
    fixes before its hint, or the rewrites together do not resolve).

    Upstream rewrites in one pass, so a rewrite can uncover the next: under DP attention it
    rescales a typed `--chunked-prefill-size` and then a typed `--schedule-conservativeness`, but
    the minimal conflict of the first holds the flags the second needs, so the second shows only
    once the first is rewritten. Such conflicts are answered in rounds, each by its own rule's
    hint, and the whole is verified at the end."""
    parts = _hinted(plan, user, facts, conflicts)
    for _ in range(MAX_ROUNDS):
        if parts is None:
            return None
        fix = combine([part for part, _ in parts])
        if fix is None:
            return None
        if plan.satisfiable(fix.apply(user, as_upstream=True), facts):
            return parts
        # What is left once the rewritten flags are upstream's: the typed values they leave.
        rest = {k: v for k, v in user.items() if k not in fix.flags()}
        more = find_conflicts(plan, rest, facts)  # none when `rest` is satisfiable
        if not more:
            return None
        extra = _hinted(plan, rest, facts, more)
        parts = None if extra is None else parts + extra
    return None


def _hinted(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
            conflicts: list) -> list[tuple[Fix, Any]] | None:
    """Each conflict with its rule's own hint, when every conflict has one the ranking offers first."""
    by_id = plan.ruleset.by_id()
    env = Env(plan, dict(user), facts, {})
    parts = []
    for conflict in conflicts:
        hints = [fix for rid in conflict.rules if (fix := hint_fix(by_id[rid], env, user)) is not None]
        if not hints or hints[0].fill_in or hints[0].size() == 0:
            return None
        offered = [fix.key() for fix in conflict.fixes]
        if not fix_allowed(plan, hints[0].changes, hints[0].drops, user) or \
                (hints[0].key() in offered and offered[0] != hints[0].key()):
            return None  # the preference ranking puts another fix first (the hint leaves no KV room, say)
        parts.append((hints[0], conflict))
    return parts


def _usable(fixes, avoid_fill_in: bool) -> list[Fix]:
    plain = [f for f in fixes if not f.fill_in]
    return plain if avoid_fill_in and plain else list(fixes)


def _in_rounds(plan: Plan, user, facts, first: list, avoid_fill_in: bool) -> list | None:
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
    offered = {f.key() for f in fixes}
    chains = []
    for name in flags:
        drop = Fix(changes=(), drops=(name,))
        if drop.key() in offered or not fix_allowed(plan, (), (name,), user):
            continue  # offered already, or a drop no fix may make (the served model)
        rest = drop.apply(user)
        if plan.satisfiable(rest, facts):
            continue  # verified but ranked below the offered fixes
        after_drop = Launch(plan, rest, facts)
        broken = after_drop.minimal_rules()
        culprits = minimal_flags(plan, rest, facts, broken)
        broken = Launch(plan, {k: rest[k] for k in culprits}, facts).minimal_rules(broken)
        then = None
        for fix in find_fixes(after_drop, culprits, broken):
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
