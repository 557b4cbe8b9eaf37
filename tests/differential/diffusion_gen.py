"""Deterministic random `sglang serve` diffusion commands, for the differential test against upstream.

Why: agreement with upstream is only meaningful on commands nobody tuned the rules for. This module
draws realistic launches (a model upstream's oracle knows, a CUDA fact preset of `rules/facts/`, one
to five high-impact flags) from a seeded generator, so the same seed always gives the same cases,
and writes them in the oracle's CASES.json format (`{"id", "argv", "facts"}`).

It also holds the model folders both sides resolve against: the oracle writes Hugging Face cache
folders (`models--ORG--NAME/snapshots/<rev>/model_index.json`) for its six diffusion ids, and Accord
reads its `model.*` facts from a local folder only, so `materialize` writes the same layout (the
index alone; Accord reads no weights) and `localize` points `--model-path` at it.

usage:  python -m tests.differential.diffusion_gen N SEED CASES.json [--wide PREFIX]
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
FACTS_DIR = ROOT / "rules" / "facts"
REV = "0" * 40

# Hub id -> (pipeline class, components): the model_index.json of each published checkpoint.
MODELS = {
    "black-forest-labs/FLUX.1-dev": ("FluxPipeline", {
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"], "text_encoder": ["transformers", "CLIPTextModel"],
        "text_encoder_2": ["transformers", "T5EncoderModel"], "tokenizer": ["transformers", "CLIPTokenizer"],
        "tokenizer_2": ["transformers", "T5TokenizerFast"], "transformer": ["diffusers", "FluxTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKL"]}),
    "black-forest-labs/FLUX.1-schnell": ("FluxPipeline", {
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"], "text_encoder": ["transformers", "CLIPTextModel"],
        "text_encoder_2": ["transformers", "T5EncoderModel"], "tokenizer": ["transformers", "CLIPTokenizer"],
        "tokenizer_2": ["transformers", "T5TokenizerFast"], "transformer": ["diffusers", "FluxTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKL"]}),
    "Qwen/Qwen-Image": ("QwenImagePipeline", {
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"], "transformer": ["diffusers", "QwenImageTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLQwenImage"]}),
    "Wan-AI/Wan2.1-T2V-14B-Diffusers": ("WanPipeline", {
        "scheduler": ["diffusers", "UniPCMultistepScheduler"], "text_encoder": ["transformers", "UMT5EncoderModel"],
        "tokenizer": ["transformers", "T5TokenizerFast"], "transformer": ["diffusers", "WanTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"]}),
    "Wan-AI/Wan2.1-T2V-1.3B-Diffusers": ("WanPipeline", {
        "scheduler": ["diffusers", "UniPCMultistepScheduler"], "text_encoder": ["transformers", "UMT5EncoderModel"],
        "tokenizer": ["transformers", "T5TokenizerFast"], "transformer": ["diffusers", "WanTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"]}),
    "Tongyi-MAI/Z-Image-Turbo": ("ZImagePipeline", {
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"], "text_encoder": ["transformers", "Qwen3Model"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"], "transformer": ["diffusers", "ZImageTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKL"]}),
}

# CUDA presets only: the oracle simulates an NVIDIA GPU (upstream's CudaPlatform). Multi-GPU nodes
# are drawn three times as often: most parallelism decisions need more than one GPU.
PRESETS = ("a100", "a10g", "b200", "gb200", "h100", "h200", "l4", "l40s", "rtx4090", "rtx5090")
PRESET_WEIGHTS = (3, 1, 3, 3, 3, 3, 1, 3, 1, 1)


def oracle_facts(preset: str) -> dict:
    """A `rules/facts/<preset>.yaml` machine in the oracle's facts format."""
    data = yaml.safe_load((FACTS_DIR / f"{preset}.yaml").read_text())
    gpu = data["gpu"]
    return {"sm": gpu["sm"], "cuda": data["cuda"], "gpu_count": gpu["count"], "gpu_mem_gib": gpu["mem_gib"],
            "gpu_name": gpu["name"], "flashinfer": "flashinfer" in (data.get("packages") or {}),
            "platform": data["platform"]}


def model_dir(root: Path, hub_id: str) -> Path:
    org, name = hub_id.split("/")
    return Path(root) / f"models--{org}--{name}" / "snapshots" / REV


