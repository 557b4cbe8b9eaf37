"""Load on a real `serve` over loopback: 64 concurrent clients for a bounded time, per tp size.

Prints errors (must be 0), p50/p99 request latency and generated tokens/s for tp=1 and tp=2;
figures are for comparison within one run, not assertions.

    PYTHONPATH=$PWD python benchmarks/bench_llm_load.py [--seconds 20] [--clients 64] [--tp 1 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.test_engine_llm_server import Server, server_config


async def client_loop(url: str, deadline: float, latencies: list, tokens: list, errors: list, i: int):
    body = {"prompt": f"client {i} says hello", "max_tokens": 16, "temperature": 0, "ignore_eos": True}
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        while time.monotonic() < deadline:
            start = time.monotonic()
            try:
                response = await client.post("/v1/completions", json=body)
                if response.status_code != 200:
                    errors.append(response.status_code)
                    continue
                tokens.append(response.json()["usage"]["completion_tokens"])
                latencies.append(time.monotonic() - start)
            except httpx.HTTPError as err:
                errors.append(type(err).__name__)


async def load(url: str, clients: int, seconds: float) -> dict:
    latencies, tokens, errors = [], [], []
    start = time.monotonic()
    await asyncio.gather(*(client_loop(url, start + seconds, latencies, tokens, errors, i) for i in range(clients)))
    elapsed = time.monotonic() - start
    ordered = sorted(latencies) or [float("nan")]
    return {"requests": len(latencies), "errors": len(errors), "p50_s": statistics.median(ordered),
            "p99_s": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "tokens_per_s": sum(tokens) / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--tp", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    for tp in args.tp:
        with tempfile.TemporaryDirectory() as tmp:
            server = Server(server_config(tp_size=tp), Path(tmp))
            try:
                r = asyncio.run(load(server.url, args.clients, args.seconds))
            finally:
                server.stop()
        print(f"tp={tp} clients={args.clients} seconds={args.seconds:g} requests={r['requests']} "
              f"errors={r['errors']} p50={r['p50_s'] * 1000:.0f}ms p99={r['p99_s'] * 1000:.0f}ms "
              f"tokens/s={r['tokens_per_s']:.1f}")


if __name__ == "__main__":
    main()
