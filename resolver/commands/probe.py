"""`accord probe`: print the facts a configuration would be resolved against.

With no options it shows this machine's facts, and no model's: the built-in placeholder model a
resolve without --model-path falls back on is not a fact of this machine. `--facts h100` shows a
preset, `--model-path` (a folder, or a hub id from the Hugging Face cache, the hub or a built-in
card) adds that model's facts, and `--fact` shows the effect of overrides before they are used in
a resolve. The output is sorted, so it diffs cleanly.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Mapping

from accord.resolver.commands.options import CommandParser, add_fact_options
from accord.resolver.facts.machine import load_facts
from accord.resolver.language.catalog import SYSTEMS


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="accord probe", description=__doc__.splitlines()[0])
    add_fact_options(parser)
    parser.add_argument("--model-path", metavar="DIR",
                        help="the model to read model.* facts of: a local folder or a hub id (default: none)")
    parser.add_argument("--system", choices=SYSTEMS, default="llm",
                        help="llm reads config.json, diffusion reads model_index.json")
    parser.add_argument("--json", action="store_true", help="print a JSON object for tools")
    return parser


def format_facts(facts: Mapping[str, Any]) -> str:
    """One `key  value` line per fact; strings bare, everything else as JSON (null, true, [...])."""
    width = max((len(k) for k in facts), default=0)
    lines = [f"{key:<{width}}  {value if isinstance(value, str) else json.dumps(value)}"
             for key, value in facts.items()]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    facts = load_facts(args.facts, args.fact, model_path=args.model_path, system=args.system)
    if args.model_path is None:  # the placeholder's facts; a typed --fact model.KEY=VALUE stays
        typed = {item.split("=", 1)[0].strip() for item in args.fact}
        facts = {k: v for k, v in facts.items() if not k.startswith("model.") or k in typed}
    print(json.dumps(facts, indent=2, sort_keys=True) if args.json else format_facts(facts))
    return 0
