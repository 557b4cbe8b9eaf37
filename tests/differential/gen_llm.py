"""Deterministic generator of realistic LLM launch commands for the upstream differential test.

Why: Accord must decide what upstream SGLang decides on commands people really type, not only on
the cases its own authors thought of. This module writes a list of cases, each a launch command
(`argv`, with hub model ids that the oracle maps to its hand-written config folders), the Accord
fact preset it runs on (`preset`) and the same machine in the oracle's fact format (`facts`).

Random cases pick a model from the oracle's model folders, a GPU preset from `rules/facts/` whose
memory holds its weights at some tensor-parallel size (as real commands do), and 1-5 high-impact
flags whose parallel layouts fit that machine, with attention kernels of the model's family and
quantization methods its checkpoint can load; hand-picked cases cover the behaviours issue 12 names. Same seed, same
cases, byte for byte.

usage: python -m tests.differential.gen_llm [--seed N] [--random N] OUT.json
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
# Copies of the oracle's hand-written config.json files (../shared/oracle/models), so Accord reads
# the very folders the oracle maps hub ids to, and the replay test needs nothing outside the repo.
ORACLE_MODELS = Path(__file__).resolve().parent / "fixtures" / "models"
PRESETS_DIR = ROOT / "rules" / "facts"

# Models the oracle maps (hub id -> its folder under ORACLE_MODELS), drafts kept apart.
TARGETS = [
    "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-2-7b-chat-hf", "Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B", "deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1-0528",
    "mistralai/Mixtral-8x7B-Instruct-v0.1", "openai/gpt-oss-120b",
]
DRAFTS = {"EAGLE": "lmsys/sglang-EAGLE-llama2-chat-7B",
          "EAGLE3": "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"}
MOE = {"Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B", "deepseek-ai/DeepSeek-V3",
       "deepseek-ai/DeepSeek-R1-0528", "mistralai/Mixtral-8x7B-Instruct-v0.1", "openai/gpt-oss-120b"}
MLA = {"deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1-0528"}
# CUDA presets only: the oracle simulates NVIDIA GPUs (ROCm and CPU-only resolution is not modelled).
PRESETS = ["a100", "a10g", "b200", "gb200", "h100", "h200", "l4", "l40s", "rtx4090", "rtx5090"]
PATH_FLAGS = ("--model-path", "--speculative-draft-model-path")
# Checkpoint sizes (GiB, from the published safetensors indexes): the generator's own table of
# where each model can run, independent of Accord's rules. Every target's heads allow tp 1-8.
WEIGHT_GIB = {
    "meta-llama/Llama-3.1-8B-Instruct": 15.0, "meta-llama/Llama-3.1-70B-Instruct": 131.4,
    "meta-llama/Llama-2-7b-chat-hf": 12.6, "Qwen/Qwen3-8B": 15.3, "Qwen/Qwen3-30B-A3B": 56.9,
    "Qwen/Qwen3-235B-A22B": 438.0, "deepseek-ai/DeepSeek-V3": 641.0,
    "deepseek-ai/DeepSeek-R1-0528": 641.0, "mistralai/Mixtral-8x7B-Instruct-v0.1": 87.0,
    "openai/gpt-oss-120b": 60.8,
}


def oracle_facts(preset: str) -> dict:
    """An Accord preset in the oracle's format (sm, cuda, gpu_count, gpu_mem_gib, ...)."""
    data = yaml.safe_load((PRESETS_DIR / f"{preset}.yaml").read_text())
    gpu = data["gpu"]
    return {"sm": gpu["sm"], "cuda": str(data["cuda"]), "gpu_count": gpu["count"],
            "gpu_mem_gib": gpu["mem_gib"], "gpu_name": gpu["name"],
            "flashinfer": "flashinfer" in (data.get("packages") or {}), "platform": data["platform"]}


def accord_argv(argv: list[str]) -> list[str]:
    """The same command for Accord: hub ids become the oracle's model folders (Accord reads the
    folder's config.json; the oracle maps the id to that same folder)."""
    out = list(argv)
    for i, word in enumerate(out[:-1]):
        if word in PATH_FLAGS and (ORACLE_MODELS / out[i + 1] / "config.json").is_file():
            out[i + 1] = str(ORACLE_MODELS / out[i + 1])
    return out


