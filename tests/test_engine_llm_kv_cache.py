"""engine.llm.kv_cache: pool size from the resolved budget, FP8 storage, page allocation."""

from __future__ import annotations

import pytest
import torch

from engine.llm.kv_cache import GIB, KVPool, pool_tokens, storage_dtype
from resolver.errors import UsageError


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


def test_storage_dtypes_follow_kv_cache_dtype():
    assert storage_dtype("auto", torch.float16) is torch.float16
    assert storage_dtype("bf16", torch.float32) is torch.bfloat16
    assert storage_dtype("fp8_e4m3", torch.bfloat16) is torch.float8_e4m3fn
    assert storage_dtype("fp8_e5m2", torch.bfloat16) is torch.float8_e5m2


@pytest.mark.parametrize("dtype,tol", [(torch.float8_e4m3fn, 0.07), (torch.float8_e5m2, 0.13)])
def test_fp8_pool_stores_float8_and_reads_back_close(dtype, tol):
    pool = KVPool(num_pages=4, page_size=2, num_layers=1, num_kv_heads=2, head_dim=8, dtype=dtype,
                  model_dtype=torch.float32, device=torch.device("cpu"))
    k = torch.randn(3, 2, 8) * 3
    v = torch.randn(3, 2, 8) * 1000  # beyond e4m3's range: saturates instead of becoming NaN
    slots = torch.tensor([2, 3, 4])  # page 1 (slots 2, 3) and page 2 (slot 4)
    pool.write(0, slots, k, v)
    assert pool.k[0].dtype == dtype
    k_back, v_back = pool.gather(0, torch.tensor([1, 2]), 3)
    assert k_back.dtype == torch.float32 and torch.isfinite(v_back).all()
    assert ((k_back - k).abs() <= tol * k.abs() + 1e-2).all()


def test_pages_are_handed_out_once_and_page_zero_never():
    pool = KVPool(num_pages=3, page_size=4, num_layers=1, num_kv_heads=1, head_dim=2,
                  dtype=torch.float32, model_dtype=torch.float32, device=torch.device("cpu"))
    first = pool.alloc(2)
    assert first == [1, 2] and pool.alloc(2) is None and pool.free_pages == 1
    pool.release(first)
    assert sorted(pool.alloc(3)) == [1, 2, 3]
    assert pool.capacity_tokens == 12
