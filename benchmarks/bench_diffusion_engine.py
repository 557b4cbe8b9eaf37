"""Diffusion engine on this machine: launch-to-ready, and what a warmup plan buys the first request.

For each warmup setting the built-in tiny DiT server is started as `accord serve` would start it
(`engine.diffusion.server.serve` in a child process) and measured from the outside:

- launch-to-ready: process start until `/health` answers 200 (workers warmed up);
- warmup: seconds the workers spent executing the plan (from `/server_info`);
- first / second request at each of two resolutions (HTTP round trip, one image).

The baseline is the server without a plan (`--warmup-mode off`), measured in the same run; the
ratios compare each setting's first request with the baseline's. With `--repeat N` every figure is
the median of N launches. Figures only, never asserted.

    .venv/bin/python benchmarks/bench_diffusion_engine.py [--num-gpus N] [--repeat N]
                                                          [--resolutions 256x256 512x512]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from accord.resolver.frozen import ResolvedConfig  # noqa: E402
from accord.resolver.language.catalog import load_catalog  # noqa: E402

LAUNCH = ("import json, sys; from accord.engine.diffusion.server import serve; from accord.resolver.frozen import ResolvedConfig; "
          "sys.exit(serve(ResolvedConfig.from_dict(json.load(open(sys.argv[1])))))")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config(num_gpus: int, **overrides) -> ResolvedConfig:
    values = {**load_catalog("diffusion").defaults(), "num_gpus": num_gpus, "tp_size": 1, "sp_degree": num_gpus,
              "ulysses_degree": num_gpus, "ring_degree": 1, "enable_cfg_parallel": False, "cfg_parallel_degree": 1,
              "port": free_port(), "scheduler_port": free_port(), "master_port": free_port(), **overrides}
    return ResolvedConfig("diffusion", {"platform": "cpu"}, values)


def measure(label: str, cfg: ResolvedConfig, resolutions: list[str]) -> dict:
    url = f"http://127.0.0.1:{cfg.values['port']}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(cfg.to_dict()))
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-c", LAUNCH, str(path)], cwd=REPO,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with httpx.Client(base_url=url, timeout=600) as client:
                while True:
                    if process.poll() is not None:
                        raise SystemExit(f"{label}: the server exited with {process.returncode}")
                    try:
                        if client.get("/health").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(0.05)
                ready = time.perf_counter() - started
                executed = client.get("/server_info").json()["warmup"]["executed"]
                warmup = sum(e["seconds"] for e in executed.get("0", []))
                requests = {}
                for size in resolutions:
                    for attempt in ("first", "second"):
                        t0 = time.perf_counter()
                        reply = client.post("/v1/images/generations", json={"prompt": "a lighthouse", "size": size})
                        reply.raise_for_status()
                        requests[(size, attempt)] = time.perf_counter() - t0
                        meta = reply.json()["metadata"]
                        if meta["warmup"]:
                            warmup += sum(e["seconds"] for e in meta["warmup"]["ran_before_this_request"])
        finally:
            process.terminate()
            process.wait(30)
    return {"label": label, "ready": ready, "warmup": warmup, "requests": requests}


def median_of(runs: list[dict]) -> dict:
    return {"label": runs[0]["label"], "ready": statistics.median(r["ready"] for r in runs),
            "warmup": statistics.median(r["warmup"] for r in runs),
            "requests": {key: statistics.median(r["requests"][key] for r in runs) for key in runs[0]["requests"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-gpus", type=int, default=1, help="worker ranks (sequence parallel across them)")
    parser.add_argument("--resolutions", nargs=2, default=["256x256", "512x512"])
    parser.add_argument("--repeat", type=int, default=1, help="launches per setting (medians are printed)")
    args = parser.parse_args()
    res = args.resolutions
    settings = [
        ("no plan (baseline)", {"warmup_mode": "off"}),
        ("server plan", {"warmup_mode": "server", "warmup_resolutions": res}),
        ("request plan", {"warmup_mode": "request", "warmup_resolutions": res}),
        ("server plan + BCG", {"warmup_mode": "server", "warmup_resolutions": res,
                               "enable_breakable_cuda_graph": True, "bcg_text_buckets": [64]}),
    ]
    rows = [median_of([measure(label, config(args.num_gpus, **overrides), res) for _ in range(args.repeat)])
            for label, overrides in settings]
    base = rows[0]["requests"]
    print(f"tiny DiT on CPU, {args.num_gpus} worker rank(s), median of {args.repeat} launch(es); times in "
          "seconds; ratio = first request / baseline's")
    header = f"{'setting':<20} {'ready':>7} {'warmup':>7}"
    for size in res:
        header += f" {size + ' 1st':>13} {'2nd':>7} {'ratio':>6}"
    print(header)
    for row in rows:
        line = f"{row['label']:<20} {row['ready']:7.2f} {row['warmup']:7.2f}"
        for size in res:
            first, second = row["requests"][(size, "first")], row["requests"][(size, "second")]
            line += f" {first:13.3f} {second:7.3f} {first / base[(size, 'first')]:6.2f}"
        print(line)


if __name__ == "__main__":
    main()
