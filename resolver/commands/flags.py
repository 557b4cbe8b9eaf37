"""`accord flags`: browse and search a system's flag catalog.

One entry per seed registration: a flag's current spellings form one entry, and each deprecated
spelling is its own entry saying which flag it now sets, so every option string of the seed can be
looked up (506 llm registrations, 79 diffusion). Short forms Accord adds (`--tp`) are marked.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from accord.resolver.commandline.flagspellings import suggest
from accord.resolver.commandline.flagvalues import describe_expected
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import SYSTEMS, Catalog, Flag, load_catalog


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{message}. Run `accord flags --help` for usage.")


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


def _matches(entry: dict[str, Any], word: str) -> bool:
    needle = word.lower().lstrip("-").replace("_", "-")
    haystack = " ".join(
        [entry["name"], entry["help"] or "", entry["group"]]
        + entry["flags"]
        + [str(c) for c in entry["choices"] or ()]
    ).lower().replace("_", "-")
    return needle in haystack


def _exact(catalog_entries: list[dict[str, Any]], word: str) -> list[dict[str, Any]]:
    """All entries of the flag a word names exactly: a dest, an option string, or one without dashes."""
    spelled = "--" + word.lstrip("-").replace("_", "-")
    names = {e["name"] for e in catalog_entries if word == e["name"] or word in e["flags"] or spelled in e["flags"]}
    return [e for e in catalog_entries if e["name"] in names]


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


def _table(rows: list[dict[str, Any]]) -> str:
    lines = []
    for e in rows:
        notes = [f"default {json.dumps(e['default'])}", e["group"]]
        if _deprecated_text(e):
            notes.append(_deprecated_text(e))
        lines.append(f"{_spellings_text(e)}  [{_type_text(e)}]  ({'; '.join(notes)})")
        if e["help"]:
            lines.append(f"    {e['help']}")
    return "\n".join(lines)


def _detail(rows: list[dict[str, Any]], catalog: Catalog) -> str:
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


def main(argv: list[str]) -> int:
    parser = _Parser(prog="accord flags", description="Browse and search the flag catalog.", allow_abbrev=False)
    parser.add_argument("--system", default="llm", help="llm (default) or diffusion.")
    parser.add_argument("--group", help="Only flags of this group.")
    parser.add_argument("--json", action="store_true", help="One JSON object per seed registration.")
    parser.add_argument("word", nargs="?", metavar="NAME_OR_WORD",
                        help="A flag name or spelling, or a word to search for.")
    args, extras = parser.parse_known_args(argv)
    if len(extras) == 1 and extras[0].startswith("--") and args.word is None:
        args.word = extras[0]  # `accord flags --tp`: a spelling to look up, not an option of this command
    elif extras:
        raise UsageError(f"unexpected argument {extras[0]!r}. Run `accord flags --help` for usage.")
    if args.system not in SYSTEMS:
        raise UsageError(f"unknown system {args.system!r} for --system; use one of: {', '.join(SYSTEMS)}.")
    catalog = load_catalog(args.system)
    rows = entries(catalog)
    if args.group:
        groups = sorted({e["group"] for e in rows})
        if args.group not in groups:
            raise UsageError(f"unknown group {args.group!r} for --system {args.system}; groups: {', '.join(groups)}.")
        rows = [e for e in rows if e["group"] == args.group]
    exact = _exact(rows, args.word) if args.word else []
    if args.word and not exact:
        rows = [e for e in rows if _matches(e, args.word)]
        if not rows:
            close = suggest(args.word if args.word.startswith("--") else "--" + args.word.replace("_", "-"),
                            sorted({s for e in entries(catalog) for s in e["flags"]}))
            hint = f" Did you mean {' or '.join(close)}?" if close else ""
            raise UsageError(f"no {args.system} flag matches {args.word!r}.{hint}")
    shown = exact or rows
    if args.json:
        print(json.dumps(shown, indent=2, sort_keys=True))
    elif exact:
        print(_detail(exact, catalog))
    else:
        print(_table(shown))
    return 0
