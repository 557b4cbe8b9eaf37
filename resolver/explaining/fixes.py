"""Fixes an operator would apply: candidate changes to a conflicting launch, verified and ranked.

A conflict (resolver/explaining/explain.py) names the user values and rules that cannot hold together. Its fixes
are changes to the command that make it resolve, each verified by solving again. Candidates come
from three places:
- the rules' `fix:` hints (what upstream would have set; a hint may set flags the user did not
  type, such as `--nnodes` with a `--dist-init-addr` placeholder to fill in). A rule may declare
  several alternative hints in order (a list, each with an optional `when` and `note`); those keep
  their declared order in the ranking (after the KV floor), whatever their sizes;
- the involved user flags: another value from the flag's finite domain (or a power-of-two
  neighbour of a size), or dropping the flag;
- the unset flags the violated rules read: each value of their finite domain.

A fix never drops or swaps the served model and never adds a checkpoint fact (its quantization);
the verified ones are ranked by the one preference ranking of resolver/explaining/ranking.py (the
KV-cache floor, fewest changed flags, the rule's own hint, no new warning, typed values kept,
upstream's fastest backend, the nearest value). `--relax` applies the best one, and several
conflicts get one combined fix that is verified as a whole.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from accord.resolver.explaining.ranking import (
    FixFacts,
    checkpoint_set,
    distance,
    fix_allowed,
    fix_key,
    kv_floor_holds,
    kv_floor_moves,
    nearer_sizes,
    pick,
    rank,
    slowness,
)
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving.launch import Launch
from accord.resolver.solving.solve import Env, Plan, RelaxedValues

MAX_FIXES = 5
PER_FLAG = 2     # fixes offered that only set one size flag to another value
MAX_TRIED = 80   # candidates solved per conflict at most (each is one incremental solve)


@dataclasses.dataclass(frozen=True)
class Fix:
    """A change to the user's flags: flag -> new value, and flags to drop (unset).

    `fill_in` names the changed flags whose value is a placeholder (`HOST:PORT`) the user must
    replace, with what to put there; `rule` is the rule whose `fix:` hint proposed it; `note` is
    what the hint says of itself ("slower: ..."); `alternative` is (rule id, place) among the
    alternatives a rule declares as a list, for the alternative itself and for the sizes near one of
    its values (None for any other fix): the ranking keeps that order.
    """

    changes: tuple[tuple[str, Any], ...]
    drops: tuple[str, ...] = ()
    rule: str | None = None
    fill_in: tuple[tuple[str, str], ...] = ()
    note: str = ""
    alternative: tuple[str, int] | None = None

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
    notes: list[str] = []
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
        if fix.note and fix.note not in notes:
            notes.append(fix.note)
    rule = next((f.rule for f in fixes if f.rule), None)
    return Fix(tuple(changes.items()), tuple(drops), rule, tuple(sorted(fill_in.items())), "; ".join(notes))


def find_fixes(launch: Launch, flags: list[str], rules: list[Rule]) -> list[Fix]:
    """The verified fixes of one conflict (its user `flags` and `rules`) of a launch, best first;
    each candidate is solved as the launch changed (resolver/solving/launch.py).

    The candidates a fix may not be (one dropping or swapping the served model, or adding a
    checkpoint fact) are left out, and the rest are ranked by the one preference ranking
    (resolver/explaining/ranking.py `fix_key`: KV floor, size, the rule's own hint, no new
    warning, fastest backend, typed values kept, nearest value, proposal order).

    A rule's declared alternatives (a `fix:` list) are verified first and keep their declared order:
    they stand together, with the sizes tried near their values, at the place of the best-ranked
    of them (those keeping the KV floor first; see `_declared_order`).

    The other candidates are verified in the order of the ranking's parts known before solving (size, hint,
    speed and nearness of the values they set, typed values, order) and the search stops once
    MAX_FIXES verified fixes keep the KV floor and add no warning (as `pick` counts them): a later
    candidate ranks after them unless it drops a flag whose solved value is faster or nearer than
    the one it replaced, which the static order counts as neither. At most MAX_TRIED candidates
    are solved.
    """
    plan, user, facts = launch.plan, launch.user, launch.facts
    env = Env(plan, dict(user), facts, {})
    ordered = _static_order(plan, user, env, _candidates(plan, user, facts, flags, rules))
    # `Fix.apply` gives plain dicts: the candidates are changes of the command as typed, not relaxed
    base = launch if type(user) is dict else launch.changed(dict(user))
    scored = _verified(launch, base, env, ordered[:MAX_TRIED])
    ranked = _declared_order(rank(scored, lambda item: item[0]))
    return pick(ranked, lambda fix: _size_flag(plan, fix), MAX_FIXES, PER_FLAG)


def _candidates(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                flags: list[str], rules: list[Rule]) -> list[Fix]:
    """The proposals worth solving: each command once, none empty, none a fix may not be."""
    seen: set[str] = set()
    candidates: list[Fix] = []
    for fix in _proposals(plan, user, facts, flags, rules):
        key = _command_key(plan, fix)
        if fix.size() == 0 or key in seen or not fix_allowed(plan, fix.changes, fix.drops, user):
            continue
        seen.add(key)
        candidates.append(fix)
    return candidates


def _static_order(plan: Plan, user: Mapping[str, Any], env: Env,
                  candidates: list[Fix]) -> list[tuple[FixFacts, Fix]]:
    """The candidates in the order the ranking's parts known before solving give, so the search can
    stop early; declared alternatives come first: few, and each must be verified whatever its size."""
    hinted_flags = {frozenset(f.flags()) for f in candidates if f.rule}
    ordered = sorted(((_static_facts(plan, user, env, hinted_flags, order, fix), fix)
                      for order, fix in enumerate(candidates)),
                     key=lambda item: fix_key(item[0]))
    return [item for item in ordered if item[1].alternative is not None] + \
           [item for item in ordered if item[1].alternative is None]


def _static_facts(plan: Plan, user: Mapping[str, Any], env: Env, hinted_flags: set[frozenset[str]],
                  order: int, fix: Fix) -> FixFacts:
    """A candidate's ranking facts before solving (KV floor and warnings assumed fine until verified)."""
    hinted = 0 if fix.rule is not None else 1 if fix.changes and frozenset(fix.flags()) in hinted_flags else 2
    return FixFacts(size=fix.size(), hinted=hinted,
                    kv_ok=True, added_warnings=0, checkpoint_set=checkpoint_set(plan, fix.changes),
                    typed_touched=sum(1 for name in fix.flags() if name in user),
                    slowness=slowness(plan, fix.changes, env),
                    distance=sum(distance(v, user.get(n)) for n, v in fix.changes), order=order)


