"""Where one decode step's time goes, in the engine's own worker (no HTTP): host work vs the GPU.

    python benchmarks/profile_decode_step.py [--batch 1] [--steps 20] [--context 512]
    python benchmarks/profile_decode_step.py --dry-run       # CPU, tiny shape: checks the code path

Builds the scheduler rank's Worker in this process for an 8B-shaped Llama with dummy weights,
resolved exactly as `accord serve --load-format dummy` resolves it here (bf16, CUDA graphs and
Triton attention on a GPU), starts ``--batch`` greedy requests, and once they are decoding times
``--steps`` worker steps. It prints:

1. host time per step, split into build_batch (inputs), forward (graph replay or eager), sampling,
   and the rest (scheduler, outputs): the worker runs them one after another, so at batch 1 any
   host time the GPU does not overlap adds straight to each token's latency;
2. from torch.profiler over a few steps: device kernels per step, and their total device time per
   step by kind (GEMM/GEMV, Triton kernels, other: elementwise, copies), beside the step's wall
   time. Wall time minus device time is the idle GPU (launch gaps, host work, syncs).

Nothing is asserted; --dry-run prints CPU figures that mean nothing.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu_engine import LLAMA_8B, TINY


def make_worker(folder: Path, device: str):
    from accord.engine.llm.settings import EngineSettings
    from accord.engine.llm.worker import Worker
    from accord.resolver.api import resolve
    from accord.resolver.facts.machine import load_facts

    facts = {**load_facts("cpu" if device == "cpu" else "probe", model_path=str(folder)), "engine": "accord"}
    values = {"model_path": str(folder), "load_format": "dummy", "random_seed": 0}
    config = resolve("llm", values, facts)
    settings = EngineSettings.from_config(config)
    return Worker(settings, settings.topology.all_ranks()[0]), config


def request(rid: str, ids: list[int], tokens: int) -> dict:
    return {"type": "generate", "rid": rid, "input_ids": ids, "stream": False,
            "sampling": {"max_new_tokens": tokens, "temperature": 0.0, "ignore_eos": True}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--context", type=int, default=512, help="prompt tokens per request")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    import accord.engine.llm.worker as worker_module

    if args.dry_run:
        device, config_json = "cpu", TINY
        args.steps, args.context = min(args.steps, 3), min(args.context, 16)
        torch.set_num_threads(1)
        print("DRY RUN on CPU, tiny Llama shape: every figure below is meaningless")
    else:
        if not torch.cuda.is_available():
            print("profile_decode_step: no CUDA device; nothing was measured (--dry-run checks the script).",
                  file=sys.stderr)
            return 2
        device, config_json = "cuda", LLAMA_8B

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    with tempfile.TemporaryDirectory(prefix="accord-profile-") as tmp:
        folder = Path(tmp) / "llama-shape"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config_json))
        worker, config = make_worker(folder, device)
    v = config.values
    print(f"resolved: attention {v['prefill_attention_backend']}/{v['decode_attention_backend']}, dtype "
          f"{v['dtype']}, kv {v['kv_cache_dtype']}, page size {v['page_size']}, cuda graphs "
          f"{worker.runner.graphs.batch_sizes if worker.runner.graphs else 'off'}")
    vocab = config_json["vocab_size"]
    prompts = [[(7 * b + 13 * i) % (vocab - 2) for i in range(args.context)] for b in range(args.batch)]
    worker.step([request(f"r{b}", ids, 4 * args.steps + 16) for b, ids in enumerate(prompts)])
    while len(worker.scheduler.running) < args.batch or worker.scheduler.waiting or worker.scheduler.chunked:
        worker.step([])     # until every request has been prefilled and decodes
    for _ in range(3):
        worker.step([])

    spent = collections.defaultdict(float)
    runner = worker.runner
    originals = {"build_batch": worker_module.build_batch, "forward": runner.forward, "sample": worker._sample}

    def timed(name, fn):
        def call(*a, **k):
            start = time.perf_counter()
            out = fn(*a, **k)
            spent[name] += time.perf_counter() - start
            return out
        return call

    worker_module.build_batch = timed("build_batch", originals["build_batch"])
    runner.forward = timed("forward (launch)", originals["forward"])
    worker._sample = timed("sample (waits for the GPU)", originals["sample"])
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        worker.step([])
    sync()
    wall = (time.perf_counter() - start) / args.steps
    worker_module.build_batch, runner.forward, worker._sample = originals.values()
    rest = wall - sum(spent.values()) / args.steps
    parts = ", ".join(f"{name} {1e3 * t / args.steps:.3f}" for name, t in spent.items())
    print(f"batch {args.batch}: {1e3 * wall:.3f} ms per step ({args.batch / wall:.1f} tok/s); host ms per step: "
          f"{parts}, rest (scheduler, outputs) {1e3 * rest:.3f}")

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    profiled = min(args.steps, 5)
    with profile(activities=activities) as prof:
        for _ in range(profiled):
            worker.step([])
        sync()
    if device == "cuda":
        kinds = collections.Counter()
        count = 0
        for event in prof.events():
            if event.device_type.name != "CUDA":
                continue
            count += 1
            name = event.name.lower()
            kind = ("GEMM/GEMV" if any(k in name for k in ("gemm", "gemv", "cutlass", "sm90_xmma", "nvjet"))
                    else "Triton" if name.startswith("_") and "kernel" in name else "other")
            kinds[kind] += event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total
        device_ms = sum(kinds.values()) / 1e3 / profiled
        print(f"device: {count / profiled:.0f} kernels per step, {device_ms:.3f} ms of kernel time per step "
              f"(" + ", ".join(f"{k} {v / 1e3 / profiled:.3f}" for k, v in kinds.most_common()) +
              f"); GPU idle {max(0.0, 1e3 * wall - device_ms):.3f} ms of the {1e3 * wall:.3f} ms step")
    else:
        ops = [e for e in prof.events() if e.name.startswith("aten::") and
               (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))]
        print(f"host: {len(ops) / profiled:.0f} top-level aten ops per step (each a kernel launch on a GPU "
              "unless captured in a graph)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
