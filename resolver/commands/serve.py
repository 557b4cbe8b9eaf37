"""`accord serve`: resolve for Accord's own engine, then start the processes the configuration describes.

Serve resolves with the fact `engine = accord`, which switches on the engine profile
(`rules/<system>/engine.yaml`): unset choices resolve to what the engine implements, and an
explicit value it cannot honour is a conflict with fixes, before anything starts. `accord resolve`
leaves the fact out and so describes an upstream SGLang launch.

`--print-config [--json]` resolves exactly as serve would, prints the frozen configuration and
starts nothing; its exit codes are resolve's (0, 2 bad usage, 3 conflict). A conflict is explained
and nothing starts (exit 3). The engine (torch, zmq) is imported only after a successful resolve,
so a bad command fails fast.
"""

from __future__ import annotations

import argparse

from accord.resolver.api import ConflictError, resolve
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.commands import resolve as resolve_cmd
from accord.resolver.errors import UsageError
from accord.resolver.facts.machine import load_facts
from accord.resolver.facts.model import model_note
from accord.rules.models.location import served_model_path

ENGINE_FACTS = {"engine": "accord"}


def add_options(parser: argparse.ArgumentParser) -> None:
    resolve_cmd.add_options(parser)
    parser.add_argument("--print-config", action="store_true",
                        help="resolve as serve would, print the configuration, start nothing")


def serve_facts(opts: argparse.Namespace, model_path: str | None, system: str, revision: str | None = None) -> dict:
    """The facts serve resolves against: the machine's (or the preset's) plus the engine fact."""
    facts = load_facts(opts.facts, opts.fact, model_path=model_path, system=system, revision=revision)
    return dict(sorted({**facts, **ENGINE_FACTS}.items()))


def main(argv: list[str]) -> int:
    opts, parsed = parse_flags(argv, add_options=add_options, prog="accord serve")
    if opts.all and not (opts.print_config or opts.dry_run):
        raise UsageError("--all chooses which flags --print-config or --dry-run shows; add one of "
                         "them (or drop --all) to serve.")
    model_path, revision = served_model_path(parsed.user.get("model_path"), parsed.system), parsed.user.get("revision")
    facts = serve_facts(opts, model_path, parsed.system, revision)
    parsed = resolve_cmd.noted(parsed, model_note(parsed.user.get("model_path"), parsed.system, revision))
    if opts.dry_run:
        return resolve_cmd.main_dry_run(parsed, facts, opts)
    try:
        config = resolve(parsed.system, parsed.user, facts, parsed.sources, relax=opts.relax,
                         warnings=parsed.warnings)
    except ConflictError as err:
        return resolve_cmd.print_conflict(err, opts.json, parsed.warnings, parsed)
    if opts.print_config:
        if opts.json:
            print(resolve_cmd.config_json(config, parsed=parsed))
        else:
            resolve_cmd.print_config(config, opts.all, parsed)
        return 0
    for line in config.warnings:
        print(f"accord serve: warning: {line}", flush=True)
    if config.system == "diffusion":
        from accord.engine.diffusion.server import serve
    else:
        from accord.engine.llm.server import serve
    return serve(config)
