"""Real LLM launch commands, resolved end to end against machine presets and model configs.

Each row is a command from upstream SGLang's docs, tests or a model card (cited per row), run on a
preset machine with the model's config.json (written to a temporary folder, so the facts layer
reads real model facts), and the values upstream SGLang 0.5.23 would resolve for it, worked out by
hand from ../shared/reference/upstream_rules.md. A row either expects resolved values or a
conflict naming given flags; where Accord differs from upstream on purpose (it never rewrites what
the user typed) the row says so.

Memory budgets (mem_fraction_static) follow upstream memory_hook.py:281-339 in MiB, with M = GPU
memory (preset GiB x 1024), chunk = chunked_prefill_size, bs = decode CUDA-graph max batch:
    reserved = max(512 + 1.5 * max(chunk, 2048) + tp*pp/8*1024 + 2*bs + 8*n_prefill, 10240)
    mem_fraction_static = round((M - reserved) / M, 3)
where n_prefill = number of captured prefill sizes up to the prefill graph limit (50 for 4096,
58 for 8192, 74 for 16384), or 1536 MiB flat instead of 8*n_prefill for MLA models.
"""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest

from accord.resolver.api import ConflictError, resolve
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.facts.machine import load_facts

# --- model configs (abridged HF config.json files: the fields the model facts read) ---------------

