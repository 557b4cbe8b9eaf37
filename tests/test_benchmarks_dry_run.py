"""The GPU benchmarks run end to end on CPU in their --dry-run mode (tiny shapes, figures meaningless).

They are written for a GPU session that has little time to debug them: a dry run here exercises
every code path they take there (serving a model folder with dummy weights, the roofline, the
transformers static-cache baseline; the Triton kernels beside each SDPA backend, refusals included),
so that a GPU run fails only on what only a GPU can show.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def dry_run(script: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, f"benchmarks/{script}", "--dry-run", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_bench_kernels_dry_run_times_triton_the_reference_and_sdpa():
    out = dry_run("bench_kernels.py")
    for case in ("decode B2", "fp8_e4m3 KV", "extend B2"):
        assert case in out, out
    assert out.count("triton paged") == 3 and out.count("torch reference") == 3, out
    # Every SDPA backend either ran (and matched the Triton output closely) or said why not.
    for label in ("flash", "cudnn", "efficient"):
        assert out.count(f"sdpa {label}") == 2, out
    for row in (r for r in out.splitlines() if "max|diff|" in r):
        assert float(row.rsplit(" ", 1)[1]) < 0.05, row


def test_bench_gpu_engine_dry_run_serves_and_compares_with_transformers():
    out = dry_run("bench_gpu_engine.py", "--batches", "2")
    assert "accord serve (--load-format dummy)" in out and "transformers, static cache" in out, out
    tables = [line.split() for line in out.splitlines() if line.strip().startswith("2 ")]
    assert len(tables) == 2, out            # one batch-2 row per contender
    assert all(float(row[1]) > 0 for row in tables), out   # prefill tokens per second


def test_profile_decode_step_dry_run_splits_a_step_into_its_parts():
    out = dry_run("profile_decode_step.py", "--batch", "2")
    step = next(line for line in out.splitlines() if line.startswith("batch 2:"))
    for part in ("build_batch", "forward", "sample", "rest"):
        assert part in step, out