def materialize(root: Path) -> None:
    """Write each model's model_index.json under root in the Hugging Face cache layout (idempotent)."""
    for hub_id, (pipeline, components) in MODELS.items():
        folder = model_dir(root, hub_id)
        folder.mkdir(parents=True, exist_ok=True)
        index = {"_class_name": pipeline, "_diffusers_version": "0.35.0", **components}
        (folder / "model_index.json").write_text(json.dumps(index, indent=1, sort_keys=True))


def localize(argv: list[str], root: Path) -> list[str]:
    """The same command with a known hub id in --model-path replaced by its local folder."""
    out = list(argv)
    for i, word in enumerate(out[:-1]):
        if word == "--model-path" and out[i + 1] in MODELS:
            out[i + 1] = str(model_dir(root, out[i + 1]))
    return out


# --- the flags a random command draws from -----------------------------------------------------------
# Each entry: (weight, draw(rng, gpus) -> argv words). `gpus` is the node's GPU count.

def _pow2_upto(rng: random.Random, limit: int, start: int = 1) -> int:
    options = [n for n in (1, 2, 4, 8) if start <= n <= max(limit, start)]
    return rng.choice(options)


def _bool_flag(name: str):
    def draw(rng, gpus):
        form = rng.choice(["bare", "true", "false"])
        return [name] if form == "bare" else [name, form]
    return draw


FLAG_MENU = [
    (3, lambda r, g: ["--tp-size", str(_pow2_upto(r, min(g, 4)))]),
    (3, lambda r, g: ["--sp-degree", str(_pow2_upto(r, g))]),
    (3, lambda r, g: ["--ulysses-degree", str(_pow2_upto(r, min(g, 4)))]),
    (2, lambda r, g: ["--ring-degree", str(_pow2_upto(r, min(g, 2)))]),
    (3, _bool_flag("--enable-cfg-parallel")),
    (2, lambda r, g: ["--cfg-parallel-size", r.choice(["1", "2"])]),
    (4, lambda r, g: ["--attention-backend", r.choice(["fa", "fa3", "fa4", "torch_sdpa", "sage_attn", "flash"])]),
    (2, _bool_flag("--dit-cpu-offload")),
    (2, _bool_flag("--text-encoder-cpu-offload")),
    (1, _bool_flag("--vae-cpu-offload")),
    (2, _bool_flag("--dit-layerwise-offload")),
    (2, _bool_flag("--use-fsdp-inference")),
    (1, _bool_flag("--pin-cpu-memory")),
    (2, _bool_flag("--enable-torch-compile")),
    (3, lambda r, g: ["--enable-breakable-cuda-graph"]),
    (2, lambda r, g: ["--warmup-resolutions", r.choice(["1024x1024", "1328x1328", "832x480"])]),
    (2, lambda r, g: ["--warmup-mode", r.choice(["off", "request", "server"])]),
    (1, lambda r, g: ["--warmup"]),
    (2, lambda r, g: ["--performance-mode", r.choice(["auto", "speed", "memory", "manual"])]),
    (1, lambda r, g: ["--quantization", "fp8"]),
    (1, lambda r, g: ["--backend", r.choice(["sglang", "diffusers"])]),
    (1, lambda r, g: ["--dp-size", r.choice(["1", "2"])]),
    (1, lambda r, g: ["--hsdp-shard-dim", str(_pow2_upto(r, g))]),
]