def _verified(launch: Launch, base: Launch, env: Env,
              ordered: list[tuple[FixFacts, Fix]]) -> list[tuple[FixFacts, Fix]]:
    """The candidates that solve (as `base`, the launch as typed, changed), with their solved
    ranking facts; stops once MAX_FIXES of them would be picked as clean (KV floor kept, no new
    warning), since a later one ranks after them."""
    plan, user, facts = launch.plan, launch.user, launch.facts
    before: frozenset[str] | None = None
    scored: list[tuple[FixFacts, Fix]] = []
    clean, sizes = 0, {}
    for known, fix in ordered:
        solved = base.changed(fix.apply(user), fix.flags())
        if not solved.satisfiable:
            continue
        if before is None:
            before = launch.warnings
        verified = _solved_facts(plan, user, facts, env, fix, known, solved, solved.warnings - before)
        scored.append((verified, fix))
        if verified.kv_ok and verified.added_warnings == 0 and fix.alternative is None:
            # counted as `pick` would take it: a third size of one flag waits behind other ways out
            flag = _size_flag(plan, fix)
            sizes[flag] = sizes.get(flag, 0) + 1
            clean += flag is None or sizes[flag] <= PER_FLAG
        if clean == MAX_FIXES:
            break
    return scored


def _solved_facts(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any], env: Env, fix: Fix,
                  known: FixFacts, solved: Launch, added: frozenset[str]) -> FixFacts:
    """A candidate's ranking facts once solved: the static ones with what only the solve tells."""
    kv_ok = not kv_floor_moves(plan, fix.flags()) or kv_floor_holds(plan, solved.user, facts, solved.decisions)
    # A dropped flag is as fast, and as far from the typed value, as what the solver then picks.
    now = list(fix.changes)
    if fix.drops:
        after = Env(plan, solved.user, facts, solved.decisions, solved.shared)
        now += [(name, _value(after, name)) for name in fix.drops]
    return dataclasses.replace(known, kv_ok=kv_ok, added_warnings=len(added),
                               slowness=slowness(plan, now, env),
                               distance=sum(distance(v, user.get(n), n in fix.drops) for n, v in now))


