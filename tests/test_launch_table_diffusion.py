"""Real diffusion launch commands, resolved end to end (parse -> facts -> resolve).

Each row is a command from upstream documentation, a model card, or the diffusion seed's own help
and comments (the `source` column says which), resolved on a fact preset. A row either lists the
values the resolver must produce (what upstream SGLang would run on that machine) or the user flags
and rule a conflict must name (where upstream raises, or silently changes what was asked).
Generation-only options of the quoted commands (--prompt, --save-output, ...) are left out: they
are request parameters, not server flags.
"""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from accord.resolver.api import ConflictError, resolve
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.facts.machine import load_facts

DOCS = "sgl-project/sglang docs/diffusion"
SEED = "seed 004_821319f8ce9a0ec1.txt"
WAN_13B = "--model-path Wan-AI/Wan2.1-T2V-1.3B-Diffusers"


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    source: str
    facts: str
    flags: str
    fact: tuple[str, ...] = ()                 # --fact overrides, KEY=VALUE
    expect: dict = dataclasses.field(default_factory=dict)
    conflict_flags: tuple[str, ...] = ()       # user flags the conflict must name
    conflict_rule: str | None = None           # a rule the conflict must name
    warns: tuple[str, ...] = ()                # rule ids that must warn


ROWS = [
    Row("wan-usp-serve", f"{DOCS}/api/cli.md (Serve) and openai_api.md", "h100",
        f"{WAN_13B} --text-encoder-cpu-offload --pin-cpu-memory --num-gpus 4 "
        "--ulysses-degree 2 --ring-degree 2 --port 30010",
        expect={"sp_degree": 4, "ulysses_degree": 2, "ring_degree": 2, "tp_size": 1,
                "enable_cfg_parallel": False, "cfg_parallel_degree": 1, "attention_backend": "fa",
                "text_encoder_cpu_offload": True, "dit_cpu_offload": True, "warmup_mode": "server",
                "port": 30010}),
    Row("wan22-a14b-usp-generate", f"{DOCS}/api/cli.md (Generate)", "h200",
        "--model-path Wan-AI/Wan2.2-T2V-A14B-Diffusers --text-encoder-cpu-offload --pin-cpu-memory "
        "--num-gpus 4 --ulysses-degree 2 --ring-degree 2 --output-path outputs",
        expect={"sp_degree": 4, "ulysses_degree": 2, "ring_degree": 2, "attention_backend": "fa",
                "hsdp_shard_dim": 4, "output_path": "outputs"}),
    Row("qwen-image-quickstart", f"{DOCS}/api/cli.md (Quick Start)", "h100",
        "--model-path Qwen/Qwen-Image",
        expect={"num_gpus": 1, "tp_size": 1, "sp_degree": 1, "enable_cfg_parallel": False,
                "attention_backend": "fa", "dit_cpu_offload": True, "text_encoder_cpu_offload": True,
                "vae_cpu_offload": False, "warmup_mode": "server",
                "bcg_text_buckets": (64, 128, 256, 512, 1024)}),
    Row("qwen-image-auto-cfg", f"{DOCS}/performance/deployment_cookbook.md (Performance Modes)", "h100",
        "--model-path Qwen/Qwen-Image --num-gpus 2 --performance-mode auto", fact=("model.uses_cfg=true",),
        expect={"enable_cfg_parallel": True, "cfg_parallel_degree": 2, "sp_degree": 1,
                "ulysses_degree": 1, "hsdp_shard_dim": 2}),
    Row("qwen-image-auto-cfg-no-fsdp", f"{DOCS}/performance/deployment_cookbook.md (explicit flags win)", "h100",
        "--model-path Qwen/Qwen-Image --num-gpus 2 --performance-mode auto --use-fsdp-inference false",
        fact=("model.uses_cfg=true",),
        expect={"enable_cfg_parallel": True, "use_fsdp_inference": False, "sp_degree": 1}),
    Row("qwen-image-cfg-explicitly-off", f"{DOCS}/performance/deployment_cookbook.md (--enable-cfg-parallel false)",
        "h100", "--model-path Qwen/Qwen-Image --num-gpus 2 --enable-cfg-parallel false",
        fact=("model.uses_cfg=true",),
        expect={"enable_cfg_parallel": False, "cfg_parallel_degree": 1, "sp_degree": 2, "ulysses_degree": 2}),
    Row("wan-memory-mode", f"{DOCS}/performance/deployment_cookbook.md (memory mode)", "l40s",
        f"{WAN_13B} --performance-mode memory",
        expect={"dit_cpu_offload": True, "text_encoder_cpu_offload": True, "attention_backend": "fa"}),
    Row("manual-mode-no-auto-offload", f"{DOCS}/performance/deployment_cookbook.md (manual mode)", "h100",
        f"{WAN_13B} --num-gpus 2 --performance-mode manual", fact=("model.uses_cfg=true",),
        expect={"dit_cpu_offload": False, "text_encoder_cpu_offload": False, "enable_cfg_parallel": False,
                "sp_degree": 2}),
    Row("ltx23-component-backends", f"{DOCS}/api/cli.md (Component Attention Backend Overrides)", "h100",
        "--model-path Lightricks/LTX-2.3 --attention-backend fa --component-attention-backends text_encoder=torch_sdpa",
        fact=("model.pipeline=LTX2Pipeline",),
        expect={"attention_backend": "fa", "component_attention_backends": "text_encoder=torch_sdpa"}),
    Row("ltx23-one-stage-single-gpu", f"{SEED} L775-790 (LTX-2.3 one-stage precision)", "b200",
        "--model-path Lightricks/LTX-2.3",
        expect={"attention_backend": "fa", "num_gpus": 1, "sp_degree": 1}),
    Row("ltx23-two-stage-h200", f"{SEED} L680-707 (two-stage residency on H200)", "h200",
        "--model-path Lightricks/LTX-2.3 --pipeline LTX2TwoStagePipeline",
        expect={"ltx2_two_stage_device_mode": "resident"}),
    Row("ltx23-two-stage-l40s", f"{SEED} L680-707 (two-stage residency below 130 GiB)", "l40s",
        "--model-path Lightricks/LTX-2.3 --pipeline LTX2TwoStagePipeline",
        expect={"ltx2_two_stage_device_mode": "original"}),
    Row("ltx2-four-branch-cfg", f"{SEED} L1442-1452 (--cfg-parallel-size 4 example)", "h200",
        "--model-path Lightricks/LTX-2.3 --num-gpus 4 --cfg-parallel-size 4",
        expect={"enable_cfg_parallel": True, "cfg_parallel_degree": 4, "sp_degree": 1},
        warns=("par.cfg.four_branch",)),
    Row("ovis-diffusers-backend", f"{DOCS}/api/cli.md (Diffusers Backend example)", "h100",
        "--model-path AIDC-AI/Ovis-Image-7B --backend diffusers --trust-remote-code",
        expect={"backend": "diffusers", "attention_backend": None, "trust_remote_code": True}),
    Row("qwen-cache-dit-diffusers", f"{DOCS}/performance/cache/cache_dit.md (Diffusers Backend Configuration)",
        "h100", "--backend diffusers --model-path Qwen/Qwen-Image --cache-dit-config config.yaml",
        expect={"cache_dit_config": "config.yaml", "attention_backend": None}),
    Row("sta-sliding-tile", f"{DOCS}/performance/attention_backends.md (Using Sliding Tile Attention)", "h100",
        f"{WAN_13B} --attention-backend sliding_tile_attn "
        "--attention-backend-config mask_strategy_file_path=/abs/path/to/mask_strategy.json",
        expect={"attention_backend": "sliding_tile_attn"}),
    Row("qwen-bcg", f"{SEED} L1513-1522 (--enable-breakable-cuda-graph help example)", "h100",
        "--model-path Qwen/Qwen-Image --enable-breakable-cuda-graph --warmup-resolutions 1024x1024 1328x1328",
        expect={"enable_breakable_cuda_graph": True, "warmup_mode": "server",
                "warmup_resolutions": ("1024x1024", "1328x1328"), "bcg_text_buckets": (64, 128, 256, 512, 1024)}),
    Row("qwen-bcg-without-resolutions", f"{SEED} L507-519 (BCG requires --warmup-resolutions), local snapshot",
        "h100", "--model-path /models/Qwen-Image --enable-breakable-cuda-graph",
        fact=("model.pipeline=QwenImagePipeline",),
        conflict_flags=("enable_breakable_cuda_graph",), conflict_rule="cg.bcg.needs_resolutions"),
    Row("flux-bcg-not-allow-listed", f"{SEED} L527-550 (BCG allow-list)", "h100",
        "--model-path black-forest-labs/FLUX.1-dev --enable-breakable-cuda-graph --warmup-resolutions 1024x1024",
        conflict_flags=("enable_breakable_cuda_graph",), conflict_rule="cg.bcg.model_allowlist"),
    Row("z-image-bcg-with-compile", f"{SEED} L284-287 (BCG takes priority over torch.compile; both stay as typed)",
        "h100", "--model-path Tongyi-MAI/Z-Image-Turbo --enable-breakable-cuda-graph --warmup-resolutions 1024x1024 "
        "--enable-torch-compile", fact=("model.pipeline=ZImagePipeline",),
        expect={"enable_breakable_cuda_graph": True, "enable_torch_compile": True},
        warns=("cg.bcg.vs_torch_compile",)),
    Row("qwen-bcg-text-buckets-with-zero", f"{SEED} L494-505 (non-positive buckets are skipped where they are read)",
        "h100", "--model-path Qwen/Qwen-Image --enable-breakable-cuda-graph --warmup-resolutions 1024x1024 "
        "--bcg-text-buckets 0 128", fact=("model.pipeline=QwenImagePipeline",),
        expect={"bcg_text_buckets": (0, 128)}, warns=("cg.bcg.text_buckets_no_zero",)),
    Row("qwen-bcg-all-buckets-zero", f"{SEED} L520-525 (at least one positive bucket)", "h100",
        "--model-path Qwen/Qwen-Image --enable-breakable-cuda-graph --warmup-resolutions 1024x1024 "
        "--bcg-text-buckets 0", fact=("model.pipeline=QwenImagePipeline",),
        conflict_flags=("bcg_text_buckets",), conflict_rule="cg.bcg.text_buckets_positive"),
    Row("qwen-bcg-with-dit-offload", "upstream 0.5.23 server_args.py:1099-1106 (only DiT snapshot offload is refused)",
        "h100", "--model-path Qwen/Qwen-Image --enable-breakable-cuda-graph --warmup-resolutions 1024x1024 "
        "--dit-cpu-offload", fact=("model.pipeline=QwenImagePipeline",),
        expect={"enable_breakable_cuda_graph": True, "dit_cpu_offload": True}, warns=("cg.bcg.resident_dit",)),
    Row("base-gpu-id-single-server", "upstream 0.5.23 runtime/launch_server.py:215-225 (workers on GPUs 0..n-1)",
        "h100", "--model-path Qwen/Qwen-Image --base-gpu-id 6 --num-gpus 4",
        expect={"num_gpus": 4, "base_gpu_id": 6}, warns=("par.base_gpu_id.monolithic",)),
    Row("more-gpus-than-the-node", "upstream 0.5.23 runtime/launch_server.py:215-225 (one worker per local GPU)",
        "h100", "--model-path Qwen/Qwen-Image --num-gpus 16",
        conflict_flags=("num_gpus",), conflict_rule="par.gpus.available"),
    Row("dit-layerwise-with-other-groups", f"{SEED} L1170-1188 (--dit-layerwise-offload prepends dit)", "h100",
        "--model-path black-forest-labs/FLUX.1-dev --dit-layerwise-offload --layerwise-offload-components text_encoder",
        conflict_flags=("dit_layerwise_offload", "layerwise_offload_components"),
        conflict_rule="off.layerwise.dit_group_listed"),
    Row("qwen-bcg-short-text-buckets", f"{SEED} L293-297 (a prompt longer than the largest bucket runs eagerly)",
        "h100", "--model-path Qwen/Qwen-Image --enable-breakable-cuda-graph --warmup-resolutions 1024x1024 "
        "--bcg-text-buckets 128 256", fact=("model.pipeline=QwenImagePipeline",),
        expect={"bcg_text_buckets": (128, 256), "warmup_mode": "server"}, warns=("cg.bcg.long_prompts_eager",)),
    Row("attention-config-unparseable", f"{SEED} L1231-1268 (file, JSON string or key=value pairs)", "h100",
        f"{WAN_13B} --attention-backend sliding_tile_attn --attention-backend-config sparsity",
        conflict_flags=("attention_backend_config",), conflict_rule="attn.config.syntax"),
    Row("wan-layerwise-prefetch", f"{SEED} L1605-1633 (--dit-layerwise-offload, --dit-offload-prefetch-size help)",
        "l40s", f"{WAN_13B} --dit-layerwise-offload --dit-offload-prefetch-size 0.25",
        expect={"layerwise_offload_components": ("dit",), "dit_offload_prefetch_size": 0.25}),
    Row("prefetch-without-layerwise", f"{SEED} L1628-1633 (the prefetch size is read by layerwise offload)",
        "l40s", f"{WAN_13B} --dit-cpu-offload --dit-offload-prefetch-size 2",
        expect={"dit_cpu_offload": True, "layerwise_offload_components": None},
        warns=("off.prefetch.needs_layerwise",)),
    Row("compile-server-warmup", f"{SEED} L1498-1506 (--enable-torch-compile help)", "h100",
        f"{WAN_13B} --enable-torch-compile",
        expect={"warmup_mode": "server"}, warns=("cg.compile.precision",)),
    Row("warmup-resolutions-help", f"{SEED} L1576-1582 (--warmup-resolutions help example)", "cpu",
        "--warmup-resolutions 256x256 720x720 --warmup-steps 2",
        expect={"warmup_mode": "server", "warmup_steps": 2, "attention_backend": "torch_sdpa"}),
    Row("legacy-warmup-flag", f"{SEED} L1565-1575 (--warmup maps to request)", "cpu",
        "--warmup", expect={"warmup_mode": "request"}),
    Row("dp-not-supported", f"{SEED} L2332-2333 (DP is not yet supported)", "h100",
        f"{WAN_13B} --num-gpus 2 --dp-size 2",
        conflict_flags=("dp_size",), conflict_rule="par.dp.unsupported"),
    Row("ring-without-ulysses", f"{SEED} L2346-2350 (sp must equal ring x ulysses)", "h100",
        f"{WAN_13B} --num-gpus 4 --ring-degree 2",
        conflict_flags=("ring_degree",), conflict_rule="par.sp.factors"),
    Row("flux-cfg-parallel", "upstream 0.5.23 runtime/pipelines_core/stages/input_validation.py:426 "
        "(explicit CFG parallel on a guidance-free model is served, with a warning)", "h100",
        "--model-path black-forest-labs/FLUX.1-dev --num-gpus 2 --enable-cfg-parallel",
        fact=("model.uses_cfg=false",),
        expect={"enable_cfg_parallel": True, "cfg_parallel_degree": 2, "sp_degree": 1},
        warns=("par.cfg.model_without_cfg",)),
    Row("flux-on-24gb", f"{DOCS}/performance/cache/cache_dit.md (FLUX.1-dev example)", "rtx4090",
        "--model-path black-forest-labs/FLUX.1-dev",
        expect={"dit_cpu_offload": True, "text_encoder_cpu_offload": True, "image_encoder_cpu_offload": True,
                "attention_backend": "fa"}),
    Row("wan-14b-mi300x", f"{DOCS}/performance/attention_backends.md (ROCm) with a Wan 14B Ulysses launch",
        "mi300x", "--model-path Wan-AI/Wan2.1-T2V-14B-Diffusers --num-gpus 8 --ulysses-degree 8",
        expect={"attention_backend": "aiter", "sp_degree": 8, "ulysses_degree": 8, "enable_cfg_parallel": False}),
    Row("online-fp8-ignored-layers", f"{SEED} L1700-1710 (--quantization-ignored-layers help example)", "h100",
        "--model-path Qwen/Qwen-Image --quantization fp8 --quantization-ignored-layers img_mod txt_mod to_out",
        expect={"quantization": "fp8", "quantization_ignored_layers": ("img_mod", "txt_mod", "to_out")}),
    Row("mxfp4-needs-mi350", f"{SEED} L1696 (mxfp4 targets ROCm MI350+)", "mi300x",
        f"{WAN_13B} --quantization mxfp4",
        conflict_flags=("quantization",), conflict_rule="quant.mxfp4.mi350"),
    Row("strict-ports-clash", f"{SEED} L952-966 (strict ports must be distinct)", "cpu",
        "--port 5555 --strict-ports",
        conflict_flags=("port",), conflict_rule="net.ports.scheduler_vs_http"),
    Row("lora-serve", f"{DOCS}/api/cli.md (Model and runtime: --lora-path / --lora-nickname)", "h100",
        "--model-path Qwen/Qwen-Image --lora-path org/qwen-style-lora --lora-nickname style",
        expect={"lora_merge_mode": "auto", "lora_nickname": "style"}),
    Row("tiny-dit-cpu", "Accord built-in model (rules/models/tiny-dit) on the development VM", "cpu", "",
        expect={"attention_backend": "torch_sdpa", "dit_cpu_offload": False, "text_encoder_cpu_offload": False,
                "enable_cfg_parallel": False, "sp_degree": 1, "warmup_mode": "server",
                "scheduler_port": 5555, "master_port": 30005}),
]