# The wide menu adds the rest of the flags the oracle reports on (ports, batching, warmup steps, BCG
# buckets, layerwise components, HSDP replication, aliases, rarer backends and quantizations,
# parallel sizes that are not powers of two), so a batch drawn from it probes rules the first
# menu never reaches. Kept separate so the first fixture's seed still reproduces its cases.
WIDE_EXTRA = [
    (2, lambda r, g: ["--sp-degree", str(r.choice([n for n in (2, 3, 6) if n <= g] or [1]))]),
    (2, lambda r, g: ["--ulysses-degree", "2", "--ring-degree", "2"]),
    (1, lambda r, g: ["--tp-size", str(r.choice([n for n in (2, 3, 8) if n <= g] or [1]))]),
    (1, lambda r, g: ["--cfg-parallel-size", r.choice(["0", "3", "4"])]),
    (2, lambda r, g: ["--warmup-steps", str(r.choice([0, 1, 2, 4]))]),
    (1, lambda r, g: ["--bcg-text-buckets", r.choice(["64", "128", "256", "0"])]),
    (2, lambda r, g: ["--enable-breakable-cuda-graph", "--warmup-resolutions",
                      r.choice(["1024x1024", "1328x1328", "832x480"])]),
    (1, _bool_flag("--disable-autocast")),
    (2, lambda r, g: ["--dit-offload-prefetch-size", r.choice(["0", "0.5", "2", "2.5", "-1"])]),
    (2, lambda r, g: [r.choice(["--layerwise-offload-components", "--layerwise-offload-modules"]),
                      r.choice(["dit", "text_encoder", "vae", "all", "transformer"])]),
    (1, _bool_flag("--image-encoder-cpu-offload")),
    (1, lambda r, g: ["--hsdp-replicate-dim", str(_pow2_upto(r, g))]),
    (1, lambda r, g: ["--strict-ports"]),
    (1, lambda r, g: ["--port", r.choice(["30000", "8080", "5555"])]),
    (1, lambda r, g: ["--scheduler-port", r.choice(["5555", "6000", "30000"])]),
    (1, lambda r, g: ["--master-port", r.choice(["30005", "29500", "30000"])]),
    (1, lambda r, g: ["--host", r.choice(["0.0.0.0", "localhost"])]),
    (1, lambda r, g: ["--batching-max-size", r.choice(["0", "1", "4"])]),
    (1, lambda r, g: ["--server-warmup"]),
    (1, lambda r, g: [r.choice(["--dp", "--data-parallel-size"]), r.choice(["1", "2"])]),
    (1, lambda r, g: ["--mode", r.choice(["speed", "memory", "manual"])]),
    (1, lambda r, g: ["--quantization", r.choice(["mxfp8", "modelslim", "nvfp4", "fp8"])]),
    (2, lambda r, g: ["--attention-backend", r.choice(["xformers", "aiter", "sage_attn_3", "sla_attn",
                                                       "video_sparse_attn", "FA", "sdpa", "flash_attn"])]),
]
WIDE_MENU = FLAG_MENU + WIDE_EXTRA


def draw_case(rng: random.Random, index: int, menu: list = FLAG_MENU, prefix: str = "d") -> dict:
    """One random launch: a model, a preset, --num-gpus (usually) and 1-5 further flags."""
    hub_id = rng.choice(sorted(MODELS))
    preset = rng.choices(PRESETS, weights=PRESET_WEIGHTS)[0]
    facts = oracle_facts(preset)
    gpus = facts["gpu_count"]
    argv = ["--model-path", hub_id]
    if gpus > 1 and rng.random() < 0.8:
        if menu is FLAG_MENU or rng.random() < 0.85:
            argv += ["--num-gpus", str(_pow2_upto(rng, gpus, start=2))]
        else:
            argv += ["--num-gpus", str(rng.choice([n for n in (3, 6) if n <= gpus] or [gpus]))]
    weights = [w for w, _ in menu]
    chosen: list[int] = []
    for _ in range(rng.randint(1, 5)):
        pick = rng.choices(range(len(menu)), weights=weights)[0]
        if pick not in chosen:
            chosen.append(pick)
    for pick in chosen:
        argv += menu[pick][1](rng, gpus)
    return {"id": f"{prefix}{index:04d}-{preset}", "argv": argv, "facts": facts, "preset": preset}


def generate(count: int, seed: int, wide_prefix: str | None = None) -> list[dict]:
    """`count` cases from `seed`; the same arguments always give the same list. With `wide_prefix`,
    the cases draw from WIDE_MENU and their ids start with that prefix instead of "d"."""
    rng = random.Random(seed)
    if wide_prefix is None:
        return [draw_case(rng, i) for i in range(count)]
    return [draw_case(rng, i, WIDE_MENU, wide_prefix) for i in range(count)]


def main(argv: list[str]) -> int:
    wide = None
    if len(argv) == 5 and argv[3] == "--wide":
        wide, argv = argv[4], argv[:3]
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    count, seed, out = int(argv[0]), int(argv[1]), argv[2]
    cases = generate(count, seed, wide)
    with open(out + ".tmp", "w") as fh:
        json.dump(cases, fh, indent=1, sort_keys=True)
    os.replace(out + ".tmp", out)
    print(f"{len(cases)} cases (seed {seed}) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
