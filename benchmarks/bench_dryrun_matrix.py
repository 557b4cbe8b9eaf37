"""How fast the dry run and the CI matrix answer, next to baselines measured in the same run.

Targets (issue 5):
- a full `resolve --dry-run` hot (rules compiled, process warm) <= 100 ms on the real llm rules;
- a pairwise matrix over 4 axes x 6 presets <= 5 s, with at most 1.2x the rows of an
  unconstrained greedy pairwise baseline and zero illegal rows (each row is resolved again here);
- compared with brute-force enumeration of the same axes (one solve per combination);
- (issue 17) a pairwise matrix over 6 presets x 3 models x 4 axes <= 3 s on one core, with at most
  1.2x the rows of a greedy covering array built in the same run from every legal row (the
  textbook greedy: repeatedly take the legal row covering the most uncovered legal pairs), and
  zero illegal rows when each row is resolved again with its own model's facts.

Wall time is printed with the process CPU time beside it: on a shared machine the CPU figure is the
one that says what the code costs. Nothing here asserts; it prints figures.

    python benchmarks/bench_dryrun_matrix.py
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from accord.resolver.api import plan_for, resolve
from accord.resolver.exploring.dryrun import dry_run, values_of
from accord.resolver.exploring.matrix import generate
from accord.resolver.exploring.matrix_axes import FACTS_AXIS, MODEL_AXIS, Axis, parse_axes
from accord.resolver.exploring.matrix_rows import covering_rows
from accord.resolver.exploring.matrix_space import Space
from accord.resolver.facts.machine import load_facts

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
            user = {k: v for k, v in row.items() if k not in (FACTS_AXIS, "argv", "args", "hash")}
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


# Abridged config.json files of three real models (the fields the model facts read): MLA + MoE,
# a dense 64-head model, a GQA MoE model.
MODELS = {
    "DeepSeek-V3": {
        "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_attention_heads": 128,
        "num_key_value_heads": 128, "num_hidden_layers": 61, "n_routed_experts": 256, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "max_position_embeddings": 163840,
        "vocab_size": 129280, "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}},
    "Llama-3.1-70B-Instruct": {
        "architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "num_attention_heads": 64,
        "num_key_value_heads": 8, "num_hidden_layers": 80, "max_position_embeddings": 131072,
        "vocab_size": 128256, "torch_dtype": "bfloat16"},
    "Qwen3-30B-A3B": {
        "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "num_attention_heads": 32,
        "num_key_value_heads": 4, "num_hidden_layers": 48, "num_experts": 128,
        "max_position_embeddings": 40960, "vocab_size": 151936, "torch_dtype": "bfloat16"},
}


def greedy_covering(rows: list[dict], names: list[str]) -> list[dict]:
    """The textbook greedy covering array over given (legal) rows: repeatedly take the row that
    covers the most uncovered pairs (lazily re-scored: a row's gain only falls)."""
    pairs_of = [frozenset(((a, json.dumps(r[a])), (b, json.dumps(r[b]))) for a, b in itertools.combinations(names, 2))
                for r in rows]
    uncovered = set().union(*pairs_of)
    heap = [(-len(p), i) for i, p in enumerate(pairs_of)]
    heapq.heapify(heap)
    chosen = []
    while uncovered and heap:
        _, i = heapq.heappop(heap)
        gain = len(pairs_of[i] & uncovered)
        if heap and gain < -heap[0][0]:
            heapq.heappush(heap, (-gain, i))  # stale score: re-queue with the true gain
            continue
        if gain:
            chosen.append(rows[i])
            uncovered -= pairs_of[i]
    return chosen


def bench_model_matrix() -> None:
    print(f"\n== pairwise matrix with a model axis: {len(PRESETS)} presets x {len(MODELS)} models x axes {AXES}")
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, config in MODELS.items():
            (Path(tmp) / name).mkdir()
            (Path(tmp) / name / "config.json").write_text(json.dumps(config))
            paths.append(str(Path(tmp) / name))
        resolve("llm", {}, load_facts("h100", system="llm"))  # compile the plan outside the timings

        def build():
            per_model = {m: {p: load_facts(p, model_path=m) for p in PRESETS} for m in paths}
            presets = {p: load_facts(p) for p in PRESETS}
            facts = [f for by in per_model.values() for f in by.values()]
            axes = parse_axes("llm", AXES, [], facts)
            return generate("llm", presets, axes, {}, "pairwise", seed=0, models=per_model), presets, per_model
        (matrix, presets, per_model), wall, cpu = timed(build)
        cov = matrix.coverage()
        print(f"  pairwise          {wall:8.0f} ms wall {cpu:8.0f} ms cpu   (target <= 3000 ms cpu, one core): "
              f"{len(matrix.rows)} rows, coverage {cov['covered']}/{cov['legal']} legal pairs, "
              f"{len(matrix.illegal)} minimal illegal combinations")

        space = Space("llm", presets, matrix.axes, {}, models=per_model)
        legal_rows, enum_wall, _ = timed(lambda: list(space.completions({}, matrix.axes)))
        names = [a.name for a in matrix.axes]
        greedy, greedy_wall, _ = timed(lambda: greedy_covering(legal_rows, names))
        print(f"  greedy baseline   {enum_wall + greedy_wall:8.0f} ms wall: {len(legal_rows)} legal rows enumerated, "
              f"{len(greedy)} rows cover their pairs; ratio {len(matrix.rows) / len(greedy):.2f} (target <= 1.2)")

        def illegal_rows():
            bad = 0
            for row in matrix.rows:
                user = {k: v for k, v in row.items() if k not in (FACTS_AXIS, MODEL_AXIS, "argv", "args", "hash")}
                user["model_path"] = row[MODEL_AXIS]
                config = resolve("llm", user, load_facts(row[FACTS_AXIS], model_path=row[MODEL_AXIS]))
                bad += config.hash[:16] != row["hash"] or any(config.values[k] != v for k, v in user.items())
            return bad
        bad, verify_wall, _ = timed(illegal_rows)
        print(f"  re-resolved rows  {verify_wall:8.0f} ms wall: {bad} illegal or different rows, each with its "
              f"own model's facts (target 0)")


def main() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} cpus, load average {load:.1f}")
    bench_dry_run()
    bench_matrix()
    bench_model_matrix()


if __name__ == "__main__":
    main()
