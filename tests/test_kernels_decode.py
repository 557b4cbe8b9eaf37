"""Decode attention: the Triton split-KV kernel against its torch reference (kernels.attention.decode).

Runs in its own process (tests/test_kernels_isolated.py): on CPU under the Triton interpreter,
on a GPU from benchmarks/gpu_check.sh. Every cache slot no sequence owns holds a poison value
(kernels.testing.paged_batch), so reading past a sequence's end fails these comparisons.
Tolerances per output dtype: kernels.testing.TOLERANCES.
"""

import pytest
import torch

from accord.kernels.testing import TOLERANCES, kernel_test_device, paged_batch, random_tensor

DEVICE = kernel_test_device()

from accord.kernels.attention import decode_attention, extend_attention  # noqa: E402  (after the process check)

SEQ_LENS = [1, 17, 64, 130]
"""One token, a partial page, whole pages (of 16 and 64), several pages with a partial last one."""


def decode_both(seq_lens, *, page_size=16, heads=(8, 2), head_dim=64, dtype=torch.float16,
                cache_dtype=None, scales=(1.0, 1.0), seed=0, index_dtype=torch.int32, **options):
    """(Triton output, reference output) for one random batch."""
    num_q_heads, num_kv_heads = heads
    batch = paged_batch(seq_lens, page_size=page_size, num_kv_heads=num_kv_heads, head_dim=head_dim,
                        cache_dtype=cache_dtype or dtype, device=DEVICE, seed=seed,
                        k_scale=scales[0], v_scale=scales[1], index_dtype=index_dtype)
    q = random_tensor((len(seq_lens), num_q_heads, head_dim), dtype, DEVICE, seed + 1)
    args = (q, batch.k_cache, batch.v_cache, batch.block_table, batch.seq_lens)
    common = {"scale": head_dim ** -0.5, "k_scale": batch.k_scale, "v_scale": batch.v_scale}
    out = decode_attention(*args, impl="triton", **common, **options)
    ref = decode_attention(*args, impl="torch", **common)
    return out, ref


HEADS = {"mha": (2, 2), "gqa4": (8, 2), "gqa8": (8, 1)}


@pytest.mark.parametrize("page_size, heads, head_dim", [
    # Each page size meets two head layouts and both head dims; each layout meets two page sizes.
    (1, "mha", 64), (1, "gqa8", 128),
    (16, "gqa4", 64), (16, "mha", 128),
    (64, "gqa8", 64), (64, "gqa4", 128),
])
def test_matches_reference_across_page_sizes_head_groups_and_head_dims(page_size, heads, head_dim):
    out, ref = decode_both(SEQ_LENS, page_size=page_size, heads=HEADS[heads], head_dim=head_dim,
                           num_kv_splits=2)
    torch.testing.assert_close(out, ref, **TOLERANCES[torch.float16])


