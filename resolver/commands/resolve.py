"""`accord resolve`: resolve a launch command and print the configuration, or explain the conflict.

Exit codes: 0 resolved, 2 bad usage (unknown flag, bad value, unreadable file, unknown preset),
3 no legal configuration (the conflicts and their fixes are printed; `--json` for tools).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from accord.resolver.api import ConflictError, resolve, unchecked
from accord.resolver.commandline.commandparser import own_options
from accord.resolver.commandline.flagparse import ParsedFlags, detect_system, parse_flags
from accord.resolver.commandline.release_target import read_older_words, refuse_unparsed, release_note
from accord.resolver.commands.options import add_fact_options
from accord.resolver.errors import EXIT_CONFLICT
from accord.resolver.facts.machine import load_facts, saved_facts, with_overrides
from accord.resolver.facts.model import model_note
from accord.resolver.facts.model_sources import ModelSource, find_model
from accord.resolver.frozen import ResolvedConfig, thaw


def add_options(parser: argparse.ArgumentParser) -> None:
    add_fact_options(parser)
    parser.add_argument("--json", action="store_true", help="print JSON for tools")
    parser.add_argument("--strict", action="store_true",
                        help="refuse a combination publicly reported to hang, crash or produce garbage "
                             "at run time (exit 3), instead of warning about it")
    parser.add_argument("--relax", action="store_true",
                        help="apply the best fix of each conflict and report every change")
    parser.add_argument("--all", action="store_true",
                        help="print every flag, not only decided ones; with --dry-run, every "
                             "backend-like flag with each rule's reason")
    parser.add_argument("--dry-run", action="store_true",
                        help="list chosen, legal and excluded values of the backend-like flags this "
                             "machine and command rule a value out of (--all: of every one)")
    parser.add_argument("--flag", action="append", default=[], dest="only", metavar="NAME",
                        help="with --dry-run: only these flags, in full (repeatable)")


def resolve_command(argv: list[str], prog: str, options=None) -> tuple[argparse.Namespace, ParsedFlags, dict]:
    """Parse a launch command and load its facts (shared by resolve, why, serve and launch);
    `options` adds the command's own options (default: resolve's)."""
    system = detect_system(argv)
    own = own_options(system, options or add_options, prog)
    typed = list(argv)  # as typed, in the target release's words: what refuse_unparsed checks
    argv, older_words = read_older_words(argv, system, own)
    opts, parsed = parse_flags(argv, add_options=options or add_options, prog=prog)
    parsed = dataclasses.replace(parsed, warnings=(*parsed.warnings, *older_words))
    model_path, revision = parsed.user.get("model_path"), parsed.user.get("revision")
    saved = saved_facts(getattr(opts, "config", None))
    facts_typed = any(word == "--facts" or word.startswith("--facts=") for word in argv)
    if saved is not None and not facts_typed:
        facts = with_overrides(saved, opts.fact, f"the facts saved in {opts.config}")
        note = (f"resolved against the facts saved in {opts.config} (the machine and model it was resolved for); "
                f"give --facts to resolve it for another machine")
    else:
        facts = load_facts(opts.facts, opts.fact, model_path=model_path, system=parsed.system, revision=revision)
        note = model_note(model_path, parsed.system, revision)
        if saved is not None:
            note = "; ".join(filter(None, [note, f"--facts {opts.facts} replaces the facts saved in {opts.config}"]))
    refuse_unparsed(typed, own, parsed.system, facts, getattr(opts, "config", None) if saved is None else None)
    return opts, noted(noted(parsed, note), release_note(parsed.system, facts)), facts


def noted(parsed: ParsedFlags, note: str | None) -> ParsedFlags:
    """`parsed` with one more warning (a note on where its facts came from), when there is one."""
    return dataclasses.replace(parsed, warnings=(*parsed.warnings, note)) if note else parsed


def model_source(parsed: ParsedFlags) -> ModelSource | None:
    """Where the facts of the typed --model-path came from (None: no --model-path, or no source
    knew the model). Asking again costs nothing: the chain keeps its answer for a hub id."""
    model_path = parsed.user.get("model_path")
    if model_path is None:
        return None
    return find_model(model_path, parsed.system, parsed.user.get("revision")).source


def model_source_json(parsed: ParsedFlags) -> dict | None:
    """The `model_source` entry of `--json` outputs: which source answered, with the revision."""
    source = model_source(parsed)
    return source.to_dict() if source is not None else None


def conflict_json(err: ConflictError, parsed: ParsedFlags | None = None) -> str:
    """`--json` for a launch with no legal configuration: every conflict, its proof and fixes,
    and where the model's facts came from."""
    data = err.to_dict()
    if parsed is not None:
        data["model_source"] = model_source_json(parsed)
    return json.dumps(data, indent=2, sort_keys=True)


