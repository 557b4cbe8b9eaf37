"""Extend/prefill attention: the Triton kernel against its torch reference (kernels.attention.extend).

Runs in its own process (tests/test_kernels_isolated.py): on CPU under the Triton interpreter,
on a GPU from benchmarks/gpu_check.sh. Unowned cache slots hold a poison value
(kernels.testing.paged_batch). Tolerances per output dtype: kernels.testing.TOLERANCES.
"""

import pytest
import torch

from accord.kernels.testing import TOLERANCES, kernel_test_device, paged_batch, random_tensor

DEVICE = kernel_test_device()

from accord.kernels.attention import extend_attention  # noqa: E402  (after the process check)

PREFIX_AND_NEW = [(0, 9), (5, 1), (16, 20), (37, 140), (3, 0)]
"""(cached prefix, new tokens) per sequence: a plain prefill, one new token, a page-aligned prefix,
a mid-page prefix with more new tokens than one program's query block (128), and a sequence with
nothing new in this batch."""


def extend_both(prefix_and_new, *, page_size=16, heads=(4, 1), head_dim=64, dtype=torch.float16,
                cache_dtype=None, scales=(1.0, 1.0), seed=0):
    """(Triton output, reference output) for one random batch."""
    num_q_heads, num_kv_heads = heads
    seq_lens = [prefix + new for prefix, new in prefix_and_new]
    batch = paged_batch(seq_lens, page_size=page_size, num_kv_heads=num_kv_heads, head_dim=head_dim,
                        cache_dtype=cache_dtype or dtype, device=DEVICE, seed=seed,
                        k_scale=scales[0], v_scale=scales[1])
    extend_lens = torch.tensor([new for _, new in prefix_and_new], dtype=torch.int32, device=DEVICE)
    q = random_tensor((int(extend_lens.sum()), num_q_heads, head_dim), dtype, DEVICE, seed + 1)
    args = (q, batch.k_cache, batch.v_cache, batch.block_table, batch.seq_lens, extend_lens)
    common = {"scale": head_dim ** -0.5, "k_scale": batch.k_scale, "v_scale": batch.v_scale}
    return extend_attention(*args, impl="triton", **common), extend_attention(*args, impl="torch", **common)


@pytest.mark.parametrize("page_size, heads, head_dim", [
    (1, (2, 2), 64),      # MHA, token-granular pages
    (16, (4, 2), 128),    # GQA 2:1 over two KV heads
    (64, (8, 1), 64),     # GQA 8:1 (MQA), pages longer than most sequences
    (16, (4, 1), 256),    # GQA 4:1 at the widest head, on its smaller tiles
], ids=["page1-mha-d64", "page16-gqa2-d128", "page64-gqa8-d64", "page16-gqa4-d256"])
def test_matches_reference_across_page_sizes_head_groups_and_head_dims(page_size, heads, head_dim):
    out, ref = extend_both(PREFIX_AND_NEW, page_size=page_size, heads=heads, head_dim=head_dim)
    torch.testing.assert_close(out, ref, **TOLERANCES[torch.float16])


@pytest.mark.parametrize("dtype, cache", [
    (torch.bfloat16, "same"), (torch.float32, "same"),
    (torch.float16, "fp8_e4m3"), (torch.bfloat16, "fp8_e5m2"),
], ids=str)
def test_matches_reference_for_each_query_and_cache_dtype(dtype, cache):
    cache_dtype = {"same": dtype, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[cache]
    scales = (1.0, 1.0) if cache == "same" else (2.0, 0.25)
    out, ref = extend_both([(0, 12), (21, 30)], dtype=dtype, cache_dtype=cache_dtype, scales=scales)
    assert out.dtype == dtype
    torch.testing.assert_close(out, ref, **TOLERANCES[dtype])


def test_extending_in_chunks_equals_one_prefill():
    """Chunked prefill: the second chunk, attending over the first as a cached prefix, gives the
    rows a single prefill of the whole prompt gives."""
    batch = paged_batch([50], page_size=16, num_kv_heads=1, head_dim=64, cache_dtype=torch.float16,
                        device=DEVICE, seed=7)
    q = random_tensor((50, 4, 64), torch.float16, DEVICE, seed=8)
    cache = (batch.k_cache, batch.v_cache, batch.block_table)
    whole = extend_attention(q, *cache, batch.seq_lens, batch.seq_lens, scale=0.125)
    first = extend_attention(q[:20], *cache, torch.tensor([20], dtype=torch.int32, device=DEVICE),
                             torch.tensor([20], dtype=torch.int32, device=DEVICE), scale=0.125)
    second = extend_attention(q[20:], *cache, batch.seq_lens,
                              torch.tensor([30], dtype=torch.int32, device=DEVICE), scale=0.125)
    torch.testing.assert_close(torch.cat([first, second]), whole, **TOLERANCES[torch.float16])


def test_a_batch_with_no_new_tokens_returns_an_empty_result():
    out, ref = extend_both([(4, 0), (9, 0)])
    assert out.shape == ref.shape == (0, 4, 64)


def test_rejects_a_batch_described_inconsistently():
    batch = paged_batch([5, 9], page_size=16, num_kv_heads=1, head_dim=64, cache_dtype=torch.float16,
                        device=DEVICE)
    q = random_tensor((3, 4, 64), torch.float16, DEVICE, seed=1)
    extend_lens = torch.tensor([3], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="must describe the same batch"):
        extend_attention(q, batch.k_cache, batch.v_cache, batch.block_table, batch.seq_lens, extend_lens,
                         scale=0.125)
