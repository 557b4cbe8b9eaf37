"""Model facts: what a local checkpoint folder says about the model (`model.*` facts).

An LLM folder is read from its Hugging Face `config.json`; a diffusion folder from its
`model_index.json`. Only a local folder is read: anything else (a hub id, a missing path) gives no
model facts at all, so the rules that need them report "unknown" rather than guess. With no path,
the built-in model under `rules/models/` is described, since that is what the engine then serves.

Configs differ between model families in how they spell the same thing (`num_hidden_layers`,
`n_layer`, ...) and in where multimodal models keep the language model's numbers (`text_config`).
Each fact below lists the spellings it accepts; a field with an unexpected type is treated as
unknown rather than rejected, because the user cannot fix a published config. Only a file that is
not JSON at all is an error.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

from resolver.catalog import RULES_DIR, SYSTEMS
from resolver.errors import UsageError
from resolver.gguf_header import gguf_facts
from resolver.model_location import gguf_file, local_path

BUILTIN_MODELS = {"llm": RULES_DIR / "models" / "tiny-llama", "diffusion": RULES_DIR / "models" / "tiny-dit"}

# Multimodal configs nest the language model's numbers under one of these keys.
_TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config")
# A config that carries any of these takes images, video or audio as input.
_MEDIA_KEYS = ("vision_config", "audio_config", "speech_config", "image_token_id", "image_token_index",
               "video_token_id", "audio_token_id", "num_mel_bins")
_SPELLINGS = {
    "model.num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "model.num_attention_heads": ("num_attention_heads", "n_head", "num_heads"),
    "model.num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv",
                                  "multi_query_group_num"),
    "model.hidden_size": ("hidden_size", "n_embd", "d_model"),
    "model.vocab_size": ("vocab_size", "padded_vocab_size"),
    "model.context_length": ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                             "max_sequence_length"),
    "model.moe_experts": ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts"),
}
_MLA_ARCHS = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")
_DSA_ARCHS = ("DeepseekV32ForCausalLM",)
_SINK_ARCHS = ("GptOssForCausalLM",)
_SINK_KEYS = ("add_swa_attention_sink_bias", "add_full_attention_sink_bias")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def model_facts(model_path: str | None, system: str = "llm") -> dict[str, Any]:
    """The `model.*` facts of a local model folder ({} when it is not one), sorted by key."""
    if system not in SYSTEMS:
        raise UsageError(f"unknown system {system!r}; use one of: {', '.join(SYSTEMS)}.")
    folder = BUILTIN_MODELS[system] if model_path is None else Path(model_path).expanduser()
    gguf = gguf_file(local_path(model_path)) if system == "llm" and model_path is not None else None
    if gguf is not None:
        return gguf_facts(gguf)
    if not folder.is_dir():
        return {}
    name = "model_index.json" if system == "diffusion" else "config.json"
    if not (folder / name).is_file():
        return {}
    config = _read_json(folder / name)
    facts = _diffusion_facts(config) if system == "diffusion" else _llm_facts(config)
    model_id = _model_id(config, folder)
    if model_id:
        facts["model.id"] = model_id
    return dict(sorted(facts.items()))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}, line {err.lineno}: not valid JSON ({err.msg}); fix the file or "
                         f"point --model-path at another folder.") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read {path}: {err}.") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object of model settings, found a "
                         f"{type(data).__name__}.")
    return data


def _diffusion_facts(index: Mapping[str, Any]) -> dict[str, Any]:
    """Pipeline class, task and CFG use. `_task_type` and `_sampling` are optional keys (the built-in
    model has them; diffusers folders usually do not, and then those facts stay unknown)."""
    facts: dict[str, Any] = {}
    pipeline = index.get("_class_name")
    if isinstance(pipeline, str):
        facts["model.pipeline"] = pipeline
        for word, task in (("Video", "video_gen"), ("Image", "image_gen")):
            if word in pipeline:
                facts["model.task_type"] = task
    if isinstance(index.get("_task_type"), str):
        facts["model.task_type"] = index["_task_type"]
    sampling = index.get("_sampling")
    if isinstance(sampling, Mapping) and isinstance(sampling.get("guidance_scale"), (int, float)):
        # Upstream's rule: CFG runs when a negative prompt exists and guidance_scale > 1.
        facts["model.uses_cfg"] = sampling.get("negative_prompt") is not None and sampling["guidance_scale"] > 1
    return facts


def _model_id(config: Mapping[str, Any], folder: Path) -> str | None:
    """A hub id, when the config records one or the folder sits in a Hugging Face cache
    (`models--org--name/snapshots/<rev>`)."""
    named = config.get("_name_or_path")
    if isinstance(named, str) and _HUB_ID.fullmatch(named) and not Path(named).exists():
        return named
    for part in folder.resolve().parts:
        if part.startswith("models--") and part.count("--") >= 2:
            return "/".join(part.split("--")[1:3])
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _llm_facts(config: Mapping[str, Any]) -> dict[str, Any]:
    text = next((config[k] for k in _TEXT_CONFIG_KEYS if isinstance(config.get(k), dict)), config)

    def first(names: tuple[str, ...]) -> Any:
        for source in (text, config):
            for name in names:
                if source.get(name) is not None:
                    return source[name]
        return None

    facts: dict[str, Any] = {}
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    if arch:
        facts["model.architecture"] = arch
    for key, names in _SPELLINGS.items():
        raw = first(names)
        if raw is None and key == "model.moe_experts":
            facts[key] = 0  # no expert count anywhere: a dense model
        elif _int(raw) is not None:
            facts[key] = raw
    heads = facts.get("model.num_attention_heads")
    if heads is not None:
        facts.setdefault("model.num_key_value_heads", heads)  # HF convention: absent means MHA
    attention, window = _attention(text, arch)
    facts["model.attention"] = attention
    if window is not None or attention not in ("swa", "hybrid_swa"):
        facts["model.sliding_window"] = window
    head_dim = _head_dim(text, attention, facts)
    if head_dim is not None:
        facts["model.head_dim"] = head_dim
    facts["model.has_sinks"] = arch in _SINK_ARCHS or any(first((k,)) is True for k in _SINK_KEYS)
    facts["model.is_encoder_decoder"] = config.get("is_encoder_decoder") is True
    facts["model.is_multimodal"] = (text is not config) or any(k in config for k in _MEDIA_KEYS)
    quant = first(("quantization_config", "compression_config"))
    if quant is None:
        facts["model.quant_method"] = None
    elif isinstance(quant, dict) and isinstance(quant.get("quant_method"), str):
        facts["model.quant_method"] = quant["quant_method"].lower()
    dtype = first(("torch_dtype", "dtype"))
    if isinstance(dtype, str):
        facts["model.dtype"] = dtype
    return facts


def _layer_types(text: Mapping[str, Any]) -> list[str]:
    """Per-layer kinds, from whichever list or pattern the family uses, lower-cased."""
    for key in ("layer_types", "layers_block_type"):
        if isinstance(text.get(key), list):
            return [str(t).lower() for t in text[key]]
    return []


def _attention(text: Mapping[str, Any], arch: str | None) -> tuple[str, int | None]:
    """(attention family, sliding window). The sparse and latent families are recognised by the
    fields only they have (DSA's indexer, MLA's compressed KV), hybrids by their layer pattern."""
    kinds = _layer_types(text)
    window = _int(text.get("sliding_window")) or _int(text.get("attention_chunk_size"))
    if text.get("index_topk") is not None or arch in _DSA_ARCHS:
        return "dsa", None
    if text.get("kv_lora_rank") is not None or arch in _MLA_ARCHS:
        return "mla", None
    if "linear_attention" in kinds or any(k in text for k in ("linear_attn_config", "full_attention_interval",
                                                              "linear_conv_kernel_dim")):
        return "hybrid_linear", None
    if any("mamba" in k for k in kinds) or any(k in text for k in ("hybrid_override_pattern", "attn_layer_period",
                                                                     "mamba_d_ssm")):
        return "hybrid_mamba", None
    if ("sliding_attention" in kinds and "full_attention" in kinds) or text.get("sliding_window_pattern") \
            or text.get("cache_implementation") == "hybrid" or _int(text.get("attention_chunk_size")):
        return "hybrid_swa", window
    if window and text.get("use_sliding_window") is not False:
        return "swa", window
    return "mha", None


def _head_dim(text: Mapping[str, Any], attention: str, facts: Mapping[str, Any]) -> int | None:
    """Explicit head_dim; for MLA the query/key width (no-RoPE part + RoPE part); else hidden/heads."""
    explicit = _int(text.get("head_dim"))
    if explicit:
        return explicit
    if attention in ("mla", "dsa"):
        nope, rope = _int(text.get("qk_nope_head_dim")), _int(text.get("qk_rope_head_dim"))
        return nope + rope if nope is not None and rope is not None else None
    hidden, heads = facts.get("model.hidden_size"), facts.get("model.num_attention_heads")
    if hidden and heads and hidden % heads == 0:
        return hidden // heads
    return None