MODELS = {
    "Meta-Llama-3.1-8B-Instruct": {
        "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 32, "max_position_embeddings": 131072,
        "vocab_size": 128256, "torch_dtype": "bfloat16"},
    "Meta-Llama-3.1-70B-Instruct": {
        "architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "num_attention_heads": 64,
        "num_key_value_heads": 8, "num_hidden_layers": 80, "max_position_embeddings": 131072,
        "vocab_size": 128256, "torch_dtype": "bfloat16"},
    "Llama-2-7b-chat-hf": {
        "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 32, "num_hidden_layers": 32, "max_position_embeddings": 4096,
        "vocab_size": 32000, "torch_dtype": "float16"},
    "Meta-Llama-3.1-8B-Instruct-FP8": {
        "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 32, "max_position_embeddings": 131072,
        "vocab_size": 128256, "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}},
    "Qwen2.5-7B-Instruct-AWQ": {
        "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "num_attention_heads": 28,
        "num_key_value_heads": 4, "num_hidden_layers": 28, "max_position_embeddings": 32768,
        "vocab_size": 152064, "torch_dtype": "float16",
        "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}},
    "Qwen3-30B-A3B": {
        "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "num_attention_heads": 32,
        "num_key_value_heads": 4, "num_hidden_layers": 48, "num_experts": 128,
        "max_position_embeddings": 40960, "vocab_size": 151936, "torch_dtype": "bfloat16"},
    "Qwen3-Next-80B-A3B-Instruct": {
        "architectures": ["Qwen3NextForCausalLM"], "hidden_size": 2048, "num_attention_heads": 16,
        "num_key_value_heads": 2, "num_hidden_layers": 48, "num_experts": 512,
        "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "max_position_embeddings": 262144,
        "vocab_size": 151936, "torch_dtype": "bfloat16"},
    "DeepSeek-V3": {
        "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_attention_heads": 128,
        "num_key_value_heads": 128, "num_hidden_layers": 61, "n_routed_experts": 256,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "max_position_embeddings": 163840, "vocab_size": 129280, "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}},
    "DeepSeek-V3.2-Exp": {
        "architectures": ["DeepseekV32ForCausalLM"], "hidden_size": 7168, "num_attention_heads": 128,
        "num_key_value_heads": 128, "num_hidden_layers": 61, "n_routed_experts": 256,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "index_topk": 2048,
        "max_position_embeddings": 163840, "vocab_size": 129280, "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}},
    "gpt-oss-120b": {
        "architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "num_attention_heads": 64,
        "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 36, "num_local_experts": 128,
        "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18,
        "max_position_embeddings": 131072, "vocab_size": 201088, "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "mxfp4"}},
    "whisper-large-v3": {
        "architectures": ["WhisperForConditionalGeneration"], "d_model": 1280,
        "encoder_attention_heads": 20, "decoder_attention_heads": 20, "num_hidden_layers": 32,
        "is_encoder_decoder": True, "num_mel_bins": 128, "max_target_positions": 448,
        "vocab_size": 51866, "torch_dtype": "float16"},
}


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    source: str          # where the command comes from
    preset: str          # machine preset (rules/facts/<preset>.yaml)
    argv: str            # the launch flags; {model:NAME} is replaced by that model's folder
    expect: dict = dataclasses.field(default_factory=dict)      # resolved values
    conflict: tuple = ()  # flags a conflict must name (the launch must not resolve)
    fact: tuple = ()      # extra --fact overrides
    note: str = ""        # why the expectation is what it is, when it is not obvious

    @property
    def is_conflict(self) -> bool:
        return bool(self.conflict)


DOCS = "docs.sglang.io"
QUICKSTART = f"{DOCS} basic_usage/send_request (launch_server --model-path meta-llama/Meta-Llama-3.1-8B-Instruct)"
SPEC = f"{DOCS} advanced_features/speculative_decoding"
DEEPSEEK = f"{DOCS} basic_usage/deepseek (DeepSeek V3 on 8 GPUs)"
DSV32 = f"{DOCS} basic_usage/deepseek_v32 (DeepSeek-V3.2 with DP attention)"
GPTOSS = f"{DOCS} basic_usage/gpt_oss (launch_server --model openai/gpt-oss-120b --tp 4)"
QWEN3_NEXT = "huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct model card (SGLang deployment)"
QUANT_KV = f"{DOCS} advanced_features/quantized_kv_cache"
DETERMINISTIC = f"{DOCS} advanced_features/deterministic_inference"
HICACHE = f"{DOCS} advanced_features/hicache (--enable-hierarchical-cache)"
ARGS = f"{DOCS} advanced_features/server_arguments"
UPSTREAM = "upstream_rules.md"

ROWS = [
    # --- a dense Llama on every kind of machine (the default backend table, AT2-AT9; tiers ME1) ---
    Row("llama8b-h100", QUICKSTART, "h100", "--model-path {model:Meta-Llama-3.1-8B-Instruct}",
        {"attention_backend": "fa3", "page_size": 1, "chunked_prefill_size": 8192,
         "cuda_graph_max_bs_decode": 256, "cuda_graph_max_bs_prefill": 8192,
         "cuda_graph_backend_decode": "full", "cuda_graph_backend_prefill": "breakable",
         "sampling_backend": "flashinfer", "dtype": "bfloat16", "context_length": 131072,
         # M = 81510.4; reserved = 512 + 12288 + 128 + 512 + 8*58 = 13904 -> 0.829
         "mem_fraction_static": 0.829}),
    Row("llama8b-h200", QUICKSTART, "h200", "--model-path {model:Meta-Llama-3.1-8B-Instruct}",
        {"attention_backend": "fa3", "chunked_prefill_size": 8192, "cuda_graph_max_bs_decode": 256,
         # M = 143769.6; reserved 13904 -> 0.903
         "mem_fraction_static": 0.903}),
    Row("llama8b-b200", QUICKSTART, "b200", "--model-path {model:Meta-Llama-3.1-8B-Instruct}",
        {"attention_backend": "trtllm_mha", "page_size": 64, "chunked_prefill_size": 16384,
         "cuda_graph_max_bs_decode": 512, "bf16_gemm_backend": "cutedsl",
         # M = 183398.4; reserved = 512 + 24576 + 128 + 1024 + 8*74 = 26832 -> 0.854
         "mem_fraction_static": 0.854}),
    Row("llama8b-gb200", QUICKSTART, "gb200", "--model-path {model:Meta-Llama-3.1-8B-Instruct}",
        {"attention_backend": "trtllm_mha", "page_size": 64, "chunked_prefill_size": 16384,
         "cuda_graph_max_bs_decode": 512}),
    Row("llama8b-b200-cuda126", UPSTREAM + " section 2 (SM100 with CUDA 12.6 is not SM100)", "b200",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct}",
        {"attention_backend": "flashinfer", "page_size": 1, "bf16_gemm_backend": "cutedsl"},
        fact=("cuda=12.6",), note="trtllm_mha needs is_sm100 (CUDA >= 12.8); the raw-SM bf16 rule still applies"),
    Row("llama8b-a100", QUICKSTART, "a100", "--model-path {model:Meta-Llama-3.1-8B-Instruct}",
        {"attention_backend": "flashinfer", "chunked_prefill_size": 8192, "cuda_graph_max_bs_decode": 256,
         # M = 81920; reserved 13904 -> 0.830
         "mem_fraction_static": 0.83}),
    Row("llama8b-l40s", QUICKSTART, "l40s", "--model-path {model:Meta-Llama-3.1-8B-Instruct}",
        {"attention_backend": "flashinfer", "chunked_prefill_size": 4096, "cuda_graph_max_bs_decode": 32}),
    Row("llama8b-a10g", QUICKSTART, "a10g", "--model-path {model:Meta-Llama-3.1-8B-Instruct}",
        {"attention_backend": "flashinfer", "chunked_prefill_size": 4096, "cuda_graph_max_bs_decode": 48,
         # M = 23040; reserved = 512 + 6144 + 128 + 96 + 8*50 = 7280 (no floor below 60 GiB) -> 0.684
         "mem_fraction_static": 0.684}),
    Row("llama8b-l4", QUICKSTART, "l4", "--model-path {model:Meta-Llama-3.1-8B-Instruct}",
        {"attention_backend": "flashinfer", "chunked_prefill_size": 4096, "cuda_graph_max_bs_decode": 48}),
    Row("llama8b-rtx4090", QUICKSTART, "rtx4090", "--model-path {model:Meta-Llama-3.1-8B-Instruct}",
        {"attention_backend": "flashinfer", "chunked_prefill_size": 4096, "cuda_graph_max_bs_decode": 48}),
    Row("llama8b-rtx5090", QUICKSTART + "; upstream: trtllm_mha does not cover SM120", "rtx5090",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct}",
        {"attention_backend": "flashinfer", "page_size": 1, "chunked_prefill_size": 4096,
         "cuda_graph_max_bs_decode": 48}),
    Row("llama8b-mi300x", QUICKSTART + " (AMD)", "mi300x", "--model-path {model:Meta-Llama-3.1-8B-Instruct}",
        {"attention_backend": "aiter", "sampling_backend": "pytorch", "chunked_prefill_size": 16384,
         "cuda_graph_max_bs_decode": 512, "bf16_gemm_backend": "auto"}),
    Row("llama8b-cpu", f"{DOCS} platforms/cpu_server (launch_server on a CPU host)", "cpu",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct}",
        {"attention_backend": "torch_native", "prefill_attention_backend": "torch_native",
         "cuda_graph_backend_decode": "disabled", "cuda_graph_backend_prefill": "disabled",
         "chunked_prefill_size": 4096, "cuda_graph_max_bs_decode": 32, "mem_fraction_static": 0.95,
         "sampling_backend": "pytorch"},
        note="the CPU engine runs torch_native; intel_amx needs sgl-kernel's CPU build, absent here"),
    Row("tiny-cpu-default", "accord's built-in model (no --model-path)", "cpu", "",
        {"attention_backend": "torch_native", "page_size": 1, "cuda_graph_backend_decode": "disabled"}),
    Row("llama8b-tp2-h100", f"{ARGS} (--tp 2)", "h100", "--model-path {model:Meta-Llama-3.1-8B-Instruct} --tp 2",
        {"attention_backend": "fa3", "cuda_graph_max_bs_decode": 256,
         # reserved = 512 + 12288 + 256 + 512 + 464 = 14032 -> 0.828
         "mem_fraction_static": 0.828}),
    Row("llama70b-tp8-h100", f"{ARGS} (--tp 8 for a 70B model)", "h100",
        "--model-path {model:Meta-Llama-3.1-70B-Instruct} --tp 8",
        {"attention_backend": "fa3", "cuda_graph_max_bs_decode": 512,
         # reserved = 512 + 12288 + 1024 + 1024 + 464 = 15312 -> 0.812
         "mem_fraction_static": 0.812}),
    Row("llama70b-tp4-h200", f"{ARGS} (--tp 4)", "h200", "--model-path {model:Meta-Llama-3.1-70B-Instruct} --tp 4",
        {"attention_backend": "fa3", "chunked_prefill_size": 8192, "cuda_graph_max_bs_decode": 512}),
    Row("llama2-prefill-cap", UPSTREAM + " ME4 (a llama-2 model path caps the prefill graph at 4096)", "h100",
        "--model-path {model:Llama-2-7b-chat-hf}",
        {"cuda_graph_max_bs_prefill": 4096, "dtype": "float16", "context_length": 4096}),
    Row("llama8b-disable-cuda-graph", f"{ARGS} (--disable-cuda-graph)", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --disable-cuda-graph",
        {"cuda_graph_backend_decode": "disabled", "cuda_graph_backend_prefill": "disabled",
         # no graph reserve: 512 + 12288 + 128 = 12928 -> 0.841
         "mem_fraction_static": 0.841}),
    Row("llama8b-max-running", f"{ARGS} (--max-running-requests)", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --max-running-requests 64",
        {"cuda_graph_max_bs_decode": 64}, note="ME2: the decode graph never exceeds the running limit"),

    # --- speculative decoding (SP rules; AT4/AT5 read the *raw* top-k) ---
    Row("eagle3-llama8b-h100", SPEC + " (EAGLE-3 example, Llama-3.1-8B)", "h100",
        "--model {model:Meta-Llama-3.1-8B-Instruct} --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B "
        "--speculative-num-steps 5 --speculative-eagle-topk 8 --speculative-num-draft-tokens 32 "
        "--mem-fraction 0.6 --cuda-graph-max-bs 2 --dtype float16",
        {"attention_backend": "flashinfer", "speculative_draft_attention_backend": None,
         "max_running_requests": 48, "cuda_graph_max_bs_decode": 2, "mem_fraction_static": 0.6},
        note="an explicit top-k of 8 rules out fa3 (AT4); SP6 caps running requests at 48; "
             "0.5.23 leaves the EAGLE draft backend unset (oracle)"),
    Row("eagle2-llama2-h100", SPEC + " (EAGLE-2 example, Llama-2-7B chat)", "h100",
        "--model {model:Llama-2-7b-chat-hf} --speculative-algorithm EAGLE "
        "--speculative-draft-model-path lmsys/sglang-EAGLE-llama2-chat-7B --speculative-num-steps 3 "
        "--speculative-eagle-topk 4 --speculative-num-draft-tokens 16 --mem-fraction 0.6 --cuda-graph-max-bs 8",
        {"attention_backend": "flashinfer", "speculative_eagle_topk": 4, "cuda_graph_max_bs_decode": 8}),
    Row("eagle-auto-params-llama2-H100", UPSTREAM + " section 0 case eagle-auto-params-llama2-H100; "
        "upstream test_hopper_eagle_attention_backend.py", "h100",
        "--model {model:Llama-2-7b-chat-hf} --speculative-algorithm EAGLE "
        "--speculative-draft-model-path lmsys/sglang-EAGLE-llama2-chat-7B",
        {"attention_backend": "fa3", "speculative_num_steps": 5, "speculative_eagle_topk": 4,
         "speculative_num_draft_tokens": 8, "max_running_requests": 48},
        note="top-k is unset when the backend is chosen, so fa3 wins although auto params give top-k 4"),
    Row("eagle-auto-params-llama2-B200", UPSTREAM + " AT5 (no trtllm_mha for a pending EAGLE tree)", "b200",
        "--model {model:Llama-2-7b-chat-hf} --speculative-algorithm EAGLE "
        "--speculative-draft-model-path lmsys/sglang-EAGLE-llama2-chat-7B",
        {"attention_backend": "flashinfer", "speculative_eagle_topk": 4, "page_size": 1}),
    Row("eagle-chain-b200", SPEC + " (EAGLE with --speculative-eagle-topk 1)", "b200",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --speculative-algorithm EAGLE "
        "--speculative-draft-model-path lmsys/sglang-EAGLE-LLaMA3-Instruct-8B --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
        {"attention_backend": "trtllm_mha", "speculative_draft_attention_backend": None, "page_size": 64},
        note="0.5.23 leaves the EAGLE draft backend unset (oracle)"),
    Row("eagle-topk-without-steps", UPSTREAM + " SP9 (top-k without num-steps asserts)", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --speculative-algorithm EAGLE "
        "--speculative-draft-model-path lmsys/sglang-EAGLE-LLaMA3-Instruct-8B --speculative-eagle-topk 2",
        conflict=("speculative_eagle_topk",)),
    Row("eagle-chain-draft-tokens", UPSTREAM + " SP13 (chain draft tokens must be steps + 1)", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --speculative-algorithm EAGLE "
        "--speculative-draft-model-path lmsys/sglang-EAGLE-LLaMA3-Instruct-8B --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 8",
        conflict=("speculative_num_draft_tokens",),
        note="upstream rewrites draft tokens to 4 with a warning; Accord reports it, fix 4"),
    Row("ngram-h100", SPEC + " (NGRAM example)", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --speculative-algorithm NGRAM "
        "--speculative-num-draft-tokens 16",
        {"attention_backend": "fa3", "speculative_draft_attention_backend": None, "max_running_requests": 48},
        note="0.5.23 caps NGRAM running requests at 48 (speculative_hook.py:1294-1302, oracle)"),
    Row("ngram-mi300x", UPSTREAM + " SP15 (NGRAM only on CUDA, CPU, XPU)", "mi300x",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --speculative-algorithm NGRAM",
        conflict=("speculative_algorithm",)),
    Row("ngram-mixed-chunk", UPSTREAM + " SP7 (mixed chunk off for non-EAGLE3 drafters)", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --speculative-algorithm NGRAM --enable-mixed-chunk",
        conflict=("enable_mixed_chunk",)),
    Row("standalone-dp-attention", UPSTREAM + " SP5", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --speculative-algorithm STANDALONE "
        "--speculative-draft-model-path meta-llama/Llama-3.2-1B-Instruct --tp 2 --dp 2 --enable-dp-attention",
        conflict=("speculative_algorithm", "enable_dp_attention")),

    # --- DeepSeek (MLA, MTP, DSA) ---
    Row("deepseek-v3-h200", DEEPSEEK, "h200", "--model {model:DeepSeek-V3} --tp 8 --trust-remote-code",
        {"attention_backend": "fa3", "page_size": 1, "quantization": "fp8", "fp8_gemm_runner_backend": "deep_gemm",
         "chunked_prefill_size": 8192, "cuda_graph_max_bs_decode": 512, "cuda_graph_max_bs_prefill": 8192,
         "disable_chunked_prefix_cache": False,
         # M = 143769.6; reserved = 512 + 12288 + 1024 + 1024 + 1536 (MLA) = 16384 -> 0.886
         "mem_fraction_static": 0.886}),
    Row("deepseek-v3-b200", DEEPSEEK + "; upstream AT8 (trtllm_mla on SM100), AT21", "b200",
        "--model {model:DeepSeek-V3} --tp 8 --trust-remote-code",
        {"attention_backend": "trtllm_mla", "page_size": 64, "cuda_graph_backend_prefill": "disabled",
         "chunked_prefill_size": 16384, "cuda_graph_max_bs_prefill": 8192}),
    Row("deepseek-v3-mtp-h200", DEEPSEEK + " (MTP: EAGLE 3/1/4 without a draft model)", "h200",
        "--model {model:DeepSeek-V3} --tp 8 --trust-remote-code --speculative-algorithm EAGLE "
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
        {"attention_backend": "fa3", "speculative_draft_model_path": "{model:DeepSeek-V3}",
         "max_running_requests": 48, "speculative_draft_model_quantization": "fp8"},
        note="SP8: DeepSeek carries its MTP layers, so the draft path is the model path"),
    Row("deepseek-v3-mtp-auto-h200", UPSTREAM + " SP9 (DeepSeek auto params 3/1/4)", "h200",
        "--model {model:DeepSeek-V3} --tp 8 --speculative-algorithm EAGLE",
        {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}),
    Row("deepseek-v3-deterministic-b200", DETERMINISTIC + "; upstream DE2/DE3 (triton for DeepSeek on SM100)",
        "b200", "--model {model:DeepSeek-V3} --tp 8 --enable-deterministic-inference",
        {"attention_backend": "triton", "disable_radix_cache": False, "sampling_backend": "pytorch",
         "disable_custom_all_reduce": True, "bf16_gemm_backend": "torch", "page_size": 1},
        note="upstream errors here (its DeepSeek override picked trtllm_mla first); Accord decides the deterministic backend first"),
    Row("deepseek-v32-dp-h200", DSV32, "h200",
        "--model {model:DeepSeek-V3.2-Exp} --tp 8 --dp 8 --enable-dp-attention",
        {"attention_backend": "dsa", "kv_cache_dtype": "bfloat16", "dsa_prefill_backend": "flashmla_sparse",
         "dsa_decode_backend": "fa3", "dsa_paged_mqa_logits_backend": "deepgemm", "chunked_prefill_size": 1024}),
    Row("deepseek-v32-b200", DSV32 + "; upstream AT24 (FP8 KV on SM100+)", "b200",
        "--model {model:DeepSeek-V3.2-Exp} --tp 8",
        {"attention_backend": "dsa", "kv_cache_dtype": "fp8_e4m3", "dsa_prefill_backend": "trtllm",
         "dsa_decode_backend": "trtllm"}),

    # --- other model families ---
    Row("gpt-oss-h100", GPTOSS, "h100", "--model {model:gpt-oss-120b} --tp 4",
        {"attention_backend": "fa3", "quantization": "mxfp4", "cuda_graph_max_bs_decode": 512}),
    Row("gpt-oss-a100", GPTOSS + "; upstream AT6 (no flashinfer for attention sinks)", "a100",
        "--model {model:gpt-oss-120b} --tp 4", {"attention_backend": "triton", "page_size": 1}),
    Row("gpt-oss-b200", GPTOSS, "b200", "--model {model:gpt-oss-120b} --tp 4",
        {"attention_backend": "trtllm_mha", "page_size": 64}),
    Row("qwen3-next-h100", QWEN3_NEXT, "h100",
        "--model-path {model:Qwen3-Next-80B-A3B-Instruct} --port 30000 --tp-size 4 --context-length 262144 "
        "--mem-fraction-static 0.8",
        {"attention_backend": "fa3", "mamba_radix_cache_strategy": "no_buffer",
         "linear_attn_decode_backend": "triton", "linear_attn_prefill_backend": "triton",
         "context_length": 262144, "mem_fraction_static": 0.8}),
    Row("qwen3-next-mtp-h100", QWEN3_NEXT + " (MTP with NEXTN)", "h100",
        "--model-path {model:Qwen3-Next-80B-A3B-Instruct} --tp-size 4 --context-length 262144 "
        "--mem-fraction-static 0.8 --speculative-algorithm NEXTN --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
        # Upstream resolves NEXTN to EAGLE and leaves the draft path unset for Qwen3-Next (not in
        # speculative_hook.py:_handle_eagle_family's list); the draft worker loads the target itself.
        {"speculative_algorithm": "EAGLE", "speculative_draft_model_path": None,
         "linear_attn_verify_backend": "triton", "max_running_requests": 48}),
    Row("qwen3-moe-h100", f"{DOCS} basic_usage/qwen3 (launch_server --model Qwen/Qwen3-30B-A3B --tp 2)", "h100",
        "--model {model:Qwen3-30B-A3B} --tp 2", {"attention_backend": "fa3", "chunked_prefill_size": 8192}),
    Row("whisper-h100", f"{DOCS} supported_models (Whisper speech recognition)", "h100",
        "--model-path {model:whisper-large-v3}",
        {"attention_backend": "flashinfer", "disable_radix_cache": True, "dtype": "float16"}),
    Row("awq-qwen-l4", f"{DOCS} advanced_features/quantization (pre-quantized AWQ checkpoint)", "l4",
        "--model-path {model:Qwen2.5-7B-Instruct-AWQ}",
        {"quantization": "awq", "dtype": "float16", "attention_backend": "flashinfer"}),
    Row("fp8-llama-h100", f"{DOCS} advanced_features/quantization (FP8 checkpoint)", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct-FP8}",
        {"quantization": "fp8", "fp8_gemm_runner_backend": "deep_gemm"}),
    Row("online-gptq", f"{DOCS} advanced_features/quantization (online quantization methods)", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --quantization gptq", conflict=("quantization",),
        note="GPTQ needs a pre-quantized checkpoint"),

    # --- KV cache dtypes ---
    Row("kv-fp8-e5m2-h100", QUANT_KV + "; upstream AT17", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --kv-cache-dtype fp8_e5m2",
        {"attention_backend": "triton", "page_size": 1}),
    Row("kv-fp8-e5m2-fa3", QUANT_KV + "; upstream AT17 (explicit fa3 is overridden upstream)", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --attention-backend fa3 --kv-cache-dtype fp8_e5m2",
        conflict=("attention_backend", "kv_cache_dtype")),
    Row("kv-fp8-e4m3-h100", QUANT_KV, "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --kv-cache-dtype fp8_e4m3",
        {"attention_backend": "fa3", "speculative_draft_kv_cache_dtype": None}),
    Row("kv-nvfp4-b200", QUANT_KV + " (NVFP4 KV); upstream KV2/KV4", "b200",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --kv-cache-dtype nvfp4",
        {"prefill_attention_backend": "trtllm_mha", "decode_attention_backend": "trtllm_mha", "page_size": 64}),
    Row("kv-nvfp4-rtx5090", QUANT_KV + "; upstream KV2 (FP8 dequant prefill without SM100)", "rtx5090",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --kv-cache-dtype nvfp4",
        {"prefill_attention_backend": "flashinfer", "decode_attention_backend": "trtllm_mha", "page_size": 64}),
    Row("kv-nvfp4-h100", UPSTREAM + " KV6 (FP4 KV needs SM100/SM120)", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --kv-cache-dtype nvfp4", conflict=("kv_cache_dtype",)),
    Row("kv-nvfp4-b200-cuda126", UPSTREAM + " section 2 (nvfp4 fails on SM100 with CUDA 12.6)", "b200",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --kv-cache-dtype nvfp4", conflict=("kv_cache_dtype",),
        fact=("cuda=12.6",)),

    # --- deterministic inference ---
    Row("deterministic-h100", DETERMINISTIC + " (--attention-backend fa3 --enable-deterministic-inference)", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --attention-backend fa3 --enable-deterministic-inference",
        {"sampling_backend": "pytorch", "disable_radix_cache": False}),
    Row("deterministic-flashinfer-b200", DETERMINISTIC + "; upstream DE4 (radix cache off for flashinfer)", "b200",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --attention-backend flashinfer --enable-deterministic-inference",
        {"disable_radix_cache": True, "sampling_backend": "pytorch"}),
    Row("deterministic-trtllm-b200", UPSTREAM + " DE2 (trtllm_mha is not batch-invariant)", "b200",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --attention-backend trtllm_mha --enable-deterministic-inference",
        conflict=("attention_backend", "enable_deterministic_inference")),

    # --- page sizes, CUDA graphs, caches ---
    Row("page1-b200", UPSTREAM + " AT13 (upstream keeps its default trtllm_mha and rewrites the page size; oracle r13-0395)", "b200",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --page-size 1",
        conflict=("page_size",),
        note="the default kernel follows upstream; the typed page size it cannot take is a conflict (--relax: 64)"),
    Row("page1-b200-flashinfer", UPSTREAM + " AT13 (a named kernel that takes page size 1)", "b200",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --page-size 1 --attention-backend flashinfer",
        {"attention_backend": "flashinfer", "page_size": 1}),
    Row("trtllm-page1-b200", UPSTREAM + " AT13", "b200",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --attention-backend trtllm_mha --page-size 1",
        conflict=("page_size",)),
    Row("torch-native-h100", UPSTREAM + " AT10 (torch_native disables CUDA graphs)", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --attention-backend torch_native",
        {"cuda_graph_backend_decode": "disabled", "cuda_graph_backend_prefill": "disabled"}),
    Row("torch-native-full-graph", UPSTREAM + " AT10", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --attention-backend torch_native --cuda-graph-backend-decode full",
        conflict=("cuda_graph_backend_decode",)),
    Row("mis-h100", f"{ARGS} (--enable-mis)", "h100", "--model-path {model:Meta-Llama-3.1-8B-Instruct} --enable-mis",
        {"attention_backend": "flashinfer", "chunked_prefill_size": -1, "disable_radix_cache": True,
         "cuda_graph_backend_decode": "disabled"}),
    Row("hicache-h100", HICACHE, "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --enable-hierarchical-cache",
        {"hicache_ratio": 2.0, "disable_radix_cache": False}),
    Row("hicache-no-radix", UPSTREAM + " MI3", "h100",
        "--model-path {model:Meta-Llama-3.1-8B-Instruct} --enable-hierarchical-cache --disable-radix-cache",
        conflict=("enable_hierarchical_cache", "disable_radix_cache")),
]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("models")
    dirs = {}
    for name, config in MODELS.items():
        folder = root / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        dirs[name] = str(folder)
    return dirs


def _fill(text: str, dirs: dict[str, str]):
    if not isinstance(text, str):
        return text
    for name, path in dirs.items():
        text = text.replace("{model:" + name + "}", shlex.quote(path) if " " in path else path)
    return text


def test_table_is_broad():
    """The table spans presets, model families and both outcomes, so it keeps testing the rules."""
    assert len(ROWS) >= 45
    assert len({row.id for row in ROWS}) == len(ROWS)
    assert len({row.preset for row in ROWS}) >= 10
    assert sum(row.is_conflict for row in ROWS) >= 10
    assert all(row.source for row in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_launch_resolves_like_upstream(row: Row, model_dirs):
    _, parsed = parse_flags(shlex.split(_fill(row.argv, model_dirs)), system="llm")
    facts = load_facts(row.preset, list(row.fact), model_path=parsed.user.get("model_path"), system="llm")
    try:
        config = resolve("llm", parsed.user, facts, parsed.sources)
    except ConflictError as err:
        assert row.is_conflict, f"{row.id}: unexpected conflict: {err.text()}"
        named = {flag for conflict in err.conflicts for flag in conflict.flags}
        missing = set(row.conflict) - named
        assert not missing, f"{row.id}: conflict does not name {sorted(missing)}: {err.text()}"
        return
    assert not row.is_conflict, f"{row.id}: resolved, but a conflict naming {row.conflict} was expected"
    got = {flag: config.values[flag] for flag in row.expect}
    want = {flag: _fill(value, model_dirs) for flag, value in row.expect.items()}
    assert got == want, f"{row.id} ({row.source}): {row.note}"
