"""engine.llm.kv_cache: pool size from the resolved budget, page allocation, per-layer FP8 scales."""

from __future__ import annotations

import json

import pytest
import torch

from accord.engine.llm.kv_cache import GIB, KVPool, layer_kv_scales, pool_tokens
from accord.resolver.errors import UsageError


def test_pool_size_is_the_static_budget_minus_weights_capped_by_max_total_tokens():
    budget = pool_tokens(mem_fraction_static=0.5, device_mem_gib=2, max_total_tokens=None,
                         weight_bytes=GIB // 2, bytes_per_token=1024)
    assert budget == (GIB - GIB // 2) // 1024
    capped = pool_tokens(mem_fraction_static=0.5, device_mem_gib=2, max_total_tokens=1000,
                         weight_bytes=GIB // 2, bytes_per_token=1024)
    assert capped == 1000
    assert pool_tokens(mem_fraction_static=None, device_mem_gib=None, max_total_tokens=777,
                       weight_bytes=GIB, bytes_per_token=1024) == 777


def test_a_budget_smaller_than_the_weights_is_a_clear_error():
    with pytest.raises(UsageError, match="--mem-fraction-static"):
        pool_tokens(mem_fraction_static=0.1, device_mem_gib=1, max_total_tokens=None,
                    weight_bytes=GIB, bytes_per_token=1024)


def test_pages_are_handed_out_once_and_page_zero_never():
    pool = KVPool(num_pages=3, page_size=4, num_layers=1, num_kv_heads=1, head_dim=2,
                  dtype=torch.float32, device=torch.device("cpu"))
    first = pool.alloc(2)
    assert first == [1, 2] and pool.alloc(2) is None and pool.free_pages == 1
    pool.release(first)
    assert sorted(pool.alloc(3)) == [1, 2, 3]
    assert pool.capacity_tokens == 12


def test_pool_holds_one_scale_per_layer_and_unscaled_by_default():
    layout = dict(num_pages=2, page_size=4, num_layers=2, num_kv_heads=1, head_dim=8,
                  dtype=torch.float8_e4m3fn, device=torch.device("cpu"))
    assert KVPool(**layout).kv_scales == [1.0, 1.0]
    pool = KVPool(**layout, kv_scales=[0.5, 2.0])
    assert pool.kv_scales == [0.5, 2.0] and pool.k[1].dtype == torch.float8_e4m3fn
    with pytest.raises(ValueError, match="1 KV scales given for 2 layers"):
        KVPool(**layout, kv_scales=[0.5])


def scales_file(tmp_path, ranks: dict) -> str:
    path = tmp_path / "kv_scales.json"
    path.write_text(json.dumps({"kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": ranks}}))
    return str(path)


def test_fp8_scales_come_from_the_file_for_this_rank_and_stage(tmp_path):
    path = scales_file(tmp_path, {"0": {"0": 0.1, "1": 0.2, "2": 0.3}, "1": {"0": 1.1, "1": 1.2, "2": 1.3}})
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        assert layer_kv_scales(path, dtype, attn_tp_rank=1, num_layers=3, layers=range(1, 3)) == [1.2, 1.3]
    assert layer_kv_scales(path, torch.float8_e4m3fn, attn_tp_rank=0, num_layers=3,
                           layers=range(0, 3)) == [0.1, 0.2, 0.3]


def test_without_a_file_or_an_fp8_cache_every_scale_is_one(tmp_path):
    assert layer_kv_scales(None, torch.float8_e4m3fn, attn_tp_rank=0, num_layers=2, layers=range(2)) == [1.0, 1.0]
    # A 16-bit cache stores values as they are: the file is not even read (upstream ignores it too).
    missing = str(tmp_path / "absent.json")
    assert layer_kv_scales(missing, torch.bfloat16, attn_tp_rank=0, num_layers=2, layers=range(2)) == [1.0, 1.0]


@pytest.mark.parametrize("content,problem", [
    (None, "cannot be read"),
    ("{not json", "not valid JSON"),
    ({"kv_cache": {"scaling_factor": {"1": {"0": 1.0, "1": 1.0}}}}, "no scales for TP rank 0"),
    ({"kv_cache": {"scaling_factor": {"0": {"0": 1.0}}}}, r"lacks scales for layers \[1\]"),
    ({"kv_cache": {"scaling_factor": {"0": {"0": 1.0, "1": -2}}}}, "positive finite"),
])
def test_a_scales_file_that_cannot_serve_the_model_is_a_usage_error_naming_it(tmp_path, content, problem):
    path = tmp_path / "scales.json"
    if content is not None:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(UsageError, match=problem) as error:
        layer_kv_scales(str(path), torch.float8_e4m3fn, attn_tp_rank=0, num_layers=2, layers=range(2))
    assert str(error.value).startswith(f"quantization_param_path '{path}'")
