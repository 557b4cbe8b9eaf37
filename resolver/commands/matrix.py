"""`accord matrix`: the command line over resolver.matrix (options, `--fix` launch flags, output)."""

from __future__ import annotations

import argparse
import shlex
import sys

from resolver.api import plan_for, resolve
from resolver.catalog import SYSTEMS
from resolver.commands.options import CommandParser
from resolver.errors import UsageError
from resolver.matrix import (GITHUB_MAX_JOBS, STRATEGIES, EmptyMatrix, describe_illegal, generate,
                             parse_axes, render, summary)


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="accord matrix",
                           description="Generate a CI matrix of legal configurations.",
                           epilog="Launch flags after --fix are fixed in every row, e.g. --fix --tp 8 --enable-dp-attention.")
    parser.add_argument("--system", choices=SYSTEMS, default="llm")
    parser.add_argument("--facts", required=True, metavar="PRESET,...",
                        help="comma-separated presets or facts files, one matrix column: h100,b200,...")
    parser.add_argument("--axes", required=True, metavar="FLAG,...", help="comma-separated flags to vary")
    parser.add_argument("--values", action="append", default=[], metavar="FLAG=v1,v2",
                        help="the values of one axis (repeatable); needed for flags without a finite domain")
    parser.add_argument("--strategy", choices=list(STRATEGIES), default="pairwise")
    parser.add_argument("--max-rows", type=_positive, metavar="N")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", choices=("github", "json", "yaml", "csv"), default="json")
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _split_fix(argv: list[str]) -> tuple[list[str], list[str]]:
    """The matrix's own options, and the launch flags after `--fix` (one quoted string also works)."""
    if "--fix" not in argv:
        return argv, []
    at = argv.index("--fix")
    fixed = argv[at + 1:]
    if len(fixed) == 1 and " " in fixed[0].strip():
        fixed = shlex.split(fixed[0])
    return argv[:at], fixed


def main(argv: list[str]) -> int:
    from resolver.facts import load_facts
    from resolver.flagparse import parse_flags

    own, fix_words = _split_fix(list(argv))
    opts = _parser().parse_args(own)
    _, fixed = parse_flags(fix_words, system=opts.system, prog="accord matrix --fix")
    presets = {p: load_facts(p, system=opts.system) for p in dict.fromkeys(opts.facts.split(",")) if p}
    if not presets:
        raise UsageError("--facts needs at least one preset or facts file, e.g. --facts h100,b200.")
    axes = parse_axes(opts.system, opts.axes, opts.values)
    plan = plan_for(opts.system)
    if not any(plan.satisfiable(fixed.values, facts) for facts in presets.values()):
        resolve(opts.system, fixed.values, next(iter(presets.values())))  # raises: the --fix flags conflict
    matrix = generate(opts.system, presets, axes, fixed.values, opts.strategy, opts.max_rows, opts.seed)
    if not matrix.rows:
        raise EmptyMatrix(matrix)
    print(render(matrix, opts.format))
    note = summary(matrix)
    if opts.format == "github" and len(matrix.rows) > GITHUB_MAX_JOBS:
        note += f"; split into {-(-len(matrix.rows) // GITHUB_MAX_JOBS)} shards of <= {GITHUB_MAX_JOBS} jobs"
    print(note, file=sys.stderr)
    if opts.format in ("csv", "github"):  # json and yaml carry the list themselves
        for item in matrix.illegal:
            print(f"  excluded {describe_illegal(item)}", file=sys.stderr)
    return 0
