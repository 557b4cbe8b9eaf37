"""How fast Accord answers: hot in-process resolve, a conflict with its explanation, a cold CLI run.

Targets (issue 11): hot resolve of a typical llm launch <= 3 ms median; a conflict with its minimal
explanation and fixes <= 20 ms; a cold `accord resolve --json` process <= 4x `python -c pass`. Each figure
is printed next to a baseline measured in the same run (argparse alone, the hot resolve, and
`python -c pass`), so the ratios mean the same thing on any machine.

Hot figures compute every answer: the per-launch values the solver keeps between calls (see
`Plan.shared`) are dropped before each run, so repeating one launch is not answered from memory.
What the plan keeps per set of set flags, whatever their values (the decision structure, and the
rules and derived values that are constant given which flags are set, and the rules that hold
whatever the values given also which facts exist), stays, as it does for every later launch of a
session that sets the same flags on the same kind of machine; so do the JSON pieces of the config
hash (one per flag and value already written, mostly catalog defaults: see resolver/frozen.py).
Cold processes run as an installed `accord` does (`python -m accord.resolver.cli`: the program itself,
so without the cyclic garbage collector, see resolver/cli.py): with Python's bytecode cache (written
to a temporary PYTHONPYCACHEPREFIX, never into the checkout, even when PYTHONDONTWRITEBYTECODE is
set) and with the plan cache in a temporary ACCORD_CACHE_DIR, warmed by one run; the same command
with the plan cache switched off is printed for comparison.

    python benchmarks/bench_resolve.py
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from accord.resolver.api import ConflictError, plan_for, resolve
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.facts.machine import load_facts

TYPICAL = ["--tp", "8", "--kv-cache-dtype", "fp8_e4m3", "--mem-fraction-static", "0.85",
           "--chunked-prefill-size", "8192", "--schedule-policy", "lpm"]
CONFLICT = ["--tp", "16", "--attention-backend", "fa3", "--kv-cache-dtype", "fp4_e2m1"]


def _cpu() -> float:
    """CPU seconds of this process and of its finished children: what the work costs even when
    other processes share the cores (wall time then includes waiting for one)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def median_ms(fn, runs: int, before=lambda: None) -> float:
    return measure(fn, runs, before)[0]


def measure(fn, runs: int, before=lambda: None) -> tuple[float, float]:
    """(median wall ms, median CPU ms) of `runs` calls."""
    wall, cpu = [], []
    for _ in range(runs):
        before()
        start, start_cpu = time.perf_counter(), _cpu()
        fn()
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((_cpu() - start_cpu) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def forget_values() -> None:
    """Drop the llm plan's per-launch values (store `shared`): time the work, not the memory."""
    plan_for("llm").cache.forget("shared")


def hot(argv: list[str], preset: str) -> None:
    _, parsed = parse_flags(argv)
    facts = load_facts(preset, model_path=parsed.user.get("model_path"), system=parsed.system)
    resolve(parsed.system, parsed.user, facts, parsed.sources)


def conflict(argv: list[str], preset: str) -> None:
    try:
        hot(argv, preset)
    except ConflictError:
        return
    raise SystemExit(f"expected a conflict for {argv} on {preset}")


def cold(cmd: list[str], env: dict[str, str], runs: int = 9) -> tuple[float, float]:
    run = lambda: subprocess.run(cmd, check=True, capture_output=True, env=env)  # noqa: E731
    run()  # fills the bytecode and plan caches, as the first run after installing does
    return measure(run, runs)


def main() -> None:
    hot(TYPICAL, "h100")  # warm caches: catalog, rules, parser
    parse_only, _ = measure(lambda: parse_flags(TYPICAL), 200)
    hot_ms, hot_cpu = measure(lambda: hot(TYPICAL, "h100"), 200, forget_values)
    conflict_ms, conflict_cpu = measure(lambda: conflict(CONFLICT, "b200"), 30, forget_values)
    with tempfile.TemporaryDirectory(prefix="accord-bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPYCACHEPREFIX=os.path.join(tmp, "pyc"), ACCORD_CACHE_DIR=os.path.join(tmp, "accord"))
        command = [sys.executable, "-m", "accord.resolver.cli", "resolve", "--facts", "h100", "--json", *TYPICAL]
        python_ms, python_cpu = cold([sys.executable, "-c", "pass"], env)
        cli_ms, cli_cpu = cold(command, env)
        uncached_ms, uncached_cpu = cold(command, {**env, "ACCORD_CACHE_DIR": ""})
    print("wall-clock medians (the targets), then CPU-time medians (what the work costs when the "
          "machine is shared):")
    print(f"hot resolve (typical llm launch, h100):  {hot_ms:7.2f} ms median  "
          f"({hot_ms / parse_only:5.1f}x argparse alone at {parse_only:.2f} ms; target (issue 11) <= 3 ms)"
          f"   cpu {hot_cpu:.2f} ms")
    print(f"conflict + minimal explanation + fixes:  {conflict_ms:7.2f} ms median  "
          f"({conflict_ms / hot_ms:5.1f}x hot resolve; target (issue 11) <= 20 ms)   cpu {conflict_cpu:.2f} ms")
    print(f"cold `accord resolve --json` process:    {cli_ms:7.1f} ms median  "
          f"({cli_ms / python_ms:5.1f}x `python -c pass` at {python_ms:.1f} ms; target (issue 11) <= 4x)"
          f"   cpu {cli_cpu:.1f} ms = {cli_cpu / python_cpu:.1f}x {python_cpu:.1f} ms")
    print(f"  the same with the plan cache off:      {uncached_ms:7.1f} ms median  "
          f"({uncached_ms / python_ms:5.1f}x `python -c pass`)   cpu {uncached_cpu:.1f} ms = "
          f"{uncached_cpu / python_cpu:.1f}x")
    print(f"machine load average during the run:     {os.getloadavg()[0]:7.2f}  (wall figures are noisy above "
          f"{os.cpu_count()}, the core count)")


if __name__ == "__main__":
    main()