def print_conflict(err: ConflictError, as_json: bool, notes: tuple[str, ...] | list[str] = (),
                   parsed: ParsedFlags | None = None) -> int:
    """The conflict report; in text, followed by where the model's facts came from and what
    reading the command noted (`notes`: an old value spelling and what it became, so a report
    naming the current spelling is explained when the old one was typed)."""
    if as_json:
        print(conflict_json(err, parsed))
    else:
        from accord.resolver.explaining.layout import terminal_width, wrap_hanging
        from accord.resolver.explaining.proof import render_conflict, wants_color
        print(render_conflict(err, color=wants_color(sys.stderr)), file=sys.stderr)
        source = model_source(parsed) if parsed is not None else None
        if source is not None:
            print("\n".join(wrap_hanging("model: ", source.describe(), terminal_width())), file=sys.stderr)
        for line in notes:
            print("\n".join(wrap_hanging("note: ", line, terminal_width())), file=sys.stderr)
    return EXIT_CONFLICT


def print_config(config: ResolvedConfig, show_all: bool, parsed: ParsedFlags | None = None) -> None:
    from accord.resolver.explaining.layout import (  # the text table only; --json never needs it
        terminal_width,
        wrap_hanging,
    )
    from accord.resolver.explaining.report import value_table

    names = [n for n in config.values
             if show_all or config.provenance[n]["source"] != "default"]
    width = terminal_width()
    head = (f"{config.system} configuration {config.hash[:16]} "
            f"({len(names)} of {len(config.values)} flags shown{'' if show_all else '; --all for every flag'})")
    print("\n".join(wrap_hanging("# ", head, width)))
    source = model_source(parsed) if parsed is not None else None
    if source is not None:
        print("\n".join(wrap_hanging("# model: ", source.describe(), width)))
    print(value_table(config.values, config.provenance, names, width))
    for line in config.warnings:  # on stderr, so the table can be piped or saved on its own
        print("\n".join(wrap_hanging("warning: ", line, width)), file=sys.stderr)


def main(argv: list[str]) -> int:
    opts, parsed, facts = resolve_command(argv, "accord resolve")
    if opts.dry_run:
        return main_dry_run(parsed, facts, opts)
    try:
        config = resolve(parsed.system, parsed.user, facts, parsed.sources, relax=opts.relax,
                         warnings=parsed.warnings, strict=opts.strict, refuse_unchecked=opts.strict)
    except ConflictError as err:
        return print_conflict(err, opts.json, parsed.warnings, parsed)
    if opts.json:
        print(config_json(config, opts.relax, parsed))
    else:
        print_config(config, opts.all, parsed)
    return 0


def config_json(config: ResolvedConfig, relax: bool = False, parsed: ParsedFlags | None = None) -> str:
    """`accord resolve --json`: the configuration, where the model's facts came from (with
    `--model-path`) and, with `--relax`, what it changed."""
    data = config.to_dict()
    if parsed is not None and parsed.user.get("model_path") is not None:
        data["model_source"] = model_source_json(parsed)
    if relax:
        data["relaxed"] = relaxed_changes(config)
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False)


def dry_run_json(config: ResolvedConfig, choices) -> str:
    """`accord resolve --dry-run --json`: the configuration's hash and every choice's verdicts."""
    return json.dumps({"system": config.system, "hash": config.hash,
                       "choices": [c.to_dict() for c in choices]}, indent=2, sort_keys=True)


def relaxed_changes(config: ResolvedConfig) -> list[dict]:
    """What `--relax` changed, flag by flag: `{"flag", "from", "to", "rule"}` (null: unset)."""
    return [{"flag": name, "from": thaw(prov.get("was")), "to": thaw(config.values[name]), "rule": prov.get("rule")}
            for name, prov in config.provenance.items() if prov.get("source") == "relax"]


def main_dry_run(parsed, facts, opts) -> int:
    """`accord resolve --dry-run`: the dry-run table (or JSON), or the conflict of the command itself.
    The table is the short view unless `--all` or `--flag` asks for flags in full; JSON is complete."""
    from accord.resolver.exploring.dryrun import dry_run
    from accord.resolver.exploring.dryrun_text import render, render_short

    try:
        config, choices = dry_run(parsed.system, parsed.user, facts, opts.only)
    except ConflictError as err:
        return print_conflict(err, opts.json, parsed.warnings, parsed)
    if opts.json:
        print(dry_run_json(config, choices))
        return 0
    # Said before the table (on stderr, so the table pipes alone): every verdict in it holds only for
    # the rules that could be checked.
    skipped = unchecked(config.warnings)
    if skipped:
        from accord.resolver.explaining.layout import terminal_width, wrap_hanging

        rules = sum(len(ids) for ids in skipped.values())
        print("\n".join(wrap_hanging("warning: ", f"{rules} rules were not checked, for want of "
                                      f"{', '.join(sorted(skipped))}: values they would exclude may be listed as "
                                      f"legal; give the model's facts (--model-path, or --fact KEY=VALUE)",
                                      terminal_width())), file=sys.stderr, flush=True)
    for line in parsed.warnings:
        print(f"warning: {line}", file=sys.stderr, flush=True)
    print(render(choices) if opts.all or opts.only else render_short(choices, typed=parsed.user))
    return 0
