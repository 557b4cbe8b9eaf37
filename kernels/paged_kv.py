"""The paged KV-cache layout: what the engine allocates and every attention kernel here reads.

Layout (all tensors on one device)::

    k_cache, v_cache  [num_pages, page_size, num_kv_heads, head_dim]
                      float16 / bfloat16 / float32, or float8_e4m3fn / float8_e5m2 holding
                      value / scale (one scale per tensor, see kernels.kv_quant); the last
                      dimension is contiguous.
    block_table       [batch, max_pages] int32 or int64. Entry [b, j] is the page that holds
                      tokens j*page_size ... (j+1)*page_size - 1 of sequence b. Entries past a
                      sequence's last page are never read by the kernels, but the torch
                      references gather whole rows, so they must still be valid page ids
                      (0 is fine).
    seq_lens          [batch] int32 or int64: how many tokens of each sequence are in the cache,
                      counting the tokens being processed now (their K/V are written first).

Token ``t`` of sequence ``b`` lives in page ``block_table[b, t // page_size]`` at slot
``t % page_size``; its flat slot, the row of ``k_cache.view(-1, num_kv_heads, head_dim)``, is
``page * page_size + t % page_size`` (see :func:`flat_slots`). Pages of one sequence need not be
contiguous or ordered, and sequences can share pages (a shared prefix), since only the block table
says where a token lives.

Why this layout: a page is ``page_size`` whole tokens with every KV head, so writing a new token is
one contiguous store per head and a page can be handed from one sequence to another (prefix
caching) without copying. Any page size works, 1 included (token-granular pools).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
CACHE_DTYPES = (torch.float16, torch.bfloat16, torch.float32) + FP8_DTYPES
INDEX_DTYPES = (torch.int32, torch.int64)


@dataclass(frozen=True)
class PagedCacheShape:
    """The dimensions a paged KV cache was allocated with."""

    num_pages: int
    page_size: int
    num_kv_heads: int
    head_dim: int


def check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> PagedCacheShape:
    """Validate a K/V cache pair against the layout above and return its dimensions."""
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.dim() != 4:
            raise ValueError(f"{name} must be [num_pages, page_size, num_kv_heads, head_dim], "
                             f"got shape {tuple(cache.shape)}.")
        if cache.dtype not in CACHE_DTYPES:
            raise ValueError(f"{name} dtype {cache.dtype} is not a KV-cache dtype; use one of "
                             f"{', '.join(str(d) for d in CACHE_DTYPES)}.")
        if cache.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in head_dim (stride(-1) == 1).")
    if k_cache.shape != v_cache.shape or k_cache.dtype != v_cache.dtype:
        raise ValueError(f"k_cache and v_cache must match: {tuple(k_cache.shape)} {k_cache.dtype} vs "
                         f"{tuple(v_cache.shape)} {v_cache.dtype}.")
    return PagedCacheShape(*k_cache.shape)


def check_index(name: str, tensor: torch.Tensor, dims: int) -> None:
    """Validate an integer index tensor (block table, lengths, slots)."""
    if tensor.dim() != dims or tensor.dtype not in INDEX_DTYPES:
        raise ValueError(f"{name} must be a {dims}-d int32 or int64 tensor, got "
                         f"{tensor.dim()}-d {tensor.dtype}.")


def gather_tokens(cache: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """Every token slot each block-table row points at, in token order: [batch, max_pages * page_size, H, D].

    Used by the torch references; positions past a sequence's length hold whatever the pages hold
    and must be masked by the caller.
    """
    batch, max_pages = block_table.shape
    _, page_size, num_heads, head_dim = cache.shape
    return cache[block_table.long()].reshape(batch, max_pages * page_size, num_heads, head_dim)


def flat_slots(block_table: torch.Tensor, batch_index: torch.Tensor, positions: torch.Tensor,
               page_size: int) -> torch.Tensor:
    """Flat cache rows (int64) of the tokens at ``positions`` of sequences ``batch_index``.

    The engine uses this to know where to write new tokens' K/V (kernels.kv_quant.store_kv).
    """
    positions = positions.long()
    pages = block_table[batch_index.long(), positions // page_size].long()
    return pages * page_size + positions % page_size
