"""`accord tune`: the fastest legal launch for a model, a machine and a workload.

    accord tune --facts h100 --model-path PATH --workload chat [--max-ttft-ms 500] [--top 5] [--json] [FLAGS...]

FLAGS are launch flags the user insists on: every candidate keeps them as typed. Exit codes: 0 a
ranking was printed; 2 bad usage; 3 no legal candidate (the command's own conflict, or nothing
that fits and meets the SLA). `--measure K` then serves the top K on Accord's own engine on this
machine and prints predicted beside measured (accord.resolver.exploring.measure).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from accord.resolver.api import ConflictError
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.commands import resolve as resolve_cmd
from accord.resolver.commands.options import add_fact_options
from accord.resolver.errors import AccordError, UsageError
from accord.resolver.exploring.costmodel import CostModel, Workload, load_costs
from accord.resolver.exploring.tune import tune
from accord.resolver.exploring.tune_candidates import SLA, TuneResult
from accord.resolver.facts.machine import load_facts
from accord.resolver.facts.model import model_note
from accord.resolver.facts.model_sources import find_model

MEASURABLE_GAP = 0.01   # closer predictions are within what the cost model can claim to tell apart


def add_options(parser: argparse.ArgumentParser) -> None:
    add_fact_options(parser)
    workloads = ", ".join(load_costs("llm")["workloads"])
    parser.add_argument("--workload", default="chat", metavar="NAME",
                        help=f"a named workload ({workloads}); the options below override its numbers")
    parser.add_argument("--input-len", type=_positive_int, metavar="N", help="prompt tokens per request")
    parser.add_argument("--output-len", type=_positive_int, metavar="N", help="generated tokens per request")
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=_positive_int, metavar="N",
                      help="users, each sending its next request when the last one ends")
    load.add_argument("--request-rate", type=_positive_float, metavar="R",
                      help="requests per second, Poisson arrivals (open loop)")
    load.add_argument("--burst", type=_positive_int, metavar="N",
                      help="N requests all sent at once; throughput averaged until the last one ends")
    parser.add_argument("--max-ttft-ms", type=_positive_float, metavar="X", help="SLA: time to first token")
    parser.add_argument("--max-tpot-ms", type=_positive_float, metavar="Y", help="SLA: time per output token")
    parser.add_argument("--top", type=_positive_int, default=5, metavar="N", help="candidates to show (default 5)")
    parser.add_argument("--json", action="store_true", help="print JSON for tools")
    parser.add_argument("--max-nodes", type=_positive_int, default=1, metavar="N",
                        help="also search launches over 2 .. N machines like this one (--nnodes; default 1)")
    parser.add_argument("--allow-quantization", action="store_true",
                        help="let the search quantize the weights (--quantization); off by default")
    parser.add_argument("--calibration", metavar="FILE",
                        help="read backend efficiency factors fitted by an earlier --calibrate")
    parser.add_argument("--measure", type=_positive_int, metavar="K",
                        help="serve the top K on Accord's own engine here and measure them")
    parser.add_argument("--measure-seconds", type=_positive_float, default=6.0, metavar="S",
                        help="load time per measured candidate (default 6)")
    parser.add_argument("--calibrate", metavar="FILE",
                        help="with --measure: fit the backend efficiency factors and write them to FILE")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(text)
    return value


def workload_of(opts: argparse.Namespace) -> Workload:
    named = load_costs("llm")["workloads"]
    if opts.workload not in named:
        raise UsageError(f"--workload {opts.workload!r} is not a named workload; use one of {', '.join(named)} "
                         "or give --input-len, --output-len and --concurrency.")
    base = named[opts.workload]
    open_or_burst = opts.request_rate is not None or opts.burst is not None
    return Workload(input_len=opts.input_len or base["input_len"], output_len=opts.output_len or base["output_len"],
                    concurrency=None if open_or_burst else (opts.concurrency or base["concurrency"]),
                    request_rate=opts.request_rate, burst=opts.burst)


def main(argv: list[str]) -> int:
    """Run `accord tune`; under `--json` every outcome is one JSON object on stdout, an error too
    (`{"error": message, "exit_code": N}`, the message also on stderr)."""
    if "--json" not in argv:
        return _tune(argv)
    try:
        return _tune(argv)
    except AccordError as err:
        print(f"accord tune: {err}", file=sys.stderr)
        print(json.dumps({"error": str(err), "exit_code": err.exit_code}, indent=2, sort_keys=True))
        return err.exit_code


def _tune(argv: list[str]) -> int:
    opts, parsed = parse_flags(argv, add_options=add_options, prog="accord tune")
    if parsed.system != "llm":
        raise UsageError("accord tune tunes LLM launches only (the diffusion system has no cost model yet).")
    if opts.calibrate and not opts.measure:
        raise UsageError("--calibrate fits the cost model to measurements; add --measure K (e.g. --measure 4).")
    model_path = parsed.user.get("model_path")
    if model_path is None:
        raise UsageError("accord tune needs --model-path (a local model folder, or a built-in name such as "
                         "tiny-llama): the cost model reads its sizes.")
    revision = parsed.user.get("revision")
    if find_model(model_path, parsed.system, revision).source is None:
        raise UsageError(f"tune needs the model's config.json to predict anything, and nothing holds it for "
                         f"--model-path {model_path}: {model_note(model_path, parsed.system, revision)}")
    measuring = opts.measure is not None
    if measuring and opts.max_nodes > 1:
        raise UsageError("--measure serves candidates on this machine, which cannot run a launch over several "
                         "nodes; drop --max-nodes, or --measure.")
    facts = load_facts(opts.facts, opts.fact, model_path=model_path, system=parsed.system, revision=revision)
    if measuring:  # candidates must be ones Accord's own engine runs
        from accord.resolver.commands.serve import ENGINE_FACTS
        facts = dict(sorted({**facts, **ENGINE_FACTS}.items()))
    workload = workload_of(opts)
    sla = SLA(opts.max_ttft_ms, opts.max_tpot_ms)
    costs = CostModel.for_system(parsed.system, opts.calibration)
    try:
        # Measuring ranks only candidates whose predicted throughputs differ by more than
        # MEASURABLE_GAP: closer ones would measure noise against each other.
        beam = {"verify": max(opts.top, 12, 10 * (opts.measure or 0)), "distinct": MEASURABLE_GAP if measuring else 0}
        result = tune(parsed.system, parsed.user, facts, workload, sla, opts.allow_quantization, costs, beam,
                      opts.max_nodes)
    except ConflictError as err:
        return resolve_cmd.print_conflict(err, opts.json, parsed=parsed)
    report = None
    if measuring:
        from accord.resolver.exploring.measure import measure_candidates
        facts_args = ["--facts", opts.facts] + [word for item in opts.fact for word in ("--fact", item)]
        report = measure_candidates(result, opts.measure, opts.measure_seconds, opts.calibrate, costs,
                                    facts_args, log=sys.stderr)
    if opts.json:
        data = result.to_dict(opts.top)
        if report is not None:
            data["measured"] = report
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(render(result, opts.top))
        if report is not None:
            from accord.resolver.exploring.measure import render_report
            print(render_report(report))
    return 0


def _warning_id(warning: str) -> str:
    """The rule id a resolve warning starts with (`[kv.fp8.scales] ...`), or the warning itself."""
    return warning[1:warning.index("]")] if warning.startswith("[") and "]" in warning else warning


def render(result: TuneResult, top: int) -> str:
    """The ranking as a text table, the baseline under it, then what the search judged."""
    w = result.workload
    lines = [f"# accord tune: {result.device}, {w.describe()}; "
             + (f"SLA ttft<={result.sla.max_ttft_ms} ms tpot<={result.sla.max_tpot_ms} ms" if result.sla
                else "Pareto frontier of tok/s per GPU vs tok/s per user")]
    many = result.max_nodes > 1   # the node count is a column only when the search varied it
    head = (f"{'#':>4} {'tok/s':>9} {'/GPU':>8} {'/user':>7} {'TTFT ms':>9} {'TPOT ms':>8} {'GPUs':>4}"
            + (f" {'nodes':>5}" if many else "") + f" {'fits':>6}  flags")
    lines.append(head)
    rows = [(f"{i}{'*' if c.predicted.get('pareto') else ''}", c) for i, c in enumerate(result.candidates[:top], 1)]
    rows.append(("base", result.baseline))
    # Under each row, the rules `accord resolve` warns with about that launch; each warning's text is
    # said once below the table, and one every row shares (a rule left unchecked for the model) too.
    common = set.intersection(*(set(c.warnings) for _, c in rows))
    said = sorted({w for _, c in rows for w in c.warnings if w not in common})
    for label, c in rows:
        p = c.predicted
        if not p:
            lines.append(f"{label:>4} (no KV room for one request)  {shlex.join(c.argv)}")
            continue
        ttft = "saturated" if p["ttft_ms"] is None else f"{p['ttft_ms']:.0f}"
        own = c.argv[len(result.user_argv):]
        lines.append(f"{label:>4} {p['throughput_tok_s']:>9.0f} {p['throughput_per_gpu']:>8.0f} "
                     f"{p['tok_s_per_user']:>7.1f} {ttft:>9} {p['tpot_ms']:>8.2f} {p['gpus']:>4} "
                     + (f"{c.nodes:>5} " if many else "")
                     + f"{p['concurrency_fits']:>6}  {shlex.join(own) or '(the command as typed)'}")
        own_warnings = [_warning_id(w) for w in c.warnings if w not in common]
        if own_warnings:
            lines.append(f"{'':>6}warns: {', '.join(own_warnings)}")
    lines.append(f"base = what `accord {result.baseline_source}` picks for this command"
                 + ("" if result.sla else "; * = on the Pareto frontier"))
    pruned = ", ".join(f"{k} {v}" for k, v in sorted(result.pruned.items(), key=lambda kv: (-kv[1], kv[0])))
    lines.append(f"judged {result.judged} combinations, {result.excluded} excluded by rule family: {pruned or 'none'}; "
                 f"predicted {result.legal} legal candidates ({result.no_fit} without KV room"
                 + (f", {result.missed_sla} missing the SLA" if result.sla else "") + ")")
    lines += [f"warning: {warning}" for warning in said]
    lines += [f"warning (every row): {warning}" for warning in sorted(common)]
    if result.fewer_than(top):
        lines.append(f"shown {result.fewer_than(top)}")
    if result.versus:
        lines.append(f"why #1: {result.versus}")
    if result.candidates:
        lines += launch_lines(result.candidates[0])
    return "\n".join(lines)


def launch_lines(winner) -> list[str]:
    """The winner's launch command; over several nodes, each node's (and what to fill in)."""
    if not winner.node_argv:
        return [f"#1 launch: {shlex.join(winner.argv)}"]
    lines = [f"#1 launch, node {rank} of {len(winner.node_argv)}: {shlex.join(argv)}"
             for rank, argv in enumerate(winner.node_argv)]
    return lines + ([f"fill in: {winner.fill_in}"] if winner.fill_in else [])
