"""`accord upgrade --to V [--from V0] FLAGS...`: a launch command rewritten for another SGLang release.

    $ accord upgrade --to 0.5.23 --from 0.4.10.post2 --model-path M --tp 8 --cuda-graph-max-bs 64
    --model-path M --tp-size 8 --cuda-graph-max-bs-decode 64
      rewritten   --cuda-graph-max-bs 64 -> --cuda-graph-max-bs-decode 64: after the prefill/decode split, ...

The command is read with V0's own parser (the release catalog has every release's options), each
option carried to V (release_words: renamed, rewritten, replaced by its successor, dropped, or not
expressible), and the defaults that changed under what the command leaves out are listed: they are
the silent part of an upgrade. Without --from, the command is read as the newest release that parses
every word of it (said in the output). Works in either direction (--to an older release too).

Exit codes: 0 rewritten, every option carried; 2 bad usage (an unknown release, a word V0 does not
parse); 3 V cannot express the command (the rewrite is printed, with what is lost and why).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from accord.resolver.commandline.release_target import Rewritten, rewrite
from accord.resolver.commandline.release_words import split_command
from accord.resolver.commandline.releases import ReleaseCatalog, release_catalog
from accord.resolver.errors import EXIT_CONFLICT, UsageError

SYSTEMS_WITH_CATALOGS = ("llm", "diffusion")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="accord upgrade", allow_abbrev=False,
        description="Rewrite an SGLang launch command for another release and explain every change.",
        epilog="Exit codes: 0 rewritten; 2 bad usage; 3 the target release cannot express the command.")
    parser.add_argument("--to", required=True, metavar="V", help="the release to rewrite the command for")
    parser.add_argument("--from", dest="source", metavar="V0",
                        help="the release the command was written for (default: the newest release whose "
                             "parser takes every word of it)")
    parser.add_argument("--system", choices=SYSTEMS_WITH_CATALOGS, default="llm",
                        help="which server's flags (default: llm)")
    parser.add_argument("--json", action="store_true", help="print JSON for tools")
    return parser


def main(argv: list[str]) -> int:
    opts, words = build_parser().parse_known_args(argv)
    catalog = release_catalog(opts.system)
    if catalog is None:
        raise UsageError(f"Accord has no release catalog for the {opts.system} server.")
    target = catalog.nearest(opts.to)
    source, guessed = (catalog.nearest(opts.source), False) if opts.source else (_guess_source(catalog, words), True)
    result = rewrite(words, opts.system, source, target)
    if opts.json:
        print(json.dumps(_to_dict(result, guessed), indent=2, sort_keys=True))
    else:
        _print_text(result, guessed)
    return 0 if result.expressed else EXIT_CONFLICT


def _guess_source(catalog: ReleaseCatalog, words: list[str]) -> str:
    """The newest release whose parser takes every word of the command."""
    for release in reversed(catalog.releases):
        if not split_command(words, catalog, release)[1]:
            return release
    raise UsageError("no SGLang release in Accord's catalog parses every word of this command "
                     f"({catalog.oldest} to {catalog.newest}); say which release it was written for with "
                     "--from V0, and Accord names the words that release refuses.")


def _to_dict(result: Rewritten, guessed: bool) -> dict:
    return {"from": result.source, "from_guessed": guessed, "to": result.target, "command": list(result.words),
            "expressed": result.expressed, "changes": [c.to_dict() for c in result.changes],
            "defaults_changed": [{"option": o, "before": a, "after": b} for o, a, b in result.defaults]}


def _print_text(result: Rewritten, guessed: bool) -> None:
    print(shlex.join(result.words))
    how = " (the newest release that parses every word; --from to say otherwise)" if guessed else ""
    print(f"# from SGLang {result.source}{how} to {result.target}", file=sys.stderr)
    for change in result.changes:
        after = " ".join(change.after) or "(nothing)"
        print(f"  {change.kind:<11} {change.before} -> {after}: {change.why}", file=sys.stderr)
    if not result.changes:
        print("  every option stays as written", file=sys.stderr)
    if result.defaults:
        print(f"# defaults that changed under settings the command leaves out ({len(result.defaults)}):",
              file=sys.stderr)
        for option, before, after in result.defaults:
            print(f"  {option}: {json.dumps(before)} -> {json.dumps(after)}", file=sys.stderr)