def _case(cid: str, preset: str, argv: list[str]) -> dict:
    return {"id": cid, "preset": preset, "facts": oracle_facts(preset), "argv": argv}


# --- random commands ------------------------------------------------------------------------------

ATTN = ["fa3", "flashinfer", "triton", "fa4", "trtllm_mha", "trtllm_mla", "flashmla", "cutlass_mla",
        "tokenspeed_mla", "torch_native", "flex_attention"]
# The kernels people pick for each attention family (MLA-only kernels on MLA models, MHA-only on
# the rest); hand-picked cases cover the cross-family mistakes.
ATTN_MLA = ["fa3", "flashinfer", "triton", "fa4", "trtllm_mla", "flashmla", "cutlass_mla", "tokenspeed_mla"]
ATTN_MHA = ["fa3", "flashinfer", "triton", "fa4", "trtllm_mha", "torch_native", "flex_attention"]
# --quantization people pass: an online method on an unquantized checkpoint, the checkpoint's own
# method on a quantized one.
ONLINE_QUANT = ["fp8", "fp8", "mxfp8", "mxfp4", "nvfp4_online"]
OWN_QUANT = {"deepseek-ai/DeepSeek-V3": "fp8", "deepseek-ai/DeepSeek-R1-0528": "fp8", "openai/gpt-oss-120b": "mxfp4"}


def _spec(r: random.Random, model: str) -> list[str]:
    # NEXTN and a draft-less EAGLE draft with the target's own MTP layers (the DeepSeek models).
    algo = r.choice(["EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE", "EAGLE"] if model in MLA
                    else ["EAGLE", "EAGLE3", "NGRAM", "STANDALONE", "EAGLE"])
    out = ["--speculative-algorithm", algo]
    if algo in DRAFTS and (model not in MLA or r.random() < 0.5):
        out += ["--speculative-draft-model-path", DRAFTS[algo]]
    elif algo == "STANDALONE" and r.random() < 0.7:
        out += ["--speculative-draft-model-path", "meta-llama/Llama-3.1-8B-Instruct"]
    if r.random() < 0.5:
        out += ["--speculative-num-steps", str(r.choice([1, 2, 3, 5]))]
    if r.random() < 0.4:
        out += ["--speculative-eagle-topk", str(r.choice([1, 2, 4, 8]))]
    if r.random() < 0.4:
        out += ["--speculative-num-draft-tokens", str(r.choice([2, 4, 8, 16]))]
    return out


