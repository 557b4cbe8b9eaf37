"""`accord matrix`: the command line over accord.resolver.exploring.matrix (options, models, `--fix` launch flags, output).

The model a row is judged with comes from `--model-path`, before `--fix` (one or several: several
make a `model` axis) or after it among the launch flags (one model, fixed in every row). Its facts
are read the way `accord resolve` reads them, once per preset, so every row's legality is the
resolver's for that model.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from accord.resolver.api import plan_for, resolve
from accord.resolver.commands.options import CommandParser
from accord.resolver.errors import UsageError
from accord.resolver.exploring.matrix import STRATEGIES, generate
from accord.resolver.exploring.matrix_axes import MODEL_FLAG, parse_axes
from accord.resolver.exploring.matrix_output import (
    GITHUB_MAX_JOBS,
    EmptyMatrix,
    describe_illegal,
    render,
    summary,
    workflow,
    write_text_atomically,
)
from accord.resolver.language.catalog import SYSTEMS


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="accord matrix",
                           description="Generate a CI matrix of legal configurations.",
                           epilog="Launch flags after --fix are fixed in every row, e.g. --fix --tp 8 --enable-dp-attention.")
    parser.add_argument("--system", choices=SYSTEMS, default="llm")
    parser.add_argument("--facts", required=True, metavar="PRESET,...",
                        help="comma-separated presets or facts files, one matrix column: h100,b200,...")
    parser.add_argument("--model-path", action="append", default=[], metavar="PATH,...",
                        help="model folder(s) whose facts decide legality; several (comma-separated or "
                             "repeated) make a `model` axis")
    parser.add_argument("--axes", required=True, metavar="FLAG,...", help="comma-separated flags to vary")
    parser.add_argument("--values", action="append", default=[], metavar="FLAG=v1,v2",
                        help="the values of one axis (repeatable); needed for flags without a finite domain")
    parser.add_argument("--strategy", choices=list(STRATEGIES), default="pairwise")
    parser.add_argument("--max-rows", type=_positive, metavar="N")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--include-known-bad", action="store_true",
                        help="keep rows that a known_bad rule marks as publicly reported to hang, crash "
                             "or produce garbage at run time (excluded by default)")
    parser.add_argument("--format", choices=("github", "json", "yaml", "csv"), default="json")
    parser.add_argument("--emit-workflow", metavar="FILE",
                        help="write a GitHub Actions workflow running --run once per row (instead of printing)")
    parser.add_argument("--run", metavar="COMMAND",
                        help="with --emit-workflow: the shell command each job runs; it sees ACCORD_FACTS, "
                             "ACCORD_MODEL, ACCORD_ARGS (the row's launch flags) and ACCORD_HASH")
    parser.add_argument("--runs-on", default="ubuntu-latest", metavar="LABEL",
                        help="with --emit-workflow: the runner label of every job (default ubuntu-latest)")
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


def _models(option: list[str], fixed: dict) -> list[str]:
    """The models named before `--fix` (comma-separated or repeated), or the one after it."""
    models = list(dict.fromkeys(m.strip() for item in option for m in item.split(",") if m.strip()))
    if option and not models:
        raise UsageError("--model-path is empty; give one or more model folders, e.g. --model-path A,B.")
    if models and MODEL_FLAG in fixed:
        raise UsageError(f"--model-path is given both before --fix ({', '.join(models)}) and after it "
                         f"({fixed[MODEL_FLAG]}); name the models once: before --fix to compare several, "
                         "or after it for one model in every row.")
    return models or ([fixed[MODEL_FLAG]] if fixed.get(MODEL_FLAG) is not None else [])


def main(argv: list[str]) -> int:
    from accord.resolver.commandline.flagparse import parse_flags
    from accord.resolver.facts.machine import load_facts
    from accord.resolver.facts.model import model_note

    own, fix_words = _split_fix(list(argv))
    opts = _parser().parse_args(own)
    if opts.run is not None and opts.emit_workflow is None:
        raise UsageError("--run is the command of the workflow --emit-workflow writes; add --emit-workflow FILE.")
    if opts.emit_workflow is not None and not (opts.run or "").strip():
        raise UsageError("--emit-workflow needs the command each job runs: --run 'COMMAND' (it sees "
                         "$ACCORD_ARGS, the row's launch flags).")
    _, parsed = parse_flags(fix_words, system=opts.system, prog="accord matrix --fix")
    fixed = dict(parsed.user)
    names = [p for p in dict.fromkeys(opts.facts.split(",")) if p]
    if not names:
        raise UsageError("--facts needs at least one preset or facts file, e.g. --facts h100,b200.")
    models = _models(opts.model_path, fixed)
    for model in models:
        note = model_note(model, opts.system)
        if note:
            print(f"warning: {note}", file=sys.stderr)
    if len(models) == 1:  # one model: a fixed flag whose facts every preset carries
        fixed[MODEL_FLAG] = models[0]
    single = models[0] if len(models) == 1 else None
    presets = {p: load_facts(p, model_path=single, system=opts.system) for p in names}
    per_model = ({m: {p: load_facts(p, model_path=m, system=opts.system) for p in names} for m in models}
                 if len(models) > 1 else None)
    contexts = ([(fixed, facts) for facts in presets.values()] if per_model is None else
                [({**fixed, MODEL_FLAG: m}, facts) for m, by_preset in per_model.items() for facts in by_preset.values()])
    axes = parse_axes(opts.system, opts.axes, opts.values, facts=[facts for _, facts in contexts])
    strict = not opts.include_known_bad
    plan = plan_for(opts.system, strict=strict)
    if not any(plan.satisfiable(user, facts) for user, facts in contexts):
        resolve(opts.system, *contexts[0], strict=strict)  # raises: the --fix flags conflict everywhere
    matrix = generate(opts.system, presets, axes, fixed, opts.strategy, opts.max_rows, opts.seed,
                      models=per_model, include_known_bad=opts.include_known_bad)
    if not matrix.rows:
        raise EmptyMatrix(matrix)
    note = summary(matrix)
    if opts.emit_workflow is not None:
        text, jobs = workflow(matrix, opts.run, opts.runs_on, ["accord", "matrix", *argv])
        write_text_atomically(opts.emit_workflow, text)
        note += f"; wrote {opts.emit_workflow} ({jobs} matrix job{'s' if jobs > 1 else ''} of <= {GITHUB_MAX_JOBS} rows)"
    else:
        print(render(matrix, opts.format))
        if opts.format == "github" and len(matrix.rows) > GITHUB_MAX_JOBS:
            note += f"; split into {-(-len(matrix.rows) // GITHUB_MAX_JOBS)} shards of <= {GITHUB_MAX_JOBS} jobs"
    print(note, file=sys.stderr)
    if opts.emit_workflow is not None or opts.format in ("csv", "github"):  # json and yaml carry the list
        for item in matrix.illegal:
            print(f"  excluded {describe_illegal(item)}", file=sys.stderr)
    return 0
