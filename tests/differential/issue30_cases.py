"""The hand-written oracle checks of issue 30's rules (ids h30-*), one or more per rule.

Why: each rule issue 30 added or changed is checked against upstream SGLang 0.5.23 on commands made
for it: the commands upstream refuses and the nearby ones it runs. `python -m
tests.differential.issue30_cases OUT.json` writes them in the oracle's CASES format (a case may carry
`fact_overrides`, `--fact` words for Accord, with the same facts in the oracle's form); the fixture
tests/differential/fixtures/llm_oracle_issue30.json holds them with upstream's answers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.differential import gen_llm as g

L8, L70, Q8, Q30, Q235, GPT, DS = ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct",
                                   "Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B",
                                   "openai/gpt-oss-120b", "deepseek-ai/DeepSeek-V3")
E3 = g.DRAFTS["EAGLE3"]
CUDA_126 = ({"cuda": "12.6"}, ["cuda=12.6"])
ROWS = [
    ("ngram-h100-page16", "h100", [L8, "--speculative-algorithm", "NGRAM", "--page-size", "16"]),
    ("ngram-h100-page16-fi", "h100", [L8, "--speculative-algorithm", "NGRAM", "--page-size", "16", "--attention-backend", "flashinfer"]),
    ("ngram-h100-page16-triton", "h100", [L8, "--speculative-algorithm", "NGRAM", "--page-size", "16", "--attention-backend", "triton"]),
    ("ngram-h200-q235-page32", "h200", [Q235, "--tp-size", "8", "--speculative-algorithm", "NGRAM", "--page-size", "32"]),
    ("ngram-h100-breadth1-page16", "h100", [L8, "--speculative-algorithm", "NGRAM", "--page-size", "16", "--speculative-ngram-max-bfs-breadth", "1", "--speculative-ngram-min-bfs-breadth", "1"]),
    ("ngram-gptoss-b200", "b200", [GPT, "--tp-size", "4", "--speculative-algorithm", "NGRAM"]),
    ("ngram-gptoss-b200-triton", "b200", [GPT, "--tp-size", "4", "--speculative-algorithm", "NGRAM", "--attention-backend", "triton"]),
    ("ngram-gptoss-h100", "h100", [GPT, "--tp-size", "4", "--speculative-algorithm", "NGRAM"]),
    ("ngram-gptoss-h100-page16", "h100", [GPT, "--tp-size", "4", "--speculative-algorithm", "NGRAM", "--page-size", "16"]),
    ("ngram-a100-page16", "a100", [Q8, "--speculative-algorithm", "NGRAM", "--page-size", "16"]),
    ("ngram-b200-l8-page16", "b200", [L8, "--speculative-algorithm", "NGRAM", "--page-size", "16"]),
    ("eagle-ds-b200-topk4", "b200", [DS, "--tp-size", "8", "--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "4"]),
    ("nextn-ds-b200-topk2", "b200", [DS, "--tp-size", "8", "--speculative-algorithm", "NEXTN", "--speculative-eagle-topk", "2", "--speculative-num-steps", "3"]),
    ("gptoss-phase-decode-triton", "h100", [GPT, "--tp-size", "4", "--decode-attention-backend", "triton"]),
    ("gptoss-phase-prefill-fa3", "h100", [GPT, "--tp-size", "4", "--prefill-attention-backend", "fa3"]),
    ("gptoss-phase-decode-triton-b200", "b200", [GPT, "--tp-size", "4", "--decode-attention-backend", "triton"]),
    ("gptoss-phase-both-triton", "h100", [GPT, "--tp-size", "4", "--prefill-attention-backend", "triton", "--decode-attention-backend", "triton"]),
    ("gptoss-phase-mixed", "h100", [GPT, "--tp-size", "4", "--prefill-attention-backend", "fa3", "--decode-attention-backend", "triton"]),
    ("gptoss-phase-decode-with-attn", "h100", [GPT, "--tp-size", "4", "--attention-backend", "triton", "--decode-attention-backend", "fa3"]),
    ("gptoss-mxfp4-b200-cuda126", "b200", [GPT, "--tp-size", "4", "--attention-backend", "triton"], *CUDA_126),
    ("gptoss-mxfp4-b200-cuda128", "b200", [GPT, "--tp-size", "4"]),
    ("ep8-tp2-q30", "h100", [Q30, "--tp-size", "2", "--ep-size", "8"]),
    ("ep8-tp4-q235", "h200", [Q235, "--tp-size", "4", "--ep-size", "8"]),
    ("ep2-tp1-gptoss", "h200", [GPT, "--ep-size", "2"]),
    ("ep4-tp4-q30", "h100", [Q30, "--tp-size", "4", "--ep-size", "4"]),
    ("kv-mxblock16-h100-triton", "h100", [Q8, "--kv-cache-dtype", "fp4_mx_block16", "--attention-backend", "triton"]),
    ("kv-mxblock16-h100", "h100", [Q8, "--kv-cache-dtype", "fp4_mx_block16"]),
    ("kv-mxblock16-l40s-triton", "l40s", [Q8, "--kv-cache-dtype", "fp4_mx_block16", "--attention-backend", "triton"]),
    ("kv-mxblock16-l40s", "l40s", [Q8, "--kv-cache-dtype", "fp4_mx_block16"]),
    ("kv-nvfp4-h100-triton", "h100", [Q8, "--kv-cache-dtype", "nvfp4", "--attention-backend", "triton"]),
    ("kv-nvfp4-b200", "b200", [Q8, "--kv-cache-dtype", "nvfp4"]),
    ("kv-nvfp4-b200-cuda126", "b200", [Q8, "--kv-cache-dtype", "nvfp4", "--attention-backend", "trtllm_mha"], *CUDA_126),
    ("kv-mxblock16-ds-h200", "h200", [DS, "--tp-size", "8", "--kv-cache-dtype", "fp4_mx_block16", "--attention-backend", "flashinfer"]),
    ("fa3-e5m2-h100", "h100", [L8, "--attention-backend", "fa3", "--kv-cache-dtype", "fp8_e5m2"]),
    ("fa3-e5m2-h100-q8", "h100", [Q8, "--kv-cache-dtype", "fp8_e5m2"]),
    ("fa3-e5m2-ds-h200", "h200", [DS, "--tp-size", "8", "--kv-cache-dtype", "fp8_e5m2"]),
    ("fa3-e5m2-gptoss-h100", "h100", [GPT, "--tp-size", "4", "--kv-cache-dtype", "fp8_e5m2"]),
    ("equal-phases-triton-h100", "h100", [L8, "--prefill-attention-backend", "triton", "--decode-attention-backend", "triton"]),
    ("equal-phases-fa3-h100-spec", "h100", [L8, "--prefill-attention-backend", "fa3", "--decode-attention-backend", "fa3", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", E3]),
    ("equal-phases-fi-b200", "b200", [L8, "--prefill-attention-backend", "flashinfer", "--decode-attention-backend", "flashinfer", "--page-size", "16"]),
    ("equal-phases-triton-ds", "h200", [DS, "--tp-size", "8", "--prefill-attention-backend", "triton", "--decode-attention-backend", "triton"]),
    ("det-flashinfer-h100", "h100", [L8, "--enable-deterministic-inference", "--attention-backend", "flashinfer"]),
    ("det-trtllm-b200", "b200", [L8, "--enable-deterministic-inference", "--attention-backend", "trtllm_mha"]),
    ("det-torch-native", "h100", [L8, "--enable-deterministic-inference", "--attention-backend", "torch_native"]),
    ("det-flex", "h100", [L8, "--enable-deterministic-inference", "--attention-backend", "flex_attention"]),
    ("det-phases-fi", "h100", [L8, "--enable-deterministic-inference", "--prefill-attention-backend", "flashinfer", "--decode-attention-backend", "flashinfer"]),
    ("det-decode-fi", "h100", [L8, "--enable-deterministic-inference", "--decode-attention-backend", "flashinfer"]),
    ("det-a100", "a100", [L8, "--enable-deterministic-inference"]),
    ("det-l40s-triton", "l40s", [Q8, "--enable-deterministic-inference", "--attention-backend", "triton"]),
    ("w8a8-eagle3-dp", "h100", [L8, "--tp-size", "2", "--dp-size", "2", "--enable-dp-attention", "--quantization", "w8a8_int8", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", E3]),
    ("w8a8fp8-eagle3-dp", "h100", [L8, "--tp-size", "2", "--dp-size", "2", "--enable-dp-attention", "--quantization", "w8a8_fp8", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", E3]),
    ("abbrev-spec-algo", "h100", [L8, "--speculative-algo", "EAGLE3", "--speculative-draft-model-path", E3]),
    ("abbrev-mem-frac", "h100", [L8, "--mem-frac", "0.8"]),
    ("abbrev-ambiguous-spec", "h100", [L8, "--speculative-num", "3"]),
    ("abbrev-trust", "h100", [L8, "--trust-remote"]),
]


def cases() -> list[dict]:
    out = []
    for cid, preset, argv, *override in ROWS:
        case = g._case("h30-" + cid, preset, ["--model-path"] + argv)
        if override:
            case["facts"].update(override[0])
            case["fact_overrides"] = override[1]
        out.append(case)
    return out


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(cases(), indent=1))
    print(f"{len(cases())} cases -> {sys.argv[1]}")