def _flag_pool(r: random.Random, model: str, tp: int, gpus: int) -> list:
    """(weight, producer) pairs: each producer returns the words of one flag group. Parallel
    layouts stay inside the machine: DP attention and EP widths divide tp, replicas and pipeline
    stages use only the GPUs tp leaves free."""
    moe = model in MOE
    tp_divisors = [n for n in (2, 4, 8) if n <= tp and tp % n == 0]
    spare = gpus // tp
    return [
        (3 if len(tp_divisors) > 0 else 0,
         lambda: ["--dp-size", str(r.choice(tp_divisors or [1])), "--enable-dp-attention"]),
        (2 if spare >= 2 else 0, lambda: ["--dp-size", str(r.choice([n for n in (2, 4) if n <= spare] or [1]))]),
        (2 if spare >= 2 else 0, lambda: ["--pp-size", str(r.choice([n for n in (2, 4) if n <= spare] or [1]))]),
        (3 if moe and tp > 1 else 0, lambda: ["--ep-size", str(r.choice(tp_divisors + [tp]))]),
        (6, lambda: ["--attention-backend", r.choice(ATTN_MLA if model in MLA else ATTN_MHA)]),
        (1, lambda: ["--prefill-attention-backend", r.choice(ATTN[:4])]),
        (1, lambda: ["--decode-attention-backend", r.choice(ATTN[:4])]),
        (4, lambda: ["--kv-cache-dtype", r.choice(["fp8_e4m3", "fp8_e5m2", "bf16", "auto", "nvfp4"])]),
        (4, lambda: ["--quantization", OWN_QUANT.get(model) or r.choice(ONLINE_QUANT)]),
        (4, lambda: _spec(r, model)),
        (3, lambda: ["--chunked-prefill-size", str(r.choice([-1, 2048, 4096, 8192, 16384]))]),
        (3, lambda: ["--disable-cuda-graph"]),
        (2, lambda: ["--cuda-graph-max-bs-decode", str(r.choice([16, 64, 160, 512]))]),
        (3, lambda: ["--mem-fraction-static", str(r.choice([0.7, 0.8, 0.85, 0.9]))]),
        (2, lambda: ["--page-size", str(r.choice([1, 16, 32, 64, 128]))]),
        (3 if moe else 1, lambda: ["--moe-runner-backend", r.choice(
            ["triton", "triton_kernel", "flashinfer_cutlass", "flashinfer_trtllm", "deep_gemm",
             "cutlass", "flashinfer_mxfp4", "auto"])]),
        (2 if moe else 0, lambda: ["--moe-a2a-backend", r.choice(["deepep", "none"])]),
        (2, lambda: ["--max-running-requests", str(r.choice([32, 128, 256]))]),
        (1, lambda: ["--enable-two-batch-overlap"]),
        (1, lambda: ["--disable-radix-cache"]),
        (1, lambda: ["--enable-deterministic-inference"]),
        (1, lambda: ["--disaggregation-mode", r.choice(["prefill", "decode"])]),
        (1, lambda: ["--cpu-offload-gb", str(r.choice([10, 40, 100]))]),
        (1, lambda: ["--enable-torch-compile"]),
        (1, lambda: ["--grammar-backend", r.choice(["outlines", "llguidance", "none"])]),
        (1, lambda: ["--sampling-backend", "pytorch"]),
        (1, lambda: ["--enable-mixed-chunk"]),
        (1, lambda: ["--load-balance-method", r.choice(["round_robin", "total_requests", "auto"])]),
        (1, lambda: ["--schedule-conservativeness", "0.5"]),
    ]


def _placements(model: str) -> list[tuple[str, int]]:
    """(preset, tp) pairs where the model's weights take at most 3/4 of each GPU: the machines
    people actually launch it on."""
    out = []
    for preset in PRESETS:
        facts = oracle_facts(preset)
        for tp in (1, 2, 4, 8):
            if tp <= facts["gpu_count"] and WEIGHT_GIB[model] / tp <= 0.75 * facts["gpu_mem_gib"]:
                out.append((preset, tp))
    return out


def random_cases(n: int, seed: int) -> list[dict]:
    """Random commands on realistic machines: a model, a machine its weights fit on with the
    chosen tp (always spelled out when above 1), then 1-5 high-impact flags."""
    r = random.Random(seed)
    cases = []
    for i in range(n):
        model = r.choice(TARGETS)
        preset, tp = r.choice(_placements(model))
        pool = _flag_pool(r, model, tp, oracle_facts(preset)["gpu_count"])
        weights = [w for w, _ in pool]
        argv = ["--model-path", model] + (["--tp-size", str(tp)] if tp > 1 else [])
        seen: set[str] = {"--tp-size"}
        for _ in range(r.randint(1, 5)):
            words = r.choices(pool, weights)[0][1]()
            if words[0] in seen:
                continue
            seen.add(words[0])
            argv += words
        cases.append(_case(f"r{seed}-{i:04d}", preset, argv))
    return cases


# --- hand-picked commands: one or more per behaviour named in issue 12 --------------------------

