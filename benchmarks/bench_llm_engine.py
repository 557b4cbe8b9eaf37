"""LLM engine figures, measured in one run on this machine (printed, never asserted).

1. launch-to-ready of `accord serve` for the built-in model at tp=1 and tp=2 (process start until
   /health answers 200), and the resolver's share of it (a cold `accord resolve` of the same flags);
2. batched decode: 16 concurrent requests vs the same 16 sent one after another (the baseline),
   as generated tokens per second and their ratio.

Usage: .venv/bin/python benchmarks/bench_llm_engine.py [--tokens 64] [--requests 16] [--threads 1]

--threads sets OMP_NUM_THREADS for the server's ranks (default 1): the built-in model's matmuls are
far too small to gain from intra-op threads, and on a busy machine idle-spinning worker threads
cost more than they give. Pass 0 to keep the engine's default (cores / ranks on the node).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
COMMON = ["--model-path", "tiny-llama", "--facts", "cpu", "--random-seed", "0"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def accord(*args: str, threads: int = 0, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return subprocess.Popen([sys.executable, "-m", "accord.resolver.cli", *args], cwd=REPO, env=env, **popen)


def cold_resolve_seconds(flags: list[str]) -> float:
    start = time.perf_counter()
    proc = accord("resolve", *COMMON, *flags, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.wait()
    return time.perf_counter() - start


class Launch:
    """`accord serve FLAGS` until /health is 200; stopped with SIGINT like a terminal Ctrl-C."""

    def __init__(self, flags: list[str], threads: int):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        start = time.perf_counter()
        self.proc = accord("serve", *COMMON, "--port", str(self.port), *flags, threads=threads,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"accord serve {' '.join(flags)} exited: {self.proc.stderr.read().decode()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.ready_s = time.perf_counter() - start

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)


def decode_throughput(url: str, requests: int, tokens: int) -> tuple[float, float]:
    """Generated tokens per second: one request at a time, then all at once."""
    body = {"text": "Batching amortises every step over many sequences.",
            "sampling_params": {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}}

    with httpx.Client(base_url=url, timeout=600, limits=httpx.Limits(max_connections=requests)) as client:
        def one(_):
            return client.post("/generate", json=body).json()["meta_info"]["completion_tokens"]

        one(0)  # warm up
        start = time.perf_counter()
        produced = sum(one(i) for i in range(requests))
        sequential = produced / (time.perf_counter() - start)
        with concurrent.futures.ThreadPoolExecutor(requests) as pool:
            start = time.perf_counter()
            produced = sum(pool.map(one, range(requests)))
            batched = produced / (time.perf_counter() - start)
    return sequential, batched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per request")
    parser.add_argument("--requests", type=int, default=16, help="requests per throughput round")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS per rank (0: engine default)")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start; built-in "
          f"tiny Llama on CPU, {args.threads or 'default'} thread(s) per rank")

    resolve_s = cold_resolve_seconds([])
    for tp in (1, 2):
        launch = Launch(["--tp-size", str(tp)], args.threads)
        print(f"launch-to-ready tp={tp}: {launch.ready_s:6.2f} s   "
              f"(cold `accord resolve` {resolve_s:.2f} s = {100 * resolve_s / launch.ready_s:4.1f}% of it)")
        if tp == 1:
            sequential, batched = decode_throughput(launch.url, args.requests, args.tokens)
        launch.stop()
    print(f"decode, {args.requests} requests x {args.tokens} tokens: sequential {sequential:7.1f} tok/s, "
          f"concurrent {batched:7.1f} tok/s  ->  {batched / sequential:.1f}x (target >= 4x)")
    print(f"load average {os.getloadavg()[0]:.1f} at the end (other work on the machine skews every figure)")


if __name__ == "__main__":
    main()
