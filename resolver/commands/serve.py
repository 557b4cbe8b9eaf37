"""`accord serve`: resolve first, then start the engine the configuration describes.

A conflict is explained and nothing starts (exit 3). The engine (torch, zmq) is imported only
after a successful resolve, so a bad command fails fast.
"""

from __future__ import annotations

from resolver.api import ConflictError, resolve
from resolver.commands.resolve import print_conflict, resolve_command


def main(argv: list[str]) -> int:
    opts, parsed, facts = resolve_command(argv, "accord serve")
    try:
        config = resolve(parsed.system, parsed.values, facts, parsed.sources, relax=opts.relax,
                         warnings=parsed.warnings)
    except ConflictError as err:
        return print_conflict(err, opts.json)
    for line in config.warnings:
        print(f"accord serve: warning: {line}", flush=True)
    if config.system == "diffusion":
        from engine.diffusion.server import serve
    else:
        from engine.llm.server import serve
    return serve(config)
