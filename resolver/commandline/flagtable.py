"""A flag catalog as text and data: one entry per seed registration, a table and a detail view.

Why a module of its own: `accord flags` browses the catalog with these views, and every launch
command's `--help GROUP` (resolver/commandline/commandhelp.py) lists a group with the same table, so
a flag reads the same wherever it is looked up. A flag's current spellings form one entry, and each
deprecated spelling is its own entry saying which flag it now sets.
"""

from __future__ import annotations

import json
from typing import Any

from accord.resolver.commandline.flagvalues import describe_expected
from accord.resolver.language.catalog import Catalog, Flag


def _flag_entry(flag: Flag) -> dict[str, Any]:
    return {
        "name": flag.name,
        "flags": list(flag.flags + flag.short_forms + flag.negated),
        "short_forms": list(flag.short_forms),
        "type": flag.type,
        "element": flag.element,
        "nargs": flag.nargs,
        "nullable": flag.nullable,
        "choices": list(flag.choices) if flag.choices else None,
        "extensible": flag.extensible,
        "human_int": flag.human_int,
        "default": flag.default,
        "group": flag.group,
        "deprecated": dict(flag.deprecated) if flag.deprecated else None,
        "help": flag.help,
        "line": flag.line,
    }


def entries(catalog: Catalog) -> list[dict[str, Any]]:
    """Every seed registration of the catalog, in catalog order."""
    out: list[dict[str, Any]] = []
    for flag in catalog:
        if flag.flags:
            out.append(_flag_entry(flag))
        for spelling in flag.deprecated_spellings:
            entry = _flag_entry(flag)
            renamed = spelling.value is None
            replacement = spelling.replacement or (
                flag.primary if renamed or spelling.value is True else f"{flag.primary}={spelling.value}"
            )
            deprecated: dict[str, Any] = {"replacement": replacement, "sets": flag.name}
            if not renamed:
                deprecated["value"] = spelling.value
            entry.update(
                flags=[spelling.flag],
                short_forms=[],
                type=flag.type if renamed else "bool",
                element=flag.element if renamed else None,
                nargs=flag.nargs if renamed else None,
                nullable=flag.nullable if renamed else False,
                choices=list(flag.choices) if renamed and flag.choices else None,
                deprecated=deprecated,
                line=spelling.line,
            )
            out.append(entry)
    return out


def _type_text(entry: dict[str, Any]) -> str:
    kind = entry["type"]
    if kind == "list":
        kind = f"list of {entry['element'] or 'str'}"
    if entry["choices"]:
        values = entry["choices"]
        kind = "|".join(map(str, values)) if len(values) <= 6 else f"choice of {len(values)}"
        if entry["type"] == "list":
            kind = f"list of {kind}"
    if entry["nullable"]:
        kind += " or none"
    return kind


def _spellings_text(entry: dict[str, Any]) -> str:
    short = set(entry["short_forms"])
    return ", ".join(f"{s} (short form)" if s in short else s for s in entry["flags"])


def _deprecated_text(entry: dict[str, Any]) -> str:
    deprecated = entry["deprecated"]
    if not deprecated:
        return ""
    if deprecated.get("removed"):
        return f"removed: use {deprecated['replacement']}"
    if deprecated.get("ignored"):
        replacement = deprecated.get("replacement")
        return "deprecated, ignored" + (f"; use {replacement}" if replacement else "")
    return f"deprecated: use {deprecated['replacement']}"


def table(rows: list[dict[str, Any]]) -> str:
    """Entries as a list to scan: spellings, type, default, group and deprecation on one line, the
    help indented below it."""
    lines = []
    for e in rows:
        notes = [f"default {json.dumps(e['default'])}", e["group"]]
        if _deprecated_text(e):
            notes.append(_deprecated_text(e))
        lines.append(f"{_spellings_text(e)}  [{_type_text(e)}]  ({'; '.join(notes)})")
        if e["help"]:
            lines.append(f"    {e['help']}")
    return "\n".join(lines)


def detail(rows: list[dict[str, Any]], catalog: Catalog) -> str:
    """One flag (`rows`: its entries) in full: what it accepts, its default, choice metadata, and
    what each deprecated spelling became."""
    flag = catalog[rows[0]["name"]]
    lines = [
        f"{flag.name}  ({catalog.system}, group {flag.group}, seed line {flag.line})",
        f"  {flag.help}",
        f"  spellings: {_spellings_text(rows[0]) if flag.flags else '(none current)'}",
        f"  accepts:   {describe_expected(flag)}" + (" (or none)" if flag.nullable else ""),
        f"  default:   {json.dumps(flag.default)}",
    ]
    if flag.extensible:
        lines.append(f"  extensible: values outside the list are accepted with a warning ({flag.choices_from}).")
    if flag.human_int:
        lines.append("  human-readable integers: 32k = 32000, 32K = 32768.")
    if flag.choice_meta:
        lines.append(f"  choice metadata (rules read meta({flag.name}).PROPERTY):")
        for prop in flag.choice_meta:
            lines.append(f"    {prop.name} (default {json.dumps(prop.default)}): {prop.about}")
            groups: dict[str, list[str]] = {}
            for choice, value in prop.values:
                shown = value if isinstance(value, str) else json.dumps(value)
                groups.setdefault(shown, []).append(str(choice))
            lines += [f"      {value}: {', '.join(choices)}" for value, choices in groups.items()]
    for e in rows:
        if e["deprecated"]:
            lines.append(f"  {', '.join(e['flags'])}: {_deprecated_text(e)}")
    return "\n".join(lines)
