"""resolver/frozen.py: the config hash is SHA-256 of the canonical JSON, whatever pieces it keeps.

The expected hash is computed here independently, with `json.dumps(sort_keys=True)` (frozen
mappings written as the dicts they were made from), so the remembered JSON pieces `config_hash` builds from can never change a hash.
"""

from __future__ import annotations

import hashlib
import json
from types import MappingProxyType

import pytest

from accord.resolver.frozen import ResolvedConfig, config_hash
from accord.resolver.solving import cache


def _expected(system, facts, values) -> str:
    text = json.dumps({"system": system, "facts": facts, "values": values}, default=dict,
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


CASES = [
    ("llm", {}, {}),
    ("llm", {"gpu.sm": 90, "platform": "cuda", "interconnect.ib": ["mlx5_0"]},
     {"tp_size": 8, "b": None, "a": True, "mem": 0.85, "sizes": [1, 2, 4], "name": "é\"\\\n"}),
    # Values equal in Python that write differently in JSON: each must keep its own bytes.
    ("x", {"a": 0.0}, {"v": 1}), ("x", {"a": -0.0}, {"v": True}), ("x", {"a": 1.0}, {"v": 1.0}),
    ("x", {"n": float("nan"), "i": float("inf")}, {"v": float("-inf")}),
    # Frozen input (a config rebuilt from another one) and keys that are not strings.
    ("x", MappingProxyType({"k": (1, 2)}), {"m": MappingProxyType({"z": 1, "a": [MappingProxyType({"q": 0})]})}),
    ("x", {1: "one"}, {"v": 1}), ("x", {'q"é\n': "\u2028"}, {"\x00": ""}),
]


@pytest.mark.parametrize("system, facts, values", CASES)
def test_hash_is_sha256_of_sorted_json(system, facts, values):
    for _ in range(2):  # the second time from the remembered pieces
        assert config_hash(system, facts, values) == _expected(system, facts, values)


@pytest.mark.parametrize("system, facts, values", CASES)
def test_hash_is_the_same_with_the_cache_layer_off_and_keeps_no_piece(system, facts, values):
    stores = [store for name, store in cache.process_stores().items() if name.startswith("config_")]
    for store in stores:
        store.forget()
    with cache.uncached():  # the same code, every piece written afresh
        assert config_hash(system, facts, values) == _expected(system, facts, values)
    assert [len(store) for store in stores] == [0] * len(stores)


def test_equal_but_differently_written_values_hash_differently():
    assert config_hash("x", {"a": 0.0}, {}) != config_hash("x", {"a": -0.0}, {})
    assert config_hash("x", {}, {"v": 1}) != config_hash("x", {}, {"v": True})


def test_config_rebuilt_from_its_dict_keeps_its_hash_and_freezes_values():
    config = ResolvedConfig("llm", {"gpu.count": 8}, {"sizes": [1, 2], "p": {"a": 1}},
                            {"sizes": {"source": "default"}})
    again = ResolvedConfig.from_dict(json.loads(config.to_json()))
    assert again.hash == config.hash == _expected("llm", {"gpu.count": 8}, {"sizes": [1, 2], "p": {"a": 1}})
    assert again.values["sizes"] == (1, 2)
    with pytest.raises(TypeError):
        again.values["p"]["a"] = 2  # nested mappings are read-only too