def _declared_order(ranked: list[tuple[FixFacts, Fix]]) -> list[Fix]:
    """The ranked fixes, with each rule's declared alternatives (and the sizes tried near their
    values) together at the place of the best-ranked of them, in the declared order: those keeping
    the KV floor first, then the alternatives themselves before the sizes near them."""
    groups: dict[str, list[tuple[FixFacts, Fix]]] = {}
    for facts, fix in ranked:
        if fix.alternative is not None:
            groups.setdefault(fix.alternative[0], []).append((facts, fix))
    out = []
    for _, fix in ranked:
        if fix.alternative is None:
            out.append(fix)
        elif fix.alternative[0] in groups:  # the group's first place: all of it, in order (a stable sort)
            items = groups.pop(fix.alternative[0])
            out += [f for _, f in sorted(items, key=lambda item: (not item[0].kv_ok, item[1].rule is None,
                                                                   item[1].alternative[1]))]
    return out


def _command_key(plan: Plan, fix: Fix) -> str:
    """What the fix does to the command line: setting a switch to its default off value writes the
    same command as dropping it, so the two are one candidate (the first proposed: the rule's own)."""
    drops = set(fix.drops)
    changes = []
    for name, value in fix.changes:
        flag = plan.catalog[name]
        unwritable = flag.type == "bool" and not flag.value_optional and not flag.negated
        if value == flag.default and (value is None or (unwritable and not value)):
            drops.add(name)
        else:
            changes.append((name, value))
    return Fix(tuple(changes), tuple(sorted(drops))).key()


def _value(env: Env, name: str) -> Any:
    try:
        return env.flag(name)
    except UnknownFact:
        return None


def _size_flag(plan: Plan, fix: Fix) -> str | None:
    """The flag a fix sets to another size, when that is all it does (else None)."""
    if len(fix.changes) == 1 and not fix.drops and plan.catalog[fix.changes[0][0]].type == "int":
        return fix.changes[0][0]
    return None


def _proposals(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
               flags: list[str], rules: list[Rule]) -> list[Fix]:
    """Every candidate in preference order: hints, other values, added flags, drops."""
    env = Env(plan, dict(user), facts, {})
    hints = [fix for rule in rules for fix in hint_fixes(rule, env, user)]
    values = [Fix(changes=((name, value),)) for name in flags
              for value in _alternatives(plan, name, user[name], facts)]
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
    for hint in list(hints):
        # A hint sizes a count (the smallest tp the weights fit): the sizes near it are fixes too
        # (a larger one may leave the KV cache room the smallest does not).
        # Near a declared alternative's value they stay in its place (and carry its note).
        for name, value in hint.changes:
            if name not in user and plan.catalog[name].type == "int" and isinstance(value, int) \
                    and not isinstance(value, bool):
                added += [Fix(changes=((name, v),), note=hint.note, alternative=hint.alternative)
                          for v in nearer_sizes(plan, value, facts, name)]
    drops = [Fix(changes=(), drops=(name,)) for name in flags]
    return hints + values + added + drops


