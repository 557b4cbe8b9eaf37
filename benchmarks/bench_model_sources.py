"""What the model-facts chain costs: a card lookup, a cache lookup, and a local folder's share of a
cold `accord resolve`.

Targets (issue 34): a local folder adds nothing measurable to a cold resolve, and a card lookup
costs at most a few milliseconds. Prints medians, and each cold resolve as a ratio against the
same command without --model-path, measured in the same run. Offline, against a cache this script
writes in a temporary folder (nothing is downloaded).

    python benchmarks/bench_model_sources.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "tests" / "differential" / "fixtures" / "models" / "deepseek-ai" / "DeepSeek-V3"
REPO = "deepseek-ai/DeepSeek-V3"


def _median_ms(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _cold_resolve_ms(args: list[str], repeat: int, env: dict) -> float:
    command = [sys.executable, "-m", "accord.resolver.cli", "resolve", "--facts", "h100", "--json", *args]
    return _median_ms(lambda: subprocess.run(command, capture_output=True, env=env, check=False), repeat)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    opts = parser.parse_args()
    home = tempfile.mkdtemp(prefix="bench-hf-home-")
    snapshot = Path(home) / "hub" / f"models--{REPO.replace('/', '--')}" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((FOLDER / "config.json").read_text())
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
    os.environ.update({"HF_HUB_OFFLINE": "1", "HF_HOME": home})
    env = {**os.environ}

    from accord.resolver.facts import model_sources
    from accord.resolver.facts.model import facts_of

    def card() -> None:
        facts_of(model_sources.model_card(REPO, "llm"), "llm")

    def cache() -> None:
        facts_of(model_sources.cached_snapshot(REPO, None, "config.json"), "llm")

    def folder() -> None:
        model_sources._REMOTE_LOOKUPS.clear()
        facts_of(model_sources.find_model(str(FOLDER), "llm").source, "llm")

    print(f"model-facts chain, median of {opts.repeat} (in process, ms):")
    for name, call in (("built-in card lookup + facts", card), ("HF cache lookup + facts", cache),
                       ("local folder lookup + facts", folder)):
        print(f"  {name:<34} {_median_ms(call, opts.repeat):8.3f} ms")
    baseline = _cold_resolve_ms([], opts.repeat, env)
    print(f"cold `accord resolve --facts h100 --json` (new process), median of {opts.repeat}:")
    print(f"  {'no --model-path':<34} {baseline:8.1f} ms   ratio 1.00")
    for name, args in (("local folder", ["--model-path", str(FOLDER)]), ("hub id from the HF cache", ["--model-path", REPO]),
                       ("hub id from a built-in card", ["--model-path", "moonshotai/Kimi-K2-Instruct"])):
        took = _cold_resolve_ms(args, opts.repeat, env)
        print(f"  {name:<34} {took:8.1f} ms   ratio {took / baseline:.2f}")
    print(json.dumps({"cards": len(model_sources.card_systems())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
