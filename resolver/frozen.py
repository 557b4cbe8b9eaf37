"""The frozen, hashed resolved configuration: the only input of the engine processes.

The hash covers system, facts and values (not provenance or warnings, which explain the values but
do not change what runs), computed over canonical JSON so every process can check it cheaply.
"""

from __future__ import annotations

import hashlib
import json
import math
from json.encoder import encode_basestring
from types import MappingProxyType
from typing import Any, Mapping

from accord.resolver.solving.cache import process_store


def _plain(value: Any) -> Any:
    """What JSON writes for a frozen mapping: the dict it was made from (tuples it writes as arrays)."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_plain)


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: the same data always gives the same bytes.
    Frozen mappings and tuples are written as the objects and arrays they were made from."""
    return _ENCODER.encode(obj)


# Pieces of `_flat_json`, kept between configs by the cache layer (resolver/solving/cache.py: one
# policy, bounded, off with ACCORD_SOLVER_CACHE=0): a config's ~500 values are mostly the same from
# one launch to the next (catalog defaults), and writing each as JSON, and sorting the names, costs
# more than the rest of a hot resolve's bookkeeping (benchmarks/bench_cache_layer.py prints what
# they save on a hot resolve).
_PIECES = process_store("config_json_pieces", 65536)   # (name, type, value) -> '"name":value'
_ORDERS = process_store("config_key_orders", 65536)    # the names of a mapping, in its order -> sorted
# How JSON writes the values whose piece is kept: those that equal only values writing the same
# JSON once the type is part of the key (floats are not: 0.0 == -0.0, and NaN equals nothing).
# These are the encoder's own writers, called directly: a cold run writes every piece once.
_WRITERS: dict[type, Any] = {str: encode_basestring, int: int.__repr__,
                             bool: lambda value: "true" if value else "false", type(None): lambda value: "null"}


def _flat_json(mapping: Mapping[str, Any]) -> str:
    """`canonical_json(mapping)` for a mapping with string keys, built from kept pieces."""
    names = tuple(mapping)
    order = _ORDERS.view().get(names)
    if order is None:
        if not all(type(name) is str for name in names):
            return canonical_json(mapping)
        order = _ORDERS.keep(names, sorted(names))
    kept = _PIECES.view()  # read directly: a store call per value would cost what it saves
    pieces = []
    for name in order:
        value = mapping[name]
        kind = type(value)
        write = _WRITERS.get(kind)
        if write is not None:
            key = (name, kind, value)
            piece = kept.get(key)
            if piece is None:
                piece = _PIECES.keep(key, f"{encode_basestring(name)}:{write(value)}")
        elif kind is float:  # written each time (see `_WRITERS`), but without the encoder's overhead
            piece = f"{encode_basestring(name)}:{_float_json(value)}"
        else:
            piece = f"{encode_basestring(name)}:{canonical_json(value)}"
        pieces.append(piece)
    return "{" + ",".join(pieces) + "}"


def _float_json(value: float) -> str:
    """A float as JSON writes it: its repr, or NaN / Infinity / -Infinity."""
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def config_hash(system: str, facts: Mapping[str, Any], values: Mapping[str, Any]) -> str:
    """SHA-256 of `canonical_json({"system": system, "facts": facts, "values": values})`, written from
    pieces (kept ones, unless the cache layer is off; tests/test_frozen.py checks it against `json`)."""
    text = f'{{"facts":{_flat_json(facts)},"system":{canonical_json(system)},"values":{_flat_json(values)}}}'
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ConfigHashMismatch(ValueError):
    """A process was handed a config whose content does not match its hash."""


# Most values are scalars: answered by one type lookup, before any isinstance (an abstract
# `Mapping` check costs microseconds, and a config has thousands of values). The lookup is also
# written inside the comprehensions, so a scalar entry costs no call at all.
_SCALARS = frozenset({str, int, float, bool, type(None)})
# What a frozen dict keeps without a call: scalars, and read-only mappings (the resolver hands over
# shared provenance entries as such, and freezing returns one unchanged).
_KEPT = _SCALARS | {MappingProxyType}


def _freeze(value: Any) -> Any:
    if type(value) in _SCALARS:
        return value
    if isinstance(value, dict):
        # A copy in one C call, then only the entries that need freezing replaced (a config's
        # values and provenance are almost all scalars and shared read-only entries).
        frozen = dict(value)
        for key, item in value.items():
            if type(item) not in _KEPT:
                frozen[key] = _freeze(item)
        return MappingProxyType(frozen)
    if isinstance(value, list):
        return tuple([v if type(v) in _KEPT else _freeze(v) for v in value])
    return value


def _freeze_mapping(mapping: Mapping[str, Any]) -> MappingProxyType:
    """A read-only copy of any mapping (a dict is copied once, inside `_freeze`)."""
    return _freeze(mapping if isinstance(mapping, dict) else dict(mapping))


def thaw(value: Any) -> Any:
    if type(value) in _SCALARS:
        return value
    if isinstance(value, (dict, MappingProxyType)) or isinstance(value, Mapping):
        return {k: v if type(v) in _SCALARS else thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


class ResolvedConfig:
    """An immutable resolved configuration.

    `values` maps every flag name of the system to its resolved value (except retired flags and
    deprecated ones the user did not type, which do nothing of their own); `provenance` maps each flag
    to `{"source": "user"|"config"|"env"|"default"|"rule"|"fact", "rule"?: id}`.
    """

    __slots__ = ("system", "facts", "values", "provenance", "warnings", "hash")

    def __init__(self, system: str, facts: Mapping[str, Any], values: Mapping[str, Any],
                 provenance: Mapping[str, Any] | None = None, warnings: list[str] | tuple = (),
                 expected_hash: str | None = None):
        digest = config_hash(system, facts, values)
        if expected_hash is not None and expected_hash != digest:
            raise ConfigHashMismatch(
                f"resolved config hash mismatch: expected {expected_hash[:12]}..., content hashes to "
                f"{digest[:12]}...; the config was modified after resolution. Re-run `accord resolve`.")
        object.__setattr__(self, "system", system)
        object.__setattr__(self, "facts", _freeze_mapping(facts))
        object.__setattr__(self, "values", _freeze_mapping(values))
        object.__setattr__(self, "provenance", _freeze_mapping(provenance or {}))
        object.__setattr__(self, "warnings", tuple(warnings))
        object.__setattr__(self, "hash", digest)

    def __setattr__(self, name, value):
        raise AttributeError("ResolvedConfig is frozen")

    def __getitem__(self, flag: str) -> Any:
        return self.values[flag]

    def to_dict(self) -> dict:
        return {
            "system": self.system,
            "facts": thaw(self.facts),
            "values": thaw(self.values),
            "provenance": thaw(self.provenance),
            "warnings": list(self.warnings),
            "hash": self.hash,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ResolvedConfig":
        """Rebuild a config handed over by a parent process; refuses one whose hash does not match."""
        return cls(data["system"], data["facts"], data["values"], data.get("provenance"),
                   data.get("warnings", ()), expected_hash=data["hash"])