L8, L70, Q8, Q30, DS, GPT = (TARGETS[0], TARGETS[1], TARGETS[3], TARGETS[4], TARGETS[6], TARGETS[9])
MIX = "mistralai/Mixtral-8x7B-Instruct-v0.1"
HAND = [
    # deliverable 1: resolution order and defaults
    ("ngram-defaults", "h100", [L8, "--speculative-algorithm", "NGRAM"]),
    ("ngram-defaults-b200", "b200", [L8, "--speculative-algorithm", "NGRAM"]),
    ("ngram-topk", "h100", [L8, "--speculative-algorithm", "NGRAM", "--speculative-eagle-topk", "4"]),
    ("ngram-draft-tokens", "h100", [L8, "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"]),
    ("ngram-max-running", "h100", [L8, "--speculative-algorithm", "NGRAM", "--max-running-requests", "64"]),
    ("mem-before-dp-chunk-b200", "b200", [DS, "--tp-size", "8", "--enable-dp-attention", "--dp-size", "8"]),
    ("mem-before-dp-chunk-h200", "h200", [DS, "--tp-size", "8", "--enable-dp-attention", "--dp-size", "4"]),
    ("mem-before-graph-off", "h100", [L8, "--attention-backend", "torch_native"]),
    ("mem-before-spec-mrr", "h100", [L8, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFTS["EAGLE3"]]),
    ("spec-user-mrr", "h100", [L8, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFTS["EAGLE3"], "--max-running-requests", "16"]),
    ("no-dp-reserve-dp1", "h100", [L8, "--dp-size", "1", "--enable-dp-attention"]),
    ("dp-reserve-dp2", "h100", [L8, "--tp-size", "2", "--dp-size", "2", "--enable-dp-attention"]),
    ("nextn-is-eagle", "h200", [DS, "--tp-size", "8", "--speculative-algorithm", "NEXTN"]),
    ("nextn-is-eagle-b200", "b200", [DS, "--tp-size", "8", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3"]),
    ("dp-chunk-explicit", "h200", [DS, "--tp-size", "8", "--enable-dp-attention", "--dp-size", "8", "--chunked-prefill-size", "8192"]),
    ("pp-breakable", "h100", [L70, "--pp-size", "2", "--tp-size", "4"]),
    ("pp-eagle", "h100", [L8, "--pp-size", "2", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFTS["EAGLE3"]]),
    ("pp-ngram", "h100", [L8, "--pp-size", "2", "--speculative-algorithm", "NGRAM"]),
    ("pp-standalone", "h100", [L70, "--pp-size", "2", "--tp-size", "2", "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", L8]),
    ("pd-decode-lb", "h100", [L8, "--disaggregation-mode", "decode"]),
    ("pd-prefill-lb", "h100", [L8, "--disaggregation-mode", "prefill"]),
    ("prefill-graph-no-chunk", "h100", [L8, "--chunked-prefill-size", "-1"]),
    ("prefill-graph-no-chunk-b200", "b200", [Q8, "--chunked-prefill-size", "-1"]),
    ("ar-fusion-h100", "h100", [L70, "--tp-size", "8"]),
    ("ar-fusion-b200", "b200", [L70, "--tp-size", "4"]),
    ("ar-fusion-gb200", "gb200", [L70, "--tp-size", "4"]),
    ("ar-fusion-b200-tp1", "b200", [L8]),
    ("equal-phase-backends", "h100", [L8, "--prefill-attention-backend", "flashinfer", "--decode-attention-backend", "flashinfer"]),
    ("equal-phase-backends-triton", "a100", [Q8, "--prefill-attention-backend", "triton", "--decode-attention-backend", "triton"]),
    ("diff-phase-backends", "h100", [L8, "--prefill-attention-backend", "fa3", "--decode-attention-backend", "flashinfer"]),
    ("page-snap-trtllm-mha", "b200", [L8, "--attention-backend", "trtllm_mha"]),
    ("page-snap-trtllm-mla", "b200", [DS, "--tp-size", "8", "--attention-backend", "trtllm_mla"]),
    ("page-snap-flashmla", "h200", [DS, "--tp-size", "8", "--attention-backend", "flashmla"]),
    ("page-snap-user", "b200", [DS, "--tp-size", "8", "--attention-backend", "trtllm_mla", "--page-size", "16"]),
    ("gptoss-h100", "h100", [GPT, "--tp-size", "4"]),
    ("gptoss-b200", "b200", [GPT, "--tp-size", "4"]),
    ("gptoss-a100", "a100", [GPT, "--tp-size", "8"]),
    ("gptoss-flashinfer", "h100", [GPT, "--tp-size", "4", "--attention-backend", "flashinfer"]),
    ("gptoss-triton", "h100", [GPT, "--tp-size", "4", "--attention-backend", "triton"]),
    ("gptoss-trtllm-b200", "b200", [GPT, "--tp-size", "4", "--attention-backend", "trtllm_mha"]),
    ("gptoss-fa3-b200", "b200", [GPT, "--tp-size", "4", "--attention-backend", "fa3"]),
    ("gptoss-moe-triton-kernel", "h100", [GPT, "--tp-size", "4", "--moe-runner-backend", "triton_kernel"]),
    ("gptoss-moe-mxfp4-b200", "b200", [GPT, "--tp-size", "4", "--moe-runner-backend", "flashinfer_mxfp4"]),
    ("gptoss-l40s", "l40s", [GPT, "--tp-size", "4"]),
    ("quant-vs-ckpt-fp8", "h200", [DS, "--tp-size", "8", "--quantization", "fp8"]),
    ("quant-vs-ckpt-awq", "h200", [DS, "--tp-size", "8", "--quantization", "awq"]),
    ("quant-vs-ckpt-mxfp4", "h100", [GPT, "--tp-size", "4", "--quantization", "mxfp4"]),
    ("quant-vs-ckpt-fp8-gptoss", "h100", [GPT, "--tp-size", "4", "--quantization", "fp8"]),
    ("quant-fp8-dense", "h100", [L8, "--quantization", "fp8"]),
    ("fi-cutlass-fp8", "b200", [Q30, "--quantization", "fp8", "--moe-runner-backend", "flashinfer_cutlass"]),
    ("fi-cutlass-fp8-h100", "h100", [Q30, "--quantization", "fp8", "--moe-runner-backend", "flashinfer_cutlass"]),
    ("fi-cutlass-bf16", "b200", [Q30, "--moe-runner-backend", "flashinfer_cutlass"]),
    ("triton-kernel-ep1", "h100", [Q30, "--tp-size", "2", "--moe-runner-backend", "triton_kernel"]),
    ("triton-kernel-ep2", "h100", [Q30, "--tp-size", "2", "--ep-size", "2", "--moe-runner-backend", "triton_kernel"]),
    ("tbo-no-a2a", "h200", [DS, "--tp-size", "8", "--enable-two-batch-overlap"]),
    ("tbo-dp-attn", "h200", [DS, "--tp-size", "8", "--enable-dp-attention", "--dp-size", "8", "--enable-two-batch-overlap"]),
    ("tbo-deepep", "h200", [DS, "--tp-size", "8", "--moe-a2a-backend", "deepep", "--enable-two-batch-overlap"]),
    ("tbo-dense", "h100", [L8, "--tp-size", "2", "--enable-two-batch-overlap"]),
    # deliverable 2: launch-time truth
    ("fa3-a100-mha", "a100", [L8, "--attention-backend", "fa3"]),
    ("fa3-l40s-mha", "l40s", [Q8, "--attention-backend", "fa3"]),
    ("fa3-a100-mla", "a100", [DS, "--tp-size", "8", "--attention-backend", "fa3"]),
    ("fa3-rtx4090", "rtx4090", [L8, "--attention-backend", "fa3"]),
    ("tokenspeed-mla-h200", "h200", [DS, "--tp-size", "8", "--attention-backend", "tokenspeed_mla"]),
    ("tokenspeed-mla-b200", "b200", [DS, "--tp-size", "8", "--attention-backend", "tokenspeed_mla"]),
    ("cutlass-mla-h200", "h200", [DS, "--tp-size", "8", "--attention-backend", "cutlass_mla"]),
    ("cutlass-mla-b200", "b200", [DS, "--tp-size", "8", "--attention-backend", "cutlass_mla"]),
    ("trtllm-mha-h100", "h100", [L8, "--attention-backend", "trtllm_mha"]),
    ("trtllm-mla-h200", "h200", [DS, "--tp-size", "8", "--attention-backend", "trtllm_mla"]),
    ("flashmla-mha", "h100", [L8, "--attention-backend", "flashmla"]),
    ("fa4-h100", "h100", [L8, "--attention-backend", "fa4"]),
    ("fa4-b200", "b200", [L8, "--attention-backend", "fa4"]),
    ("tp-heads-3", "h100", [L8, "--tp-size", "3"]),
    ("tp-heads-6", "h100", [Q8, "--tp-size", "6"]),
    ("tp-kv-heads-16", "h100", [L70, "--tp-size", "16", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "10.0.0.1:5000"]),
    ("tp-kv-heads-8-qwen30", "h100", [Q30, "--tp-size", "8"]),
    ("fit-70b-1gpu", "h100", [L70]),
    ("fit-70b-2gpu", "h100", [L70, "--tp-size", "2"]),
    ("fit-70b-fp8-1gpu", "h100", [L70, "--quantization", "fp8"]),
    ("fit-70b-offload", "h100", [L70, "--cpu-offload-gb", "100"]),
    ("fit-70b-pp2", "h100", [L70, "--pp-size", "2"]),
    ("fit-ds-8xh100", "h100", [DS, "--tp-size", "8"]),
    ("fit-ds-8xh200", "h200", [DS, "--tp-size", "8"]),
    ("fit-8b-l4", "l4", [L8]),
    ("fit-8b-a10g", "a10g", [L8]),
    ("fit-mixtral-1gpu", "h100", [MIX]),
    ("fit-mixtral-2gpu", "h100", [MIX, "--tp-size", "2"]),
    ("fit-235b-8xh100", "h100", [TARGETS[5], "--tp-size", "8"]),
    ("fit-gptoss-1gpu", "h100", [GPT]),
    ("world-tp16-1node", "h100", [L70, "--tp-size", "16"]),
    ("world-tp4-pp4", "h100", [L70, "--tp-size", "4", "--pp-size", "4"]),
    ("world-tp2-2nodes", "h100", [L70, "--tp-size", "16", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "10.0.0.1:5000"]),
    ("world-dp-tp", "h100", [L8, "--tp-size", "4", "--dp-size", "4"]),
    ("draft-eagle-none", "h100", [L8, "--speculative-algorithm", "EAGLE"]),
    ("draft-eagle3-none", "h100", [L8, "--speculative-algorithm", "EAGLE3"]),
    ("draft-standalone-none", "h100", [L8, "--speculative-algorithm", "STANDALONE"]),
    ("draft-nextn-ds", "h200", [DS, "--tp-size", "8", "--speculative-algorithm", "EAGLE"]),
    ("nvfp4-online-h100", "h100", [L8, "--quantization", "nvfp4_online"]),
    ("nvfp4-online-b200", "b200", [L8, "--quantization", "nvfp4_online"]),
    ("fp4-kv-b200", "b200", [L8, "--kv-cache-dtype", "nvfp4"]),
    ("fp4-kv-h100", "h100", [L8, "--kv-cache-dtype", "nvfp4"]),
    # deliverable 4: catalog holes (current spellings)
    ("attn-dp-size", "h200", [DS, "--tp-size", "8", "--attn-dp-size", "8"]),
    ("cuda-graph-max-bs-decode", "h100", [L8, "--cuda-graph-max-bs-decode", "64"]),
    ("cuda-graph-max-bs-seed", "h100", [L8, "--cuda-graph-max-bs", "64"]),
]


def hand_cases() -> list[dict]:
    return [_case(f"h-{name}", preset, ["--model-path"] + argv) for name, preset, argv in HAND]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--random", type=int, default=400, help="random cases (default 400)")
    parser.add_argument("out")
    opts = parser.parse_args(argv)
    cases = hand_cases() + random_cases(opts.random, opts.seed)
    Path(opts.out).write_text(json.dumps(cases, indent=1, sort_keys=True) + "\n")
    print(f"{len(cases)} cases -> {opts.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