def _resolve(row: Row):
    _, parsed = parse_flags(shlex.split(row.flags), system="diffusion")
    facts = load_facts(row.facts, list(row.fact), model_path=parsed.user.get("model_path"),
                       system="diffusion")
    return resolve("diffusion", parsed.user, facts, parsed.sources)


def test_table_has_at_least_twenty_cited_rows():
    assert len(ROWS) >= 20
    assert len({row.name for row in ROWS}) == len(ROWS)
    assert all(row.source for row in ROWS)


@pytest.mark.parametrize("row", [r for r in ROWS if not r.conflict_flags], ids=lambda r: r.name)
def test_launch_resolves_to_upstream_values(row):
    config = _resolve(row)
    got = {name: config.values[name] for name in row.expect}
    assert got == row.expect, f"{row.name} ({row.source})"
    warned = {w[1:w.index("]")] for w in config.warnings if w.startswith("[")}
    assert set(row.warns) <= warned, f"{row.name}: warnings {config.warnings}"


@pytest.mark.parametrize("row", [r for r in ROWS if r.conflict_flags], ids=lambda r: r.name)
def test_launch_conflicts_name_flags_and_rule(row):
    with pytest.raises(ConflictError) as caught:
        _resolve(row)
    conflicts = caught.value.conflicts
    named_flags = {flag for c in conflicts for flag in c.flags}
    named_rules = {rule for c in conflicts for rule in c.rules}
    assert set(row.conflict_flags) <= named_flags, f"{row.name}: {caught.value.text()}"
    assert row.conflict_rule in named_rules, f"{row.name}: {caught.value.text()}"


def test_relax_of_dit_layerwise_with_other_groups_is_upstreams_selection():
    """Seed L1174-1181: --dit-layerwise-offload prepends `dit` to the typed groups; the conflict's
    fix is that list, so --relax keeps both flags and resolves what upstream runs (0.5.23 gives
    ['dit', 'text_encoder'] for this command)."""
    _, parsed = parse_flags(shlex.split("--model-path black-forest-labs/FLUX.1-dev --dit-layerwise-offload "
                                        "--layerwise-offload-components text_encoder"), system="diffusion")
    facts = load_facts("h100", model_path=parsed.user.get("model_path"), system="diffusion")
    config = resolve("diffusion", parsed.user, facts, parsed.sources, relax=True)
    assert config.values["dit_layerwise_offload"] is True
    assert config.values["layerwise_offload_components"] == ("dit", "text_encoder")
