"""The engine on the GPU it finds: an 8B-shaped Llama vs the weight-read roofline and vs transformers.

    python benchmarks/bench_gpu_engine.py [--prompt 512] [--tokens 128] [--batches 1 8 64]
    python benchmarks/bench_gpu_engine.py --dry-run     # CPU, a tiny shape: checks the code paths

In one run (figures printed, never asserted):
1. `accord serve --model-path <8B-shaped folder> --load-format dummy` (random weights, the
   resolved defaults: bf16, CUDA graphs, Triton attention) answers batches of 1, 8 and 64
   concurrent /generate requests. Prefill: tokens per second of a batch of prompts with one new
   token each. Decode: new tokens per second once prefill is done, (b x (N - 1)) / (T_N - T_1)
   from a run of N new tokens and the prefill run (fresh random prompts each run, so the prefix
   cache never helps).
2. The roofline each decode figure is held against: a decode step must read every weight but the
   input embedding table (only b of its rows) plus each sequence's KV cache, so at batch b it
   makes at most b x bandwidth / (weight bytes + KV bytes) tokens per second. Bandwidth is the
   GPU's nominal HBM figure where the name is known, else the measured device copy rate (both are
   printed). Targets (issue 28): batch 1 >= 75% of it, batch 64 >= 50%.
3. transformers' LlamaForCausalLM with the same shape and dtype, a static KV cache and
   torch.compile(mode="reduce-overhead") (CUDA graphs): what a GPU user runs without a server,
   and a fairer baseline than eager generate. Same batches, same prompt and generation lengths.

Weights are random (seeded), so the generated text is noise; only the speed means anything.
--dry-run runs all three parts on CPU with a tiny Llama shape, a few tokens, and transformers
without torch.compile: the figures mean nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

LLAMA_8B = {  # Llama-3.1-8B's shape
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "vocab_size": 128256, "bos_token_id": 128000,
    "eos_token_id": 128001, "tie_word_embeddings": False, "attention_bias": False, "torch_dtype": "bfloat16",
}
TINY = {**LLAMA_8B, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 512,
        "bos_token_id": 510, "eos_token_id": 511, "max_position_embeddings": 2048}

NOMINAL_HBM_TBPS = [  # (name fragment, TB/s), most specific first: vendors' data sheets
    ("H200", 4.8), ("H100 PCIe", 2.0), ("H100", 3.35), ("H800", 3.35), ("GH200", 4.0), ("B200", 8.0),
    ("GB200", 8.0), ("A100-SXM4-80GB", 2.039), ("A100 80GB PCIe", 1.935), ("A100", 1.555),
    ("L40S", 0.864), ("L4", 0.3), ("A10G", 0.6), ("RTX 4090", 1.008), ("RTX 5090", 1.792),
    ("MI300X", 5.3),
]


def weight_bytes(config: dict, element: int = 2) -> tuple[int, int]:
    """(all weights, those a decode step reads: all but the input embedding table), in bytes."""
    h, i, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h
    embedding = config["vocab_size"] * h
    head = 0 if config["tie_word_embeddings"] else embedding
    total = (layers * per_layer + h + embedding + head) * element
    # A tied table is also the LM head, which every step reads whole.
    return total, total if config["tie_word_embeddings"] else total - embedding * element


def kv_bytes_per_token(config: dict, element: int = 2) -> int:
    return 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * element


def bandwidth(device: str) -> tuple[float, str]:
    """(bytes per second, where the figure comes from) of the device's memory."""
    import torch

    n = (1 << 30) if device == "cuda" else (64 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    sync(device)
    start = time.perf_counter()
    reps = 20 if device == "cuda" else 3
    for _ in range(reps):
        dst.copy_(src)
    sync(device)
    measured = 2 * n * reps / (time.perf_counter() - start)   # read + write
    if device == "cuda":
        name = torch.cuda.get_device_name()
        for fragment, tbps in NOMINAL_HBM_TBPS:
            if fragment in name:
                return tbps * 1e12, f"nominal {tbps} TB/s for {name} (measured copy {measured / 1e12:.2f} TB/s)"
    return measured, f"measured copy {measured / 1e9:.1f} GB/s (no nominal figure for this device)"


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def roofline(config: dict, bw: float, batch: int, context: float) -> float:
    """Tokens per second at most for a decode step of ``batch`` sequences of ``context`` tokens."""
    _, read = weight_bytes(config)
    return batch * bw / (read + batch * context * kv_bytes_per_token(config))


def prompts(rng: random.Random, batch: int, length: int, vocab: int) -> list[list[int]]:
    """Fresh random prompts (never a shared prefix, so the radix cache cannot shorten prefill)."""
    return [[rng.randrange(vocab - 2) for _ in range(length)] for _ in range(batch)]


# ----------------------------------------------------------------------------------- accord serve
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`accord serve` of a model folder with dummy weights, until /health answers 200."""

    def __init__(self, folder: Path, extra: list[str], log: Path):
        import httpx

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.log = log.open("w")
        argv = [sys.executable, "-m", "accord.resolver.cli", "serve", "--model-path", str(folder),
                "--load-format", "dummy", "--port", str(self.port), "--random-seed", "0", *extra]
        print("  $ accord " + " ".join(argv[3:]))
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        start = time.perf_counter()
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"accord serve exited ({self.proc.returncode}); its log:\n{log.read_text()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.perf_counter() - start > 1200:
                self.stop()
                raise SystemExit("accord serve was not ready after 20 minutes")
            time.sleep(0.2)
        self.ready_s = time.perf_counter() - start

    def run(self, batch_prompts: list[list[int]], new_tokens: int) -> float:
        """Seconds until every request of the batch has its ``new_tokens`` tokens."""
        import httpx

        def one(ids):
            body = {"input_ids": ids, "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0,
                                                          "ignore_eos": True}}
            reply = client.post("/generate", json=body)
            reply.raise_for_status()
            got = reply.json()["meta_info"]["completion_tokens"]
            if got != new_tokens:
                raise SystemExit(f"asked for {new_tokens} tokens, got {got}")

        limits = httpx.Limits(max_connections=len(batch_prompts))
        with httpx.Client(base_url=self.url, timeout=1800, limits=limits) as client, \
                concurrent.futures.ThreadPoolExecutor(len(batch_prompts)) as pool:
            start = time.perf_counter()
            list(pool.map(one, batch_prompts))
            return time.perf_counter() - start

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


# ----------------------------------------------------------------------------------- transformers
class Transformers:
    """LlamaForCausalLM, random weights, static KV cache, forward under torch.compile (GPU)."""

    def __init__(self, config: dict, device: str, compile_forward: bool):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device(device):
                self.model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in config.items()
                                                             if k not in ("architectures", "torch_dtype")}))
        finally:
            torch.set_default_dtype(previous)
        self.model.eval()
        self.device = device
        if compile_forward:
            self.model.forward = torch.compile(self.model.forward, mode="reduce-overhead", fullgraph=True)

    def run(self, batch_prompts: list[list[int]], new_tokens: int) -> float:
        import torch

        ids = torch.tensor(batch_prompts, device=self.device)
        sync(self.device)
        start = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                      min_new_tokens=new_tokens, do_sample=False,
                                      cache_implementation="static", pad_token_id=0)
        sync(self.device)
        elapsed = time.perf_counter() - start
        assert out.shape[1] == ids.shape[1] + new_tokens, out.shape
        return elapsed

    def close(self) -> None:
        import torch

        del self.model
        if self.device == "cuda":
            torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------- measuring
def measure(runner, config: dict, batches, prompt: int, tokens: int, rng: random.Random, bw: float) -> list:
    """Per batch: (batch, prefill tok/s, decode tok/s, decode roofline tok/s)."""
    rows = []
    for batch in batches:
        runner.run(prompts(rng, batch, prompt, config["vocab_size"]), tokens)   # warm-up: graphs, compiles
        first = runner.run(prompts(rng, batch, prompt, config["vocab_size"]), 1)
        whole = runner.run(prompts(rng, batch, prompt, config["vocab_size"]), tokens)
        decode = batch * (tokens - 1) / (whole - first) if whole > first else float("nan")
        rows.append((batch, batch * prompt / first, decode, roofline(config, bw, batch, prompt + tokens / 2)))
    return rows


def print_rows(label: str, rows: list) -> None:
    print(f"{label}")
    print(f"  {'batch':>5}  {'prefill tok/s':>14}  {'decode tok/s':>13}  {'roofline tok/s':>15}  {'of roofline':>11}")
    for batch, prefill, decode, roof in rows:
        print(f"  {batch:>5}  {prefill:14.0f}  {decode:13.1f}  {roof:15.1f}  {100 * decode / roof:10.1f}%")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=512, help="prompt tokens per request")
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per request")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--serve-flag", action="append", default=[], metavar="FLAG",
                        help="extra `accord serve` argument (repeat), e.g. --serve-flag=--page-size=16")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny shape: check the code paths")
    args = parser.parse_args(argv)
    import torch

    if args.dry_run:
        device, config = "cpu", TINY
        args.prompt, args.tokens, args.batches = min(args.prompt, 8), min(args.tokens, 4), [1, 2]
        extra = ["--facts", "cpu"]
        print("DRY RUN on CPU, tiny Llama shape: every figure below is meaningless")
    else:
        if not torch.cuda.is_available():
            print("bench_gpu_engine: no CUDA device is visible to torch; nothing was measured (--dry-run "
                  "checks the script on CPU).", file=sys.stderr)
            return 2
        device, config = "cuda", LLAMA_8B
        extra = []
        major, minor = torch.cuda.get_device_capability()
        print(f"GPU {torch.cuda.get_device_name()} (sm {major}{minor}), torch {torch.__version__}")
    extra += args.serve_flag
    total, read = weight_bytes(config)
    bw, source = bandwidth(device)
    print(f"model: Llama shape, {config['num_hidden_layers']} layers, hidden {config['hidden_size']}, "
          f"{total / 1e9:.3g} GB of bf16 weights ({read / 1e9:.3g} GB read per decode step); "
          f"KV {kv_bytes_per_token(config) / 1024:.0f} KiB per token")
    print(f"bandwidth: {source}")
    print(f"requests: {args.prompt}-token prompts, {args.tokens} new tokens, batches {args.batches}")
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="accord-bench-") as tmp:
        folder = Path(tmp) / "llama-shape"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config, indent=1))
        server = Server(folder, extra, Path(tmp) / "serve.log")
        try:
            print(f"  ready in {server.ready_s:.1f} s")
            print_rows("accord serve (--load-format dummy)", measure(server, config, args.batches, args.prompt,
                                                                     args.tokens, rng, bw))
        finally:
            server.stop()
    if args.skip_transformers:
        return 0
    hf = Transformers(config, device, compile_forward=not args.dry_run)
    try:
        label = "transformers, static cache" + (" (no torch.compile in a dry run)" if args.dry_run
                                                else " + torch.compile(reduce-overhead)")
        print_rows(label, measure(hf, config, args.batches, args.prompt, args.tokens, rng, bw))
    finally:
        hf.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
