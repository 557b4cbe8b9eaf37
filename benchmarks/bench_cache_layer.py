"""What the solver's cache layer saves: each question timed with the layer on and switched off.

The reference algorithm (resolver/solving/core.py) computes every answer from the rules, the set
flags and the facts; resolver/solving/cache.py keeps those answers between questions. This prints,
for the questions Accord asks most, the median wall and CPU time with the layer on (warmed by one
run first, as in a session that asked before) and off (`cache.uncached()`: the same code, every
answer computed afresh and nothing kept between questions):

- hot resolve of a typical llm launch (benchmarks/bench_resolve.py's TYPICAL, h100);
- a conflict with its minimal explanation and verified fixes (bench_resolve.py's CONFLICT, b200);
- the dry run of every backend-like flag (`accord resolve --dry-run`'s legal values) of TYPICAL;
- an `accord tune` search (Llama-3.1-8B, 128 users, h100; benchmarks/bench_tune.py's last case).

With the layer on, the per-launch values (`Plan.shared`) are dropped before each run, as in
bench_resolve.py, so repeating one launch is not answered from memory; what is kept per set of set
flags stays.

Then what the process stores save (`config_json_pieces`, `config_key_orders`: the JSON pieces the
config hash of resolver/frozen.py is written from): the hash of TYPICAL's resolved config from kept
pieces and with the layer off (the same code writes every piece afresh), next to the hot resolve
that computes one hash.

    python benchmarks/bench_cache_layer.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_resolve import CONFLICT, TYPICAL, conflict, forget_values, hot, measure  # noqa: E402

from accord.resolver import frozen  # noqa: E402
from accord.resolver.api import resolve  # noqa: E402
from accord.resolver.commandline.flagparse import parse_flags  # noqa: E402
from accord.resolver.exploring.dryrun import dry_run  # noqa: E402
from accord.resolver.facts.machine import load_facts  # noqa: E402
from accord.resolver.solving import cache  # noqa: E402

MODELS = Path(__file__).resolve().parent.parent / "tests" / "differential" / "fixtures" / "models"


def _dry_run() -> None:
    _, parsed = parse_flags(TYPICAL)
    facts = load_facts("h100", model_path=parsed.user.get("model_path"), system=parsed.system)
    dry_run(parsed.system, parsed.user, facts)


def _tune():
    from accord.resolver.exploring.costmodel import Workload
    from accord.resolver.exploring.tune import tune
    path = str(MODELS / "meta-llama/Llama-3.1-8B-Instruct")
    facts = load_facts("h100", [], model_path=path, system="llm")
    return lambda: tune("llm", {"model_path": path}, facts, Workload(1024, 256, concurrency=128))


def _hash_figures(runs: int) -> None:
    """The config hash from the process stores' pieces, and with the layer off (every piece written afresh)."""
    _, parsed = parse_flags(TYPICAL)
    facts = load_facts("h100", model_path=parsed.user.get("model_path"), system=parsed.system)
    config = resolve(parsed.system, parsed.user, facts, parsed.sources)
    args = (config.system, frozen.thaw(config.facts), frozen.thaw(config.values))

    with cache.cached():
        kept = measure(lambda: frozen.config_hash(*args), runs)
        hot_ms = measure(lambda: hot(TYPICAL, "h100"), runs, forget_values)
    with cache.uncached():
        assert frozen.config_hash(*args) == config.hash
        off = measure(lambda: frozen.config_hash(*args), runs)
    print(f"config hash of TYPICAL ({len(args[2])} values, median us): pieces kept {kept[0] * 1e3:6.1f}, "
          f"layer off (written afresh) {off[0] * 1e3:6.1f}: the stores save "
          f"{(off[0] - kept[0]) / hot_ms[0] * 100:4.1f}% of a hot resolve ({hot_ms[0]:.2f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per figure (the median is printed)")
    parser.add_argument("--hash-only", action="store_true", help="print only the process stores' figure")
    args = parser.parse_args()
    if args.hash_only:
        _hash_figures(args.runs * 100)
        return
    questions = [
        ("hot resolve (typical llm launch, h100)", lambda: hot(TYPICAL, "h100"), args.runs * 10),
        ("conflict + explanation + fixes (b200)", lambda: conflict(CONFLICT, "b200"), args.runs),
        ("dry run of every backend-like flag", _dry_run, args.runs),
        ("tune search (Llama-3.1-8B, 128 users)", _tune(), max(1, args.runs // 3)),
    ]
    print(f"{'question':42s} {'layer on':>20s} {'layer off':>20s}  off/on   (median wall ms, cpu ms)")
    for label, fn, runs in questions:
        with cache.cached():
            fn()  # warm: what a session that asked before keeps
            on = measure(fn, runs, forget_values)
        with cache.uncached():
            fn()
            off = measure(fn, runs)
        print(f"{label:42s} {on[0]:9.1f} ({on[1]:7.1f}) {off[0]:9.1f} ({off[1]:7.1f})  {off[0] / on[0]:5.1f}x")
    _hash_figures(args.runs * 100)
    print(f"machine load average during the run: {os.getloadavg()[0]:.2f} (wall figures are noisy above "
          f"{os.cpu_count()}, the core count)")


if __name__ == "__main__":
    main()
