"""The resolver's public entry point: user values + facts -> ResolvedConfig, or a ConflictError.

Everything the CLI, the matrix generator, the dry-run and the engine need goes through `resolve`,
so they all agree on what is legal. Plans are compiled once per system and process.
"""

from __future__ import annotations

import functools
import re
import weakref
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from accord.resolver.errors import EXIT_CONFLICT, AccordError, UncheckedError, UsageError
from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.catalog import load_catalog
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.ruleset import load_rules
from accord.resolver.language.ruleset import strict as strict_rules
from accord.resolver.solving.env import Outcome
from accord.resolver.solving.solve import Env, Plan

if TYPE_CHECKING:
    from accord.resolver.explaining.diagnose import Conflict

# explain, fixes and the conflict report are imported where a conflict is handled: a launch that
# resolves (most of them, and every cold `accord resolve` that succeeds) never pays for them.

MAX_RELAX_ROUNDS = 8


@functools.lru_cache(maxsize=None)
def plan_for(system: str, strict: bool = False) -> Plan:
    """The compiled catalog and rules of a system (loaded once per process). `strict` refuses the
    known-bad runtime combinations (rules of kind known_bad) instead of warning about them."""
    rules = load_rules(system)
    return Plan(load_catalog(system), strict_rules(rules) if strict else rules)


class ConflictError(AccordError):
    """No legal configuration: carries every independent minimal conflict, each with fixes.

    The report (resolver/explaining/conflict_report.py) is built on first use: chains and the combined fix
    take extra solves that a caller which only needs the conflicts should not pay for.
    """

    exit_code = EXIT_CONFLICT

    def __init__(self, plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                 conflicts: list[Conflict], command: Mapping[str, Any] | None = None):
        self.system = plan.catalog.system
        self.user = dict(user)
        self.command = self.user if command is None else dict(command)  # as typed (see conflict_report.build)
        self.facts = dict(facts)
        self.conflicts = conflicts
        self._plan = plan
        self._report: dict | None = None
        super().__init__(f"no legal {self.system} configuration")

    @property
    def report(self) -> dict:
        from accord.resolver.explaining import conflict_report
        if self._report is None:
            self._report = conflict_report.build(self._plan, self.user, self.facts, self.conflicts, self.command)
        return self._report

    def __str__(self) -> str:
        return self.text()

    def text(self) -> str:
        """One paragraph per conflict (its message and fixes), for a log line or an exception."""
        parts = []
        entries = self.report["conflicts"]
        for i, entry in enumerate(entries, 1):
            prefix = f"conflict {i} of {len(entries)}: " if len(entries) > 1 else "conflict: "
            fixes = entry["fixes"]
            fix = (" Fix: " + " | ".join(fixes) + ".") if fixes else " No single change fixes it."
            parts.append(prefix + entry["message"] + fix)
        return "\n".join(parts)

    def to_dict(self) -> dict:
        return self.report


def _check_known_flags(plan: Plan, user: Mapping[str, Any]) -> None:
    unknown = sorted(name for name in user if name not in plan.catalog.flags)
    if unknown:
        raise UsageError(f"unknown {plan.catalog.system} flag name(s) {unknown}; "
                         f"see `accord flags --system {plan.catalog.system}`.")


def _apply_combined_fix(plan: Plan, user: dict[str, Any], facts: Mapping[str, Any],
                        conflicts: list[Conflict], relaxed: dict[str, dict],
                        notes: list[str]) -> dict[str, Any] | None:
    """`--relax`: apply the best verified fix of all conflicts together, recording every change as
    provenance and a note (None when there is none). A placeholder is applied only when no other
    fix exists, and its note says what to fill in."""
    from accord.resolver.explaining.diagnose import combined_fix, upstream_rewrite
    from accord.resolver.explaining.fixes import combine
    from accord.resolver.explaining.report import flag_arg

    parts = upstream_rewrite(plan, user, facts, conflicts)
    as_upstream = parts is not None
    if parts is None:
        parts = combined_fix(plan, user, facts, conflicts, avoid_fill_in=True)
    if parts is None:
        return None
    for fix, conflict in parts:
        rule = fix.rule or conflict.rules[0]
        for name, value in fix.changes:
            relaxed[name] = {"source": "relax", "rule": rule, "was": user.get(name)}
            before = flag_arg(plan.catalog, name, user[name]) if name in user else "unset"
            notes.append(f"[relax] {flag_arg(plan.catalog, name, value)} instead of {before} (rule {rule})")
        for name in fix.drops:
            relaxed[name] = {"source": "relax", "rule": rule, "was": user.get(name)}
            notes.append(f"[relax] dropped {flag_arg(plan.catalog, name, user[name])} (rule {rule})")
        for name, what in fix.fill_in:
            notes.append(f"[relax] {plan.catalog[name].primary} is a placeholder: {what}")
    return combine([fix for fix, _ in parts]).apply(user, as_upstream=as_upstream)


