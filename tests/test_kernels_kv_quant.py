"""FP8 KV cache: Triton quantize/dequantize/store_kv against their torch references (kernels.kv_quant).

Runs in its own process (tests/test_kernels_isolated.py). Quantization is compared byte for byte:
kernel and reference multiply by the same fp32 reciprocal and round to nearest even.
"""

import json

import pytest
import torch

from accord.kernels.testing import TOLERANCES, kernel_test_device, random_tensor

DEVICE = kernel_test_device()

from accord.kernels import kv_quant  # noqa: E402  (after the process check)
from accord.kernels.paged_kv import flat_slots  # noqa: E402

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]
STEP = {torch.float8_e4m3fn: 2.0 ** -3, torch.float8_e5m2: 2.0 ** -2}
"""Relative spacing of normal FP8 numbers: round to nearest is within half of it."""


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


@pytest.mark.parametrize("scale", [1.0, 0.37, 4.0])
@pytest.mark.parametrize("fp8", FP8, ids=str)
def test_quantize_matches_reference_byte_for_byte(fp8, scale):
    x = random_tensor((3, 1000), torch.float32, DEVICE, seed=1, scale=20.0)
    x[0, :5] = torch.tensor([0.0, -0.0, -1e-9, 1e6, -1e6])   # signed zeros, far out of range
    # Multiples of 1/64 on [-64, 64): exact ties between FP8 neighbours, and carries into the
    # next power of two (31.1 -> 32), both of which the Triton interpreter's own conversion gets wrong.
    x = torch.cat([x.flatten(), torch.arange(-4096, 4096, device=DEVICE) / 64 * scale])
    out = kv_quant.quantize(x, scale, dtype=fp8)
    assert out.dtype == fp8 and out.shape == x.shape
    assert torch.equal(as_bytes(out), as_bytes(kv_quant.quantize(x, scale, dtype=fp8, impl="torch")))


@pytest.mark.parametrize("scale", [1.0, 0.37, 4.0])
@pytest.mark.parametrize("fp8", FP8, ids=str)
def test_negative_zero_and_tiny_negatives_are_stored_as_negative_zero(fp8, scale):
    """-0.0 and negatives below half the smallest FP8 subnormal round to -0: byte 0x80, as torch
    stores them (a compiled kernel that negates by subtracting from zero writes 0x00 instead)."""
    subnormal = torch.finfo(fp8).tiny * torch.finfo(fp8).eps      # smallest positive FP8 number
    tiny = [-0.0, -1e-30, -1e-9 * scale, -subnormal * scale * 0.49, -torch.finfo(torch.float32).tiny]
    x = torch.tensor(tiny + [0.0, 1e-9 * scale], device=DEVICE)
    expected = [0x80] * len(tiny) + [0x00, 0x00]
    assert as_bytes(kv_quant.quantize(x, scale, dtype=fp8)).tolist() == expected
    assert as_bytes(kv_quant.quantize(x, scale, dtype=fp8, impl="torch")).tolist() == expected
    k = x[:, None, None].expand(-1, 1, 16).contiguous()            # the write path: store_kv
    k_cache, v_cache = make_cache(fp8, page_size=16, num_pages=1, heads=1, head_dim=16)
    kv_quant.store_kv(k_cache, v_cache, k, k, torch.arange(len(x), device=DEVICE),
                      k_scale=scale, v_scale=scale)
    assert as_bytes(k_cache)[0, :len(x), 0, 0].tolist() == expected


@pytest.mark.parametrize("fp8", FP8, ids=str)
def test_quantize_saturates_instead_of_overflowing(fp8):
    limit = kv_quant.fp8_max(fp8)
    x = torch.tensor([3 * limit, -3 * limit, float("inf"), float("-inf")], device=DEVICE)
    out = kv_quant.quantize(x, 1.0, dtype=fp8).float()
    assert out.tolist() == [limit, -limit, limit, -limit]


@pytest.mark.parametrize("fp8", FP8, ids=str)
def test_round_trip_is_within_half_an_fp8_step(fp8):
    x = random_tensor((2048,), torch.float32, DEVICE, seed=2)
    x = x.sign() * x.abs().clamp(min=0.05)      # stay among normal FP8 numbers
    scale = 0.02
    back = kv_quant.dequantize(kv_quant.quantize(x, scale, dtype=fp8), scale)
    assert ((back - x).abs() <= x.abs() * STEP[fp8] / 2).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_dequantize_matches_reference(dtype):
    stored = kv_quant.quantize(random_tensor((777,), torch.float32, DEVICE, seed=3), 0.5,
                               dtype=torch.float8_e4m3fn)
    out = kv_quant.dequantize(stored, 0.5, dtype=dtype)
    assert out.dtype == dtype
    torch.testing.assert_close(out, kv_quant.dequantize(stored, 0.5, dtype=dtype, impl="torch"),
                               **TOLERANCES[dtype])


def make_cache(cache_dtype, page_size, num_pages=6, heads=2, head_dim=64):
    """A K and a V cache whose every byte starts at a recognisable value."""
    k_cache = torch.full((num_pages, page_size, heads, head_dim), 7.0, device=DEVICE).to(cache_dtype)
    return k_cache, k_cache.clone()


