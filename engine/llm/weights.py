"""Where weights come from: seeded dummy tensors or a local safetensors checkpoint (HF names).

Each rank asks for exactly its shard (`get(name, dim, index, parts)`), so a TP rank reads only its
slice of the file. Dummy weights are generated as the *full* tensor from a seed derived from the
random seed and the tensor's name, then sliced: every TP/PP split of the same seed therefore holds
the same model, which is what makes tp=2 comparable with tp=1 token for token.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import torch

from accord.engine.llm.model_config import ModelConfig
from accord.resolver.errors import UsageError
from accord.rules.models.location import BUILTIN_NAMES, local_path


def _shard(full: torch.Tensor, dim: int | None, index: int, parts: int) -> torch.Tensor:
    if dim is None or parts == 1:
        return full
    size = full.shape[dim] // parts
    return full.narrow(dim, index * size, size)


class DummyWeights:
    """Random weights, identical for a given seed however the model is split."""

    def __init__(self, config: ModelConfig, seed: int):
        self.config = config
        self.seed = seed

    def shape(self, name: str) -> tuple[int, ...]:
        c = self.config
        q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        leaf, kind = name.rsplit(".", 2)[-2:]
        shapes = {
            "embed_tokens": (c.vocab_size, c.hidden_size), "lm_head": (c.vocab_size, c.hidden_size),
            "q_proj": (q, c.hidden_size), "k_proj": (kv, c.hidden_size), "v_proj": (kv, c.hidden_size),
            "o_proj": (c.hidden_size, q), "gate_proj": (c.intermediate_size, c.hidden_size),
            "up_proj": (c.intermediate_size, c.hidden_size), "down_proj": (c.hidden_size, c.intermediate_size),
            "q_norm": (c.head_dim,), "k_norm": (c.head_dim,),  # Qwen3's per-head q/k RMSNorm
        }
        shape = shapes.get(leaf, (c.hidden_size,))  # the remaining tensors are norm weights
        return shape[:1] if kind == "bias" else shape  # a bias has one value per output row

    def get(self, name: str, dim: int | None = None, index: int = 0, parts: int = 1) -> torch.Tensor:
        shape = self.shape(name)
        if len(shape) == 1 and not name.endswith(".bias"):
            return torch.ones(shape)  # norms start as the identity scale
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
        std = 1.0 if name.endswith("embed_tokens.weight") else 0.1 if len(shape) == 1 else shape[1] ** -0.5
        full = torch.randn(shape, generator=generator) * std
        return _shard(full, dim, index, parts)

    def has(self, name: str) -> bool:
        return True


class SafetensorsWeights:
    """Tensors of every *.safetensors file of a local folder, read lazily slice by slice."""

    def __init__(self, folder: Path):
        from safetensors import safe_open

        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise UsageError(f"--model-path {str(folder)!r} has no *.safetensors files; add the "
                             "checkpoint or serve random weights with --load-format dummy.")
        self._handles = [safe_open(str(f), framework="pt") for f in files]
        self._where = {name: h for h in self._handles for name in h.keys()}

    def has(self, name: str) -> bool:
        return name in self._where

    def get(self, name: str, dim: int | None = None, index: int = 0, parts: int = 1) -> torch.Tensor:
        if name not in self._where:
            raise UsageError(f"the checkpoint has no tensor {name!r}; it does not look like a Llama "
                             "checkpoint in HF naming.")
        tensor_slice = self._where[name].get_slice(name)
        if dim is None or parts == 1:
            return tensor_slice[:]
        shape = tensor_slice.get_shape()
        size = shape[dim] // parts
        index_expr = [slice(None)] * len(shape)
        index_expr[dim] = slice(index * size, (index + 1) * size)
        return tensor_slice[tuple(index_expr)]


# HF tensor leaf -> GGUF tensor leaf (llama.cpp's names).
_GGUF_LEAVES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
                "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
                "post_attention_layernorm": "ffn_norm"}
_GGUF_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}


def gguf_name(name: str) -> str:
    """The GGUF tensor holding an HF-named tensor."""
    if name in _GGUF_TOP:
        return _GGUF_TOP[name]
    _, _, index, rest = name.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{index}.{_GGUF_LEAVES[module]}.{kind}"


class GGUFWeights:
    """Tensors of a GGUF file, dequantized to fp32 with the `gguf` package, under their HF names.

    The header comes from the pure-Python reader; the tensor bytes are memory-mapped. llama.cpp's
    converter interleaves the rotary halves of Llama's q/k rows; they are put back in HF's
    rotate-half order here, so the model's RoPE applies unchanged.
    """

    def __init__(self, path: str, config: ModelConfig):
        import numpy as np

        from accord.rules.models.gguf_header import read_header

        self.header, self.config = read_header(path), config
        self._data = np.memmap(path, dtype=np.uint8, mode="r")
        self._permuted = self.header.architecture == "llama"

    def has(self, name: str) -> bool:
        return gguf_name(name) in self.header.tensors

    def _full(self, name: str) -> torch.Tensor:
        import numpy as np
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, dequantize

        if not self.has(name):
            raise UsageError(f"the GGUF file has no tensor {gguf_name(name)!r} (for {name}).")
        shape, kind, offset = self.header.tensors[gguf_name(name)]
        qtype = GGMLQuantizationType(kind)
        block, block_bytes = GGML_QUANT_SIZES[qtype]
        count = int(np.prod(shape))
        start = self.header.data_offset + offset
        raw = self._data[start:start + count // block * block_bytes]
        rows = count // shape[-1]
        values = dequantize(np.asarray(raw).reshape(rows, -1), qtype).reshape(shape)
        full = torch.from_numpy(np.array(values, dtype=np.float32))  # own, writable copy
        c = self.config
        if self._permuted and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = c.num_heads if "q_proj" in name else c.num_kv_heads
            full = full.reshape(heads, c.head_dim // 2, 2, -1).transpose(1, 2).reshape(full.shape)
        return full

    def get(self, name: str, dim: int | None = None, index: int = 0, parts: int = 1) -> torch.Tensor:
        return _shard(self._full(name), dim, index, parts)


def weight_source(model_path: str | None, load_format: str, config: ModelConfig, seed: int):
    """'dummy' (and 'auto' for the built-in tiny-llama) -> seeded random; a GGUF file; else safetensors."""
    folder = local_path(model_path)
    builtin = folder in BUILTIN_NAMES.values()
    if load_format == "dummy" or (load_format == "auto" and builtin):
        return DummyWeights(config, seed)
    if config.gguf_path is not None:
        return GGUFWeights(config.gguf_path, config)
    if builtin:
        raise UsageError(f"--load-format {load_format} needs --model-path pointing at a local checkpoint; "
                         f"the built-in {model_path} has random weights only (--load-format auto or dummy).")
    return SafetensorsWeights(folder)
