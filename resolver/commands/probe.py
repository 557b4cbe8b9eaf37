"""`accord probe`: print the facts a configuration would be resolved against.

With no options it shows this machine (and the built-in model), which is what `accord resolve`
uses by default; `--facts h100` shows a preset, and `--fact` / `--model-path` show the effect of
overrides before they are used in a resolve. The output is sorted, so it diffs cleanly.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Mapping

from resolver.catalog import SYSTEMS
from resolver.errors import UsageError
from resolver.facts import list_presets, load_facts


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad options as a UsageError (one paragraph, exit 2) like every
    other Accord error, instead of printing usage and exiting on its own."""

    def error(self, message: str):
        usage = " ".join(self.format_usage().split()).removeprefix("usage: ")
        raise UsageError(f"{message}. Usage: {usage}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="accord probe", description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--facts", default="probe", metavar="PRESET|FILE|probe",
                        help=f"where machine facts come from: a preset ({', '.join(list_presets())}), "
                             "a YAML/JSON facts file, or probe (this machine, the default)")
    parser.add_argument("--fact", action="append", default=[], metavar="KEY=VALUE",
                        help="set one fact, e.g. --fact gpu.sm=100 or --fact cuda=none (repeatable)")
    parser.add_argument("--model-path", metavar="DIR",
                        help="local model folder to read model.* facts from (default: the built-in model)")
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
    print(json.dumps(facts, indent=2, sort_keys=True) if args.json else format_facts(facts))
    return 0