@pytest.mark.parametrize("dtype, cache", [
    (torch.float16, "same"), (torch.bfloat16, "same"), (torch.float32, "same"),
    (torch.float16, "fp8_e4m3"), (torch.bfloat16, "fp8_e5m2"), (torch.float32, "fp8_e4m3"),
], ids=str)
def test_matches_reference_for_each_query_and_cache_dtype(dtype, cache):
    cache_dtype = {"same": dtype, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[cache]
    scales = (1.0, 1.0) if cache == "same" else (0.5, 2.0)
    out, ref = decode_both(SEQ_LENS, heads=(4, 1), dtype=dtype, cache_dtype=cache_dtype, scales=scales)
    assert out.dtype == dtype
    torch.testing.assert_close(out, ref, **TOLERANCES[dtype])


@pytest.mark.parametrize("num_kv_splits, tile_size, reduce_in_fp32", [
    (1, None, False),    # no split: stage 2 merges a single partial
    (3, None, True),     # uneven splits
    (16, None, False),   # more splits than tokens: most splits of short sequences are empty
    (4, 16, False),      # tile-aligned boundaries
    (2, 7, True),        # a tile that is not a power of two
    (8, 64, True),       # tiles longer than short sequences
])
def test_matches_reference_for_split_settings(num_kv_splits, tile_size, reduce_in_fp32):
    out, ref = decode_both([1, 9, 130], heads=(4, 1), num_kv_splits=num_kv_splits, tile_size=tile_size,
                           reduce_in_fp32=reduce_in_fp32)
    torch.testing.assert_close(out, ref, **TOLERANCES[torch.float16])


@pytest.mark.parametrize("tile_size", [None, 16])
def test_a_sequence_gets_identical_bits_whatever_it_is_batched_with(tile_size):
    lengths = [130, 5, 77]
    batch = paged_batch(lengths, page_size=16, num_kv_heads=2, head_dim=64, cache_dtype=torch.float16,
                        device=DEVICE, seed=3)
    q = random_tensor((3, 8, 64), torch.float16, DEVICE, seed=4)
    options = {"scale": 0.125, "num_kv_splits": 4, "tile_size": tile_size}
    together = decode_attention(q, batch.k_cache, batch.v_cache, batch.block_table, batch.seq_lens, **options)
    alone = decode_attention(q[:1], batch.k_cache, batch.v_cache, batch.block_table[:1], batch.seq_lens[:1],
                             **options)
    assert torch.equal(together[:1], alone)


def test_a_sequence_with_no_cached_tokens_gets_zeros():
    out, ref = decode_both([0, 9])
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    torch.testing.assert_close(out, ref, **TOLERANCES[torch.float16])


def test_accepts_int64_block_tables_and_lengths():
    out, ref = decode_both(SEQ_LENS, heads=(4, 1), index_dtype=torch.int64)
    torch.testing.assert_close(out, ref, **TOLERANCES[torch.float16])


def test_decode_equals_extend_by_one_token():
    lengths = [1, 40, 99]
    batch = paged_batch(lengths, page_size=16, num_kv_heads=1, head_dim=64, cache_dtype=torch.float16,
                        device=DEVICE, seed=5)
    q = random_tensor((3, 4, 64), torch.float16, DEVICE, seed=6)
    cache = (batch.k_cache, batch.v_cache, batch.block_table, batch.seq_lens)
    decoded = decode_attention(q, *cache, scale=0.125)
    extended = extend_attention(q, *cache, torch.ones_like(batch.seq_lens), scale=0.125)
    torch.testing.assert_close(decoded, extended, **TOLERANCES[torch.float16])


@pytest.mark.parametrize("change, message", [
    ({"q_heads": 5}, "not a multiple of num_kv_heads"),
    ({"q_dim": 32}, "does not match the KV cache head_dim"),
    ({"num_kv_splits": 0}, "num_kv_splits"),
    ({"tile_size": 0}, "tile_size"),
    ({"impl": "cuda"}, "impl must be"),
    ({"seq_lens": "float"}, "seq_lens must be"),
])
def test_rejects_malformed_arguments_with_a_clear_message(change, message):
    batch = paged_batch([5, 9], page_size=16, num_kv_heads=2, head_dim=64, cache_dtype=torch.float16,
                        device=DEVICE)
    q = random_tensor((2, change.get("q_heads", 4), change.get("q_dim", 64)), torch.float16, DEVICE, seed=1)
    seq_lens = batch.seq_lens.float() if change.get("seq_lens") == "float" else batch.seq_lens
    options = {key: change[key] for key in ("num_kv_splits", "tile_size", "impl") if key in change}
    with pytest.raises(ValueError, match=message):
        decode_attention(q, batch.k_cache, batch.v_cache, batch.block_table, seq_lens, scale=0.125, **options)


def test_heads_wider_than_the_kernel_supports_fall_to_the_reference_only():
    batch = paged_batch([3], page_size=16, num_kv_heads=1, head_dim=288, cache_dtype=torch.float16,
                        device=DEVICE)
    q = random_tensor((1, 2, 288), torch.float16, DEVICE, seed=1)
    args = (q, batch.k_cache, batch.v_cache, batch.block_table, batch.seq_lens)
    with pytest.raises(ValueError, match="exceeds 256"):
        decode_attention(*args, scale=0.06)
    assert decode_attention(*args, scale=0.06, impl="torch").shape == (1, 2, 288)
