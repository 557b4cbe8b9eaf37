"""How fast the dry run and the CI matrix answer, next to baselines measured in the same run.

Targets (issue 5):
- a full `resolve --dry-run` hot (rules compiled, process warm) <= 100 ms on the real llm rules;
- a pairwise matrix over 4 axes x 6 presets <= 5 s, with at most 1.2x the rows of an
  unconstrained greedy pairwise baseline and zero illegal rows (each row is resolved again here);
- compared with brute-force enumeration of the same axes (one solve per combination).

Wall time is printed with the process CPU time beside it: on a shared machine the CPU figure is the
one that says what the code costs. Nothing here asserts; it prints figures.

    python benchmarks/bench_dryrun_matrix.py
"""

from __future__ import annotations

import itertools
import os
import statistics
import time

from resolver.api import plan_for, resolve
from resolver.dryrun import dry_run, values_of
from resolver.facts import load_facts
from resolver.matrix import FACTS_AXIS, Axis, Space, covering_rows, generate, parse_axes

DRY_RUN = ("llm", "h100", {"tp_size": 8})
DIFFUSION_DRY_RUN = ("diffusion", "h100", {})
PRESETS = ("h100", "h200", "b200", "a100", "l4", "mi300x")
AXES = "attention_backend,kv_cache_dtype,sampling_backend,grammar_backend"


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3


def median_ms(fn, runs: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(runs):
        _, wall, cpu = timed(fn)
        walls.append(wall)
        cpus.append(cpu)
    return statistics.median(walls), statistics.median(cpus)


def bench_dry_run() -> None:
    print("== dry run (hot: rules compiled, process warm)")
    for system, preset, user in (DRY_RUN, DIFFUSION_DRY_RUN):
        facts = load_facts(preset, system=system)
        plan = plan_for(system)
        _, choices = dry_run(system, user, facts)
        values = sum(len(c.legal) + len(c.excluded) for c in choices)
        wall, cpu = median_ms(lambda: dry_run(system, user, facts), 15)
        resolve_wall, resolve_cpu = median_ms(lambda: resolve(system, user, facts), 30)
        print(f"{system} on {preset} {user or ''}: {len(choices)} flags, {values} values judged")
        print(f"  dry run           {wall:8.1f} ms wall {cpu:8.1f} ms cpu   (target <= 100 ms)")
        print(f"  one resolve       {resolve_wall:8.1f} ms wall {resolve_cpu:8.1f} ms cpu   "
              f"(dry run = {cpu / resolve_cpu:.1f} resolves)")

        def naive():  # the definition, literally: one full solve per value
            for choice in choices:
                for value in values_of(plan, choice.flag):
                    plan.satisfiable({**user, choice.flag: value}, facts)
        _, naive_wall, naive_cpu = timed(naive)
        print(f"  one solve/value   {naive_wall:8.1f} ms wall {naive_cpu:8.1f} ms cpu   "
              f"(the dry run is {naive_cpu / cpu:.0f}x faster)")


def bench_matrix() -> None:
    print(f"\n== pairwise matrix: {len(PRESETS)} presets x axes {AXES}")
    presets = {p: load_facts(p, system="llm") for p in PRESETS}
    axes = parse_axes("llm", AXES, [])
    plan = plan_for("llm")
    full_axes = [Axis(FACTS_AXIS, tuple(presets))] + axes
    combos = len(presets) * len(list(itertools.product(*(a.values for a in axes))))
    print(f"  {' x '.join(str(len(a.values)) for a in full_axes)} = {combos} combinations")
    resolve("llm", {}, presets["h100"])  # compile the plan outside the timings

    matrix, wall, cpu = timed(lambda: generate("llm", presets, axes, {}, "pairwise", seed=0))
    cov = matrix.coverage()
    print(f"  pairwise          {wall:8.0f} ms wall {cpu:8.0f} ms cpu   (target <= 5000 ms): {len(matrix.rows)} rows, "
          f"coverage {cov['covered']}/{cov['legal']} legal pairs, {len(matrix.illegal)} minimal illegal combinations")

    (base_rows, _, _), base_wall, _ = timed(lambda: covering_rows(
        Space("llm", presets, full_axes, {}), 2, 0, None, respect_rules=False))
    print(f"  unconstrained     {base_wall:8.0f} ms wall: {len(base_rows)} rows covering every pair, legal or not; "
          f"ratio {len(matrix.rows) / len(base_rows):.2f} (target <= 1.2)")

    def illegal_rows():
        bad = 0
        for row in matrix.rows:
            user = {k: v for k, v in row.items() if k not in (FACTS_AXIS, "args", "hash")}
            config = resolve("llm", user, presets[row[FACTS_AXIS]])
            bad += config.hash[:16] != row["hash"] or any(config.values[k] != v for k, v in user.items())
        return bad
    bad, verify_wall, _ = timed(illegal_rows)
    print(f"  re-resolved rows  {verify_wall:8.0f} ms wall: {bad} illegal or different rows (target 0)")

    def brute():
        names = [a.name for a in full_axes]
        rows = []
        for values in itertools.product(*(a.values for a in full_axes)):
            row = dict(zip(names, values))
            if plan.satisfiable({k: v for k, v in row.items() if k != FACTS_AXIS}, presets[row[FACTS_AXIS]]):
                rows.append(row)
        return rows
    legal_rows, brute_wall, brute_cpu = timed(brute)
    print(f"  brute force       {brute_wall:8.0f} ms wall {brute_cpu:8.0f} ms cpu: one solve per combination, "
          f"{len(legal_rows)} legal rows (pairwise keeps {100 * len(matrix.rows) / len(legal_rows):.1f}% of them)")
    everything, all_wall, all_cpu = timed(lambda: generate("llm", presets, axes, {}, "all"))
    same = [{k: r[k] for k in (a.name for a in full_axes)} for r in everything.rows] == legal_rows
    print(f"  --strategy all    {all_wall:8.0f} ms wall {all_cpu:8.0f} ms cpu: {len(everything.rows)} rows, "
          f"each resolved; {'the same rows as brute force' if same else 'DIFFERS from brute force'}")

    names = [a.name for a in full_axes]
    pairs = {((a, r[a]), (b, r[b])) for r in legal_rows for a, b in itertools.combinations(names, 2)}
    covered = {((a, r[a]), (b, r[b])) for r in matrix.rows for a, b in itertools.combinations(names, 2)}
    print(f"  pairs in legal rows (brute force): {len(pairs)}; missing from the pairwise matrix: "
          f"{len(pairs - covered)}; matrix pairs not in any legal row: {len(covered - pairs)}")


def main() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} cpus, load average {load:.1f}")
    bench_dry_run()
    bench_matrix()


if __name__ == "__main__":
    main()
