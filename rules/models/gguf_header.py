"""A pure-Python reader of a GGUF file's header: its metadata and tensor directory, no tensor data.

The resolver needs a GGUF model's facts (head counts, context length, dtype) without numpy or torch,
so this walks the header with `struct` only. Arrays of strings (the tokenizer's vocabulary and
merges) are decoded only when asked for, otherwise skipped, which keeps a fact lookup cheap. The
mapping from metadata keys to `model.*` facts is data: rules/models/gguf.yaml.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

from accord.resolver.errors import UsageError
from accord.rules.paths import MODELS_DIR

MAGIC = b"GGUF"
KEY_MAP_FILE = MODELS_DIR / "gguf.yaml"
# GGUF value type id -> struct format (scalars); 8 is a string, 9 an array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class GGUFHeader:
    """Metadata (key -> value) and tensors (name -> (shape, ggml type, offset)) of one file."""

    def __init__(self, metadata: dict[str, Any], tensors: dict[str, tuple[tuple[int, ...], int, int]],
                 data_offset: int):
        self.metadata, self.tensors, self.data_offset = metadata, tensors, data_offset

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def arch_key(self, suffix: str) -> Any:
        return self.metadata.get(f"{self.architecture}.{suffix}")


def _read(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise EOFError
    return struct.unpack(fmt, data)[0]


def _string(f: BinaryIO) -> str:
    return f.read(_read(f, "<Q")).decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int, keep_arrays: bool) -> Any:
    if kind in _SCALARS:
        return _read(f, _SCALARS[kind])
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        item, count = _read(f, "<I"), _read(f, "<Q")
        if item in _SCALARS and not keep_arrays:
            f.seek(count * struct.calcsize(_SCALARS[item]), 1)
            return _Skipped(count)
        if item == _STRING and not keep_arrays:
            for _ in range(count):
                f.seek(_read(f, "<Q"), 1)
            return _Skipped(count)
        return [_value(f, item, keep_arrays) for _ in range(count)]
    raise ValueError(f"unknown GGUF value type {kind}")


class _Skipped:
    """An array that was not decoded; its length is still known (e.g. the vocabulary size)."""

    def __init__(self, count: int):
        self.count = count

    def __len__(self) -> int:
        return self.count


def read_header(path: str | Path, keep_arrays: bool = False) -> GGUFHeader:
    """Parse the header; a file that is not GGUF is a UsageError naming it."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            if f.read(4) != MAGIC:
                raise UsageError(f"{path} is not a GGUF file (no GGUF magic); point --model-path at a "
                                 ".gguf file or a Hugging Face folder with config.json.")
            version = _read(f, "<I")
            if version < 2:
                raise UsageError(f"{path}: GGUF version {version} is too old; convert it again with a "
                                 "current llama.cpp.")
            n_tensors, n_kv = _read(f, "<Q"), _read(f, "<Q")
            metadata = {}
            for _ in range(n_kv):
                key = _string(f)
                metadata[key] = _value(f, _read(f, "<I"), keep_arrays)
            tensors = {}
            for _ in range(n_tensors):
                name = _string(f)
                dims = tuple(_read(f, "<Q") for _ in range(_read(f, "<I")))
                kind, offset = _read(f, "<I"), _read(f, "<Q")
                tensors[name] = (tuple(reversed(dims)), kind, offset)  # row-major, as torch sees it
            align = int(metadata.get("general.alignment", 32))
            start = f.tell()
            data_offset = (start + align - 1) // align * align
    except (OSError, EOFError, ValueError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read the GGUF header of {path}: {err or 'truncated file'}.") from None
    return GGUFHeader(metadata, tensors, data_offset)


def _key_map() -> dict[str, Any]:
    import yaml  # a GGUF file only; imported here to keep `accord resolve` quick to start

    return yaml.safe_load(KEY_MAP_FILE.read_text(encoding="utf-8"))


def gguf_facts(path: str | Path) -> dict[str, Any]:
    """The `model.*` facts a GGUF file states, by the key map in rules/models/gguf.yaml."""
    header = read_header(path)
    keys = _key_map()
    arch = header.architecture
    facts: dict[str, Any] = {}
    hf_arch = keys["architectures"].get(arch)
    if hf_arch:
        facts["model.architecture"] = hf_arch
    for fact, key in keys["facts"].items():
        value = header.metadata.get(key.format(arch=arch))
        if isinstance(value, int) and not isinstance(value, bool):
            facts[fact] = value
    if "model.vocab_size" not in facts and isinstance(header.metadata.get("tokenizer.ggml.tokens"), _Skipped):
        facts["model.vocab_size"] = len(header.metadata["tokenizer.ggml.tokens"])
    heads, hidden = facts.get("model.num_attention_heads"), facts.get("model.hidden_size")
    if "model.head_dim" not in facts and heads and hidden and hidden % heads == 0:
        facts["model.head_dim"] = hidden // heads
    if heads is not None:
        facts.setdefault("model.num_key_value_heads", heads)
    file_type = header.metadata.get("general.file_type")
    facts["model.dtype"] = keys["file_types"].get(file_type, keys["quantized_dtype"])
    facts.update({"model.attention": "mha", "model.sliding_window": None, "model.moe_experts": 0,
                  "model.has_sinks": False, "model.is_encoder_decoder": False,
                  "model.is_multimodal": False, "model.quant_method": "gguf"})
    return dict(sorted(facts.items()))
