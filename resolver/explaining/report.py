"""Turning results into text people read: flag spellings, conflicts as short proofs, value tables."""

from __future__ import annotations

import json
from typing import Any, Mapping

from accord.resolver.explaining import layout
from accord.resolver.language.catalog import Catalog


def flag_arg(catalog: Catalog, name: str, value: Any) -> str:
    """The command-line spelling that sets `name` to `value` (`--tp-size 2`, `--no-x`, `--y`)."""
    flag = catalog[name]
    spelling = flag.primary
    if flag.type == "bool" and not flag.value_optional:
        if value:
            return spelling
        if flag.negated:
            return flag.negated[0]
        return f"(omit {spelling})"
    if value is None:
        return f"(omit {spelling})"
    if isinstance(value, (list, tuple)):
        return f"{spelling} " + " ".join(_scalar(v) for v in value)
    if isinstance(value, Mapping):  # a JSON flag's object (a read-only mapping in a resolved config)
        return f"{spelling} '{json.dumps(value, sort_keys=True, default=dict)}'"
    return f"{spelling} {_scalar(value)}"


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return text if text and all(c.isalnum() or c in "-_.:/=,+@" for c in text) else repr(text)


def describe_value(value: Any) -> str:
    # default=dict: a resolved config holds JSON objects as read-only mappings (frozen.py)
    return json.dumps(value, sort_keys=True, default=dict) if not isinstance(value, str) else value


def fix_text(catalog: Catalog, fix) -> str:
    """A fix as what to type: the new flags, and which flags to remove."""
    parts = [flag_arg(catalog, name, value) for name, value in fix.changes]
    parts += [f"drop {catalog[name].primary}" for name in fix.drops]
    return "; ".join(parts) if parts else "(no change)"


def conflict_message(catalog: Catalog, rules_by_id: Mapping[str, Any], facts: Mapping[str, Any],
                     user: Mapping[str, Any], conflict) -> str:
    """One paragraph: what you set, what the machine is, which rules, why."""
    shown = conflict.typed()
    if shown:
        typed = " ".join(flag_arg(catalog, n, user[n]) for n in shown)
        head = f"You set {typed}"
    else:
        head = "The defaults"
    machine = ", ".join(f"{k}={describe_value(facts[k])}" for k in conflict.facts)
    head += f" on a machine with {machine}" if machine else ""
    clauses = [f"rule {rid} {rule_clause(rules_by_id[rid])}: {rules_by_id[rid].reason}" for rid in conflict.rules]
    return f"{head}, but " + "; and ".join(clauses) + ("" if clauses[-1].endswith(".") else ".")


def rule_clause(rule) -> str:
    """`requires `x` when `y`` / `forbids `y``, with the rule's whole condition (never elided)."""
    def shown(expr) -> str:
        return f"`{' '.join(expr.source.split())}`"
    if rule.kind == "require":
        when = f" when {shown(rule.when)}" if rule.when is not None else ""
        return f"requires {shown(rule.require)}{when}"
    return f"forbids {shown(rule.when)}"


def names_read(rule, user: Mapping[str, Any], facts: Mapping[str, Any], value_of=None) -> str:
    """The values of the facts and flags a rule reads, as `name = value`, so a reader can evaluate
    the condition by hand. `value_of(name)` gives what an unset flag stands for (its default or
    derived value), shown with "(unset)"; without it unset flags say "(not set)"."""
    flags, known = set(), set()
    for expr in (rule.when, getattr(rule, "require", None)):
        if expr is not None:
            flags |= set(expr.flags)
            known |= set(expr.facts)
    shown = [f"{k} = {describe_value(facts[k]) if k in facts else 'unknown'}" for k in sorted(known)]
    for name in sorted(flags):
        if name in user:
            shown.append(f"{name} = {describe_value(user[name])}")
        elif value_of is None:
            shown.append(f"{name} = (not set)")
        else:
            shown.append(f"{name} = {describe_value(value_of(name))} (unset)")
    return ", ".join(shown)


def value_table(values: Mapping[str, Any], provenance: Mapping[str, Mapping[str, Any]],
                names: list[str], width: int | None = None) -> str:
    """Aligned `flag  value  source` rows that fit `width` columns (default: the terminal's)."""
    rows = []
    for name in names:
        prov = provenance.get(name, {})
        source = prov.get("source", "")
        if prov.get("rule"):
            source += f" {prov['rule']}"
            if prov.get("typed") is not None:  # an auto choice the user typed, decided by this rule
                source += f" (typed {prov['typed']})"
        elif prov.get("via"):
            source += f" ({prov['via']})"
        rows.append((name, values[name], describe_value(values[name]), source))
    return layout.value_table(rows, width or layout.terminal_width())
