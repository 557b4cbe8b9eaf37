"""A small, fixed catalog and rule set that exercises every solver mechanism.

Tests of the generic resolver use this instead of the real SGLang rules, so they protect the
mechanism (prefer, default, require, conflict, warn, fixes) and do not move when the data does.
"""

from pathlib import Path

import yaml

from accord.resolver.language.catalog import load_catalog
from accord.resolver.language.ruleset import load_rules
from accord.resolver.solving.solve import Plan

CATALOG = {"group": "toy", "flags": [
    {"name": "tp_size", "flags": ["--tp-size"], "type": "int", "default": 1},
    {"name": "dp_size", "flags": ["--dp-size"], "type": "int", "default": 1},
    {"name": "nnodes", "flags": ["--nnodes"], "type": "int", "default": 1},
    {"name": "enable_dp_attention", "flags": ["--enable-dp-attention"], "type": "bool", "default": False},
    {"name": "attention_backend", "flags": ["--attention-backend"], "type": "enum", "nullable": True,
     "choices": ["fa3", "flashinfer", "triton", "torch_native"], "default": None},
    {"name": "page_size", "flags": ["--page-size"], "type": "int", "nullable": True, "default": None},
    {"name": "chunked_prefill_size", "flags": ["--chunked-prefill-size"], "type": "int", "nullable": True,
     "default": None},
    {"name": "kv_cache_dtype", "flags": ["--kv-cache-dtype"], "type": "enum",
     "choices": ["auto", "fp8_e4m3", "fp4_e2m1"], "default": "auto"},
    {"name": "sampling_backend", "flags": ["--sampling-backend"], "type": "enum", "nullable": True,
     "choices": ["flashinfer", "pytorch"], "default": None},
]}

RULES = {"area": "toy", "rules": [
    {"id": "par.dp_attention.divides", "kind": "require", "when": "enable_dp_attention",
     "require": "tp_size % dp_size == 0", "reason": "DP attention splits the TP group.",
     "fix": {"dp_size": "tp_size"}},
    {"id": "par.world_size.fits", "kind": "require",
     "require": "platform == 'cpu' or (1 if enable_dp_attention else dp_size) * tp_size <= gpu.count * nnodes",
     "reason": "every rank needs a GPU."},
    {"id": "attn.backend.order", "kind": "prefer", "flag": "attention_backend", "reason": "speed order",
     "when": "platform == 'cuda'",
     "values": [{"value": "fa3", "when": "gpu.sm == 90"}, "flashinfer", "triton"]},
    {"id": "attn.backend.cpu", "kind": "prefer", "flag": "attention_backend", "reason": "only one on CPU",
     "values": ["torch_native"]},
    {"id": "attn.fa3.hopper", "kind": "require", "when": "attention_backend == 'fa3'",
     "require": "gpu.sm == 90", "reason": "FA3 kernels are built for Hopper."},
    {"id": "attn.flashinfer.page", "kind": "conflict",
     "when": "attention_backend == 'flashinfer' and page_size == 7", "reason": "odd pages unsupported."},
    {"id": "page.by_backend", "kind": "default", "flag": "page_size", "reason": "backend page size",
     "when": "attention_backend == 'triton'", "value": 16},
    {"id": "mem.chunk.tier", "kind": "default", "flag": "chunked_prefill_size", "reason": "memory tier",
     "when": "gpu.mem_gib >= 60", "value": "8192 if tp_size < 4 else 16384"},
    {"id": "kv.fp4.blackwell", "kind": "require", "when": "kv_cache_dtype == 'fp4_e2m1'",
     "require": "gpu.sm in (100, 120) and version(cuda) >= version('12.8')",
     "reason": "FP4 KV needs Blackwell and CUDA 12.8."},
    {"id": "sampling.order", "kind": "prefer", "flag": "sampling_backend", "reason": "fast first",
     "values": [{"value": "flashinfer", "when": "known(packages.flashinfer)"}, "pytorch"]},
    {"id": "model.heads.divide", "kind": "require", "require": "model.num_attention_heads % tp_size == 0",
     "reason": "heads are split across TP ranks."},
    {"id": "kv.fp8.warn", "kind": "warn", "when": "kv_cache_dtype == 'fp8_e4m3'",
     "message": "FP8 KV without scales uses 1.0."},
]}

H100 = {"platform": "cuda", "gpu.sm": 90, "gpu.count": 8, "gpu.mem_gib": 80, "cuda": "12.8",
        "packages.flashinfer": "0.6.18"}
B200 = {**H100, "gpu.sm": 100, "gpu.mem_gib": 180}
CPU = {"platform": "cpu", "gpu.count": 0, "cuda": None}
# A command that breaks two toy rules at once on B200 (DP attention with dp 3 of tp 8; fa3 off Hopper).
TWO_CONFLICTS = {"tp_size": 8, "dp_size": 3, "enable_dp_attention": True, "attention_backend": "fa3"}


def write_toy(root: Path) -> Path:
    (root / "llm").mkdir(parents=True, exist_ok=True)
    (root / "llm" / "flags.yaml").write_text(yaml.safe_dump(CATALOG))
    (root / "llm" / "toy.yaml").write_text(yaml.safe_dump(RULES, sort_keys=False))
    return root


def toy_plan(root: Path) -> Plan:
    write_toy(root)
    return Plan(load_catalog("llm", root), load_rules("llm", root))


# The toy with choice metadata (`choice_meta`): what each attention kernel is built for, read by
# rules as `meta(attention_backend).vendor` and `meta(attention_backend).sms`.
KERNEL_META = {
    "properties": {
        "vendor": {"default": None, "about": "The hardware vendor the kernel is built for."},
        "sms": {"default": None, "about": "The compute capabilities it has kernels for (null: any)."},
    },
    "choices": {"fa3": {"vendor": "nvidia", "sms": [90]}, "flashinfer": {"vendor": "nvidia", "sms": [90, 100]}},
}
META_RULES = [
    {"id": "attn.vendor.nvidia", "kind": "require", "when": "meta(attention_backend).vendor == 'nvidia'",
     "require": "platform == 'cuda'", "reason": "These kernels are built for NVIDIA GPUs only."},
    {"id": "attn.sm.listed", "kind": "require", "when": "meta(attention_backend).sms is not None",
     "require": "gpu.sm in meta(attention_backend).sms", "reason": "The kernel has no build for this GPU."},
]
A100 = {**H100, "gpu.sm": 80}


def write_meta_toy(root: Path, meta: dict | None = None, rules: list | None = None) -> Path:
    """The toy with `meta` (default KERNEL_META) on attention_backend and `rules` (default
    META_RULES) added to its rules."""
    write_toy(root)
    flags = [dict(f, choice_meta=meta or KERNEL_META) if f["name"] == "attention_backend" else f
             for f in CATALOG["flags"]]
    (root / "llm" / "flags.yaml").write_text(yaml.safe_dump(dict(CATALOG, flags=flags)))
    toy = dict(RULES, rules=RULES["rules"] + (META_RULES if rules is None else rules))
    (root / "llm" / "toy.yaml").write_text(yaml.safe_dump(toy, sort_keys=False))
    return root