def _as_typed(typed: Mapping[str, Any], user: Mapping[str, Any], typed_auto: Mapping[str, Any]) -> dict[str, Any]:
    """The launch as typed, with what `--relax` changed: the user's order, typed auto choices kept."""
    out = {name: user.get(name, value) for name, value in typed.items() if name in user or name in typed_auto}
    out.update((name, value) for name, value in user.items() if name not in out)
    return out


_REPORTED: "weakref.WeakKeyDictionary[Plan, tuple[tuple[str, ...], frozenset[str]]]" = weakref.WeakKeyDictionary()


def _shown(plan: Plan, user: Mapping[str, Any]) -> tuple[str, ...] | list[str]:
    """The flags that belong in the resolved values, in catalog order.

    A retired flag (ignored or removed upstream) never does anything, and a deprecated one the user
    did not type only mirrors its replacement, so neither is reported: the values then feed back
    through `--config` without reviving old spellings, and give the same values and hash. What is
    shown when no deprecated flag is typed (most launches) is worked out once per plan.
    """
    found = _REPORTED.get(plan)
    if found is None:
        usual, deprecated = [], set()
        for name in plan.names:
            flag_deprecated = plan.catalog[name].deprecated or {}
            if flag_deprecated.get("ignored") or flag_deprecated.get("removed"):
                continue
            if flag_deprecated:
                deprecated.add(name)
            else:
                usual.append(name)
        found = _REPORTED[plan] = (tuple(usual), frozenset(usual), frozenset(deprecated))
    usual, always, deprecated = found
    if deprecated.isdisjoint(user):
        return usual
    return [name for name in plan.names if name in always or (name in deprecated and name in user)]


# Provenance entries shared by every config (read-only, so `ResolvedConfig` keeps them as they are).
_DEFAULT = MappingProxyType({"source": "default"})
_BY_RULE: dict[str, MappingProxyType] = {}


def _by_rule(rule_id: str) -> MappingProxyType:
    found = _BY_RULE.get(rule_id)
    if found is None:
        found = _BY_RULE[rule_id] = MappingProxyType({"source": "rule", "rule": rule_id})
    return found


_UNCHECKED = re.compile(r"\[(?P<rule>[^\]]+)\] not checked: fact (?P<fact>\S+) is unknown")


def _unchecked_note(rule_id: str, fact: str) -> str:
    """The warning for a rule skipped for want of a fact (`unchecked` reads it back)."""
    return f"[{rule_id}] not checked: fact {fact} is unknown"


def unchecked(warnings) -> dict[str, list[str]]:
    """Fact -> the rules a resolved config's warnings say were skipped for want of it."""
    found: dict[str, list[str]] = {}
    for warning in warnings:
        match = _UNCHECKED.fullmatch(warning)
        if match:
            found.setdefault(match["fact"], []).append(match["rule"])
    return found


def _unchecked_message(unknown) -> str:
    """One paragraph for `--strict` when rules went unchecked: each fact, the rules that needed
    it, and how to supply it."""
    needs: dict[str, list[str]] = {}
    for rule, missing in unknown:
        needs.setdefault(missing, []).append(rule.id)
    listed = "; ".join(f"{fact} (read by {', '.join(sorted(set(rules)))})" for fact, rules in sorted(needs.items()))
    model = any(fact.startswith("model.") for fact in needs)
    how = ("give --model-path a model Accord can read (a local folder, a hub id in the Hugging Face cache or "
           "among the built-in model cards, or one the hub can send) or " if model else "")
    return (f"--strict refuses a launch whose rules could not all be checked, and {len(needs)} fact(s) they read "
            f"are unknown: {listed}. To check them, {how}set each with --fact KEY=VALUE; without --strict they "
            f"are warnings.")