def hint_fix(rule: Rule, env: Env, user: Mapping[str, Any]) -> Fix | None:
    """The change a rule's `fix:` hint names for this command (None when it cannot be computed);
    for a rule declaring alternatives, the first that changes something (else the first).

    A hint value equal to what the user typed is no change; None means "remove the flag".
    """
    fixes = hint_fixes(rule, env, user)
    return next((fix for fix in fixes if fix.size()), fixes[0] if fixes else None)


MAX_HINT_PASSES = 4  # passes over a declared alternative's values until they settle


def hint_fixes(rule: Rule, env: Env, user: Mapping[str, Any]) -> list[Fix]:
    """The changes a rule's `fix:` hints name for this command, in the declared order.

    A plain `fix:` map is one hint, its values computed against the command as typed. An
    alternative of a `fix:` list is offered when its `when` holds for the command as typed; its
    values are computed in the order written, each against the command with the values before it
    (and, from the second pass on, all of its values) applied, until they settle: so an offload
    size written after a tp size is sized for that tp, and a node count for the memory budget of
    the tp it leads to. A hint whose values cannot be computed (an unknown fact) is left out.
    """
    declared = bool(rule.fix_alternatives)
    out = []
    for number, (pairs, when, note, fill_in) in enumerate(rule.fix_hints()):
        try:
            if when is not None and not when(env):
                continue
            values = _settled(pairs, env) if declared else [(name, expr(env)) for name, expr in pairs]
        except UnknownFact:
            continue
        except (TypeError, ZeroDivisionError):
            if not declared:
                raise
            continue  # a value the alternative reads came out None (no node count fits, say)
        changes = tuple((n, v) for n, v in values if v is not None and not (n in user and user[n] == v))
        drops = tuple(n for n, v in values if v is None and n in user)
        changed = {n for n, _ in changes}
        out.append(Fix(changes=changes, drops=drops, rule=rule.id,
                       fill_in=tuple((n, what) for n, what in fill_in if n in changed),
                       note=note, alternative=(rule.id, number) if declared else None))
    return out


def _settled(pairs, env: Env) -> list[tuple[str, Any]]:
    """A declared alternative's values: each computed with the ones before it applied, in passes
    until no value changes (at most MAX_HINT_PASSES)."""
    values: dict[str, Any] = {}
    for _ in range(MAX_HINT_PASSES):
        before = dict(values)
        for name, expr in pairs:
            applied = {k: v for k, v in env.user.items() if k not in values}
            applied.update((k, v) for k, v in values.items() if v is not None)
            values[name] = expr(Env(env.plan, applied, env.facts, env.decided))
        if values == before:
            break
    return [(name, values[name]) for name, _ in pairs]


def _ordered_domain(plan: Plan, name: str) -> list[Any]:
    """A finite domain with the solver's preferred values first, without old spellings of other
    values (`value_aliases`: a fix to an old spelling is a fix to the value it names)."""
    flag = plan.catalog[name]
    spellings = {alias for alias, _ in flag.value_aliases}
    domain = [v for v in flag.finite_domain or [] if v not in spellings]
    preferred = plan.domain(name) if name in plan.prefer_rules else []
    return [v for v in preferred if v in domain] + [v for v in domain if v not in preferred]


def _alternatives(plan: Plan, name: str, current: Any, facts: Mapping[str, Any]) -> list[Any]:
    """Other values worth pinning for a typed flag, nearest first.

    None, and False for a plain switch, are left out: dropping the flag already says that.
    """
    flag = plan.catalog[name]
    if flag.finite_domain is None:
        if flag.type == "int" and isinstance(current, int) and not isinstance(current, bool) and current >= 1:
            # Sizes are mostly powers of two: the nearest ones are the likeliest legal values.
            return nearer_sizes(plan, current, facts, name)
        return []
    plain_switch = flag.type == "bool" and not flag.negated and not flag.value_optional
    return [v for v in _ordered_domain(plan, name)
            if v != current and v is not None and not (plain_switch and v is False)]


