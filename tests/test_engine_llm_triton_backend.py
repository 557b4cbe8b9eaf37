"""attention_backend triton: the engine's Triton path (kernels/, run by the Triton interpreter on
CPU) generates the tokens of the torch_native path. Runs in a subprocess because the interpreter
must be switched on before triton is first imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent("""
    import json, torch
    from resolver.catalog import load_catalog
    from resolver.frozen import ResolvedConfig
    from engine.llm.settings import EngineSettings
    from engine.llm.worker import Worker
    torch.set_num_threads(1)
    prompts = ["paged kv", "the triton interpreter runs kernels on the CPU"]
    results = {}
    for backend, extra in [("torch_native", {}), ("triton", {}), ("triton", {"page_size": 1}),
                           ("triton", {"kv_cache_dtype": "fp8_e4m3"}), ("torch_native", {"kv_cache_dtype": "fp8_e4m3"})]:
        values = {**load_catalog("llm").defaults(), "attention_backend": backend, "page_size": 4,
                  "random_seed": 3, "max_total_tokens": 1024, "mem_fraction_static": None,
                  "dtype": "float32", "triton_attention_num_kv_splits": 2, **extra}
        settings = EngineSettings.from_config(ResolvedConfig("llm", {"platform": "cpu"}, values))
        worker = Worker(settings, settings.topology.all_ranks()[0])
        assert worker.runner.decode_attention.name == backend
        pending = [{"type": "generate", "rid": p, "input_ids": [256, *p.encode()], "stream": False,
                    "sampling": {"max_new_tokens": 4, "temperature": 0.0, "ignore_eos": True}} for p in prompts]
        out = {}
        while pending or worker.has_work():
            for item in worker.step(pending):
                out[item["rid"]] = item["ids"]
            pending = []
        results[backend + json.dumps(extra)] = out
    print(json.dumps(results))
""")


def test_triton_backend_generates_the_torch_native_tokens():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    reference = results["torch_native{}"]
    assert results["triton{}"] == reference
    assert results['triton{"page_size": 1}'] == reference
    assert results['triton{"kv_cache_dtype": "fp8_e4m3"}'] == results['torch_native{"kv_cache_dtype": "fp8_e4m3"}']