def resolve(system: str, user: Mapping[str, Any], facts: Mapping[str, Any],
            sources: Mapping[str, str] | None = None, relax: bool = False,
            warnings: tuple[str, ...] | list[str] = (), strict: bool = False,
            refuse_unchecked: bool = False) -> ResolvedConfig:
    """Resolve a launch. User values are never changed, except by `relax`, which reports each change.
    A known-bad runtime combination is a warning, or with `strict` a conflict citing its report. A
    rule left unchecked for want of a fact is a warning, or with `refuse_unchecked` (the CLI's
    `--strict`) an UncheckedError."""
    plan = plan_for(system, strict=True) if strict else plan_for(system)
    typed = user = dict(user)
    _check_known_flags(plan, user)
    typed_auto = _typed_auto(plan, user)
    if typed_auto:
        user = {name: value for name, value in user.items() if name not in typed_auto}
    sources = dict(sources or {})
    notes = list(warnings)
    relaxed: dict[str, dict] = {}
    user, outcome = _solve_or_relax(plan, typed, user, facts, typed_auto, relaxed if relax else None, notes)
    shown = _shown(plan, user)
    provenance = _provenance(plan, shown, outcome, user, relaxed, typed_auto, sources)
    final = Env(plan, user, facts, outcome.values)
    _add_warnings(plan, final, outcome, notes, refuse_unchecked)
    values = dict(zip(shown, map(outcome.values.__getitem__, shown)))
    return ResolvedConfig(system, facts, values, provenance, notes)


def _typed_auto(plan: Plan, user: Mapping[str, Any]) -> dict[str, Any]:
    """The typed auto choices: "let the resolver decide" pins nothing, so the rules decide them as if unset."""
    return {name: value for name, value in user.items()
            if plan.catalog[name].auto_choice is not None and value == plan.catalog[name].auto_choice}


def _solve_or_relax(plan: Plan, typed: Mapping[str, Any], user: dict[str, Any], facts: Mapping[str, Any],
                    typed_auto: Mapping[str, Any], relaxed: dict[str, dict] | None,
                    notes: list[str]) -> tuple[dict[str, Any], Outcome]:
    """The user values that solve and the solve's outcome. With `relaxed` (`--relax`) each round
    applies the combined fix of the conflicts, recording it there; otherwise, or when no fix is left
    or the rounds run out, a ConflictError with the launch as typed."""
    for _ in range(MAX_RELAX_ROUNDS):
        outcome = plan.solve(user, facts)
        if outcome.satisfiable:
            return user, outcome
        from accord.resolver.explaining.diagnose import find_conflicts
        conflicts = find_conflicts(plan, user, facts)
        fixed = _apply_combined_fix(plan, user, facts, conflicts, relaxed, notes) if relaxed is not None else None
        if fixed is None:
            raise ConflictError(plan, user, facts, conflicts, _as_typed(typed, user, typed_auto))
        user = fixed
    raise ConflictError(plan, user, facts, find_conflicts(plan, user, facts), _as_typed(typed, user, typed_auto))


def _provenance(plan: Plan, shown: Sequence[str], outcome: Outcome, user: Mapping[str, Any],
                relaxed: Mapping[str, dict], typed_auto: Mapping[str, Any],
                sources: Mapping[str, str]) -> dict[str, Mapping[str, Any]]:
    """Where each shown value came from. Every shown setting comes from its catalog default unless
    the user, `--relax` or a rule gave it its value; only those few names need looking at (a rule's
    origin is set only on the settings rules compute)."""
    provenance: dict[str, Mapping[str, Any]] = dict.fromkeys(shown, _DEFAULT)
    origin = outcome.origin
    for name in (*relaxed, *user, *typed_auto, *plan.computed):
        if name not in provenance:
            continue
        if name in relaxed:
            provenance[name] = relaxed[name]
        elif name in user:
            provenance[name] = {"source": "user", "via": sources.get(name, "cli")}
        elif origin[name]:
            if name in typed_auto:  # the user typed the auto choice; this rule decided it
                provenance[name] = {"source": "rule", "rule": origin[name], "typed": typed_auto[name]}
            else:
                provenance[name] = _by_rule(origin[name])
        elif name in typed_auto:  # no rule decides it: the auto choice stays, as the user typed
            provenance[name] = {"source": "user", "via": sources.get(name, "cli")}
    return provenance


def _add_warnings(plan: Plan, final: Env, outcome: Outcome, notes: list[str], refuse_unchecked: bool) -> None:
    """Append the rules left unchecked for want of a fact (or refuse them, for `--strict`) and the
    warning rules that fire on the resolved values."""
    if refuse_unchecked and outcome.unknown:
        raise UncheckedError(_unchecked_message(outcome.unknown))
    for rule, missing in outcome.unknown:
        notes.append(_unchecked_note(rule.id, missing))
    for rule in plan.warnings_to_check(final.user):
        try:
            if rule.when is None or rule.when(final):
                notes.append(f"[{rule.id}] {rule.message}")
        except UnknownFact:  # an unknown fact silences a warning rather than guessing
            continue
