"""The frozen, hashed resolved configuration: the only input of the engine processes.

The hash covers system, facts and values (not provenance or warnings, which explain the values but
do not change what runs), computed over canonical JSON so every process can check it cheaply.
"""

from __future__ import annotations

import hashlib
import json
from types import MappingProxyType
from typing import Any, Mapping


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: the same data always gives the same bytes.

    Frozen mappings and tuples are written as objects and arrays, like the dicts and lists they
    were made from. The keys are put in order here rather than with `sort_keys` (which sorts
    (key, value) pairs, about twice the cost of the encoding itself for a config's ~500 values);
    the bytes are the same."""
    return json.dumps(_in_key_order(obj), separators=(",", ":"), ensure_ascii=False)


def _in_key_order(value: Any) -> Any:
    """A plain copy of `value` for JSON: every mapping a dict in sorted key order, tuples as lists."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, Mapping):
        return {k: v if type(v := value[k]) in _SCALARS else _in_key_order(v) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [v if type(v) in _SCALARS else _in_key_order(v) for v in value]
    return value


def config_hash(system: str, facts: Mapping[str, Any], values: Mapping[str, Any]) -> str:
    payload = {"system": system, "facts": facts, "values": values}
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


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
        return MappingProxyType({k: v if type(v) in _KEPT else _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple([v if type(v) in _KEPT else _freeze(v) for v in value])
    return value


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
        object.__setattr__(self, "facts", _freeze(dict(facts)))
        object.__setattr__(self, "values", _freeze(dict(values)))
        object.__setattr__(self, "provenance", _freeze(dict(provenance or {})))
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