@pytest.mark.parametrize("cache_dtype, scales", [
    (torch.float8_e4m3fn, (0.25, 3.0)),
    (torch.float8_e5m2, (1.0, 0.5)),
    (torch.float16, (1.0, 1.0)),
    (torch.bfloat16, (1.0, 1.0)),
], ids=str)
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_store_kv_writes_exactly_what_the_reference_writes(page_size, cache_dtype, scales):
    value_dtype = torch.bfloat16 if cache_dtype == torch.bfloat16 else torch.float16
    k = random_tensor((5, 2, 64), value_dtype, DEVICE, seed=4)
    v = random_tensor((5, 2, 64), value_dtype, DEVICE, seed=5)
    slots = torch.tensor([3, 0, -1, 2 * page_size + 1, 5 * page_size], device=DEVICE)  # -1: padding
    kernel_cache = make_cache(cache_dtype, page_size)
    reference_cache = make_cache(cache_dtype, page_size)
    kv_quant.store_kv(*kernel_cache, k, v, slots, k_scale=scales[0], v_scale=scales[1])
    kv_quant.store_kv(*reference_cache, k, v, slots, k_scale=scales[0], v_scale=scales[1], impl="torch")
    for got, want in zip(kernel_cache, reference_cache):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    untouched = torch.ones(6 * page_size, dtype=torch.bool, device=DEVICE)
    untouched[slots[slots >= 0]] = False
    assert (kernel_cache[0].view(-1, 2, 64)[untouched].float() == 7.0).all()


def test_store_kv_lands_where_the_block_table_says():
    k_cache, v_cache = make_cache(torch.float16, page_size=4)
    block_table = torch.tensor([[5, 2], [0, 3]], device=DEVICE)
    batch_index = torch.tensor([0, 0, 1], device=DEVICE)
    positions = torch.tensor([3, 4, 6], device=DEVICE)
    k = random_tensor((3, 2, 64), torch.float16, DEVICE, seed=6)
    kv_quant.store_kv(k_cache, v_cache, k, k, flat_slots(block_table, batch_index, positions, 4))
    assert torch.equal(k_cache[5, 3], k[0]) and torch.equal(k_cache[2, 0], k[1])
    assert torch.equal(k_cache[3, 2], k[2])


def test_store_kv_refuses_scales_on_a_16_bit_cache():
    k_cache, v_cache = make_cache(torch.float16, page_size=4)
    k = random_tensor((1, 2, 64), torch.float16, DEVICE, seed=6)
    with pytest.raises(ValueError, match="FP8 caches only"):
        kv_quant.store_kv(k_cache, v_cache, k, k, torch.tensor([0], device=DEVICE), k_scale=0.5)


@pytest.mark.parametrize("flag, model_dtype, expected", [
    ("auto", torch.float16, torch.float16),
    ("bf16", torch.float16, torch.bfloat16),
    ("bfloat16", torch.float32, torch.bfloat16),
    ("fp8_e4m3", torch.bfloat16, torch.float8_e4m3fn),
    ("fp8_e5m2", torch.float16, torch.float8_e5m2),
])
def test_cache_dtype_follows_the_resolved_flag(flag, model_dtype, expected):
    assert kv_quant.cache_dtype(flag, model_dtype) == expected


def test_cache_dtype_names_the_supported_values_for_an_unsupported_one():
    with pytest.raises(ValueError, match="'nvfp4' has no kernels here; supported: auto, bf16"):
        kv_quant.cache_dtype("nvfp4", torch.float16)


def write_scales(tmp_path, table):
    path = tmp_path / "kv_scales.json"
    path.write_text(json.dumps({"model_type": "llama", "kv_cache": {"dtype": "float8_e4m3fn",
                                                                     "scaling_factor": table}}))
    return path


def test_load_kv_scales_reads_one_scale_per_layer_of_the_rank(tmp_path):
    path = write_scales(tmp_path, {"0": {"0": 0.5, "1": 0.25}, "1": {"0": 2.0, "1": 4}})
    assert kv_quant.load_kv_scales(path, tp_rank=1, num_layers=2) == [2.0, 4.0]


@pytest.mark.parametrize("table, message", [
    ({"1": {"0": 1.0}}, "no scales for TP rank 0"),
    ({"0": {"0": 1.0}}, r"lacks scales for layers \[1\]"),
    ({"0": {"0": 1.0, "1": -2.0}}, "scale of layer 1"),
    ({"0": {"0": 1.0, "1": "x"}}, "scale of layer 1"),
])
def test_load_kv_scales_names_what_is_wrong(tmp_path, table, message):
    with pytest.raises(ValueError, match=message):
        kv_quant.load_kv_scales(write_scales(tmp_path, table), tp_rank=0, num_layers=2)


def test_load_kv_scales_reports_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ValueError, match="cannot be read"):
        kv_quant.load_kv_scales(tmp_path / "missing.json", tp_rank=0, num_layers=1)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        kv_quant.load_kv_scales(bad, tp_rank=0, num_layers=1)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="no kv_cache.scaling_factor"):
        kv_quant.load_kv_scales(bad, tp_rank=0, num_layers=1)
