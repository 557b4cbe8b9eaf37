"""`accord flags`: browse and search a system's flag catalog.

One entry per seed registration: a flag's current spellings form one entry, and each deprecated
spelling is its own entry saying which flag it now sets, so every option string of the seed can be
looked up (506 llm registrations, 79 diffusion). Short forms Accord adds (`--tp`) are marked.
The entries and their table and detail views are `commandline/flagtable.py`'s, shared with the
launch commands' `--help GROUP`; this module searches them.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from accord.resolver.commandline.flagspellings import suggest
from accord.resolver.commandline.flagtable import detail, entries, table
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import SYSTEMS, load_catalog


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{message}. Run `accord flags --help` for usage.")


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
        print(detail(exact, catalog))
    else:
        print(table(shown))
    return 0
