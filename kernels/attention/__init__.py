"""Attention over the paged KV cache: the two entry points the LLM engine calls.

``impl="triton"`` runs the Triton kernels (a phase resolved to ``triton``); ``impl="torch"`` runs
the torch references beside them (``torch_native``). Both take the same arguments and return the
same shapes; the cache layout is documented in :mod:`kernels.paged_kv`.

- :func:`decode_attention`: one new query token per sequence (split-KV flash decoding).
- :func:`extend_attention`: a block of new tokens per sequence, causal, after a cached prefix.

Inputs are validated here, once, so the kernels can assume well-formed tensors.
"""

from __future__ import annotations

import torch

from accord.kernels.attention import decode, extend
from accord.kernels.launch import check_impl, require_launchable
from accord.kernels.paged_kv import PagedCacheShape, check_cache, check_index


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     block_table: torch.Tensor, seq_lens: torch.Tensor, *, scale: float,
                     num_kv_splits: int = 8, tile_size: int | None = None,
                     reduce_in_fp32: bool = False, k_scale: float = 1.0, v_scale: float = 1.0,
                     impl: str = "triton") -> torch.Tensor:
    """Attention of each sequence's newest token over all its cached tokens.

    q: [batch, num_q_heads, head_dim] (num_q_heads a multiple of num_kv_heads: GQA/MQA/MHA);
    k_cache, v_cache, block_table, seq_lens: see :mod:`kernels.paged_kv` (seq_lens counts the new
    token, whose K/V are already written). scale: softmax scale, usually head_dim ** -0.5.
    num_kv_splits, tile_size, reduce_in_fp32: the resolved triton_attention_* flags (how the
    Triton kernel splits and reduces; the torch reference computes the exact result in one pass).
    k_scale, v_scale: per-tensor FP8 dequantization scales (1.0 for 16-bit caches).
    Returns [batch, num_q_heads, head_dim] in q's dtype.
    """
    check_impl(impl)
    _check_query(q, 3, "[batch, num_q_heads, head_dim]")
    shape = check_cache(k_cache, v_cache)
    _check_heads(q, shape)
    check_index("block_table", block_table, 2)
    check_index("seq_lens", seq_lens, 1)
    if block_table.shape[0] != q.shape[0] or seq_lens.shape[0] != q.shape[0]:
        raise ValueError(f"q has {q.shape[0]} sequences but block_table has {block_table.shape[0]} "
                         f"rows and seq_lens {seq_lens.shape[0]} entries; they must agree.")
    if isinstance(num_kv_splits, bool) or not isinstance(num_kv_splits, int) or num_kv_splits < 1:
        raise ValueError(f"num_kv_splits (triton_attention_num_kv_splits) must be an integer >= 1, "
                         f"got {num_kv_splits!r}.")
    if tile_size is not None and (isinstance(tile_size, bool) or not isinstance(tile_size, int)
                                  or tile_size < 1):
        raise ValueError(f"tile_size (triton_attention_split_tile_size) must be None or an integer "
                         f">= 1, got {tile_size!r}.")
    if impl == "torch":
        return decode.decode_attention_reference(q, k_cache, v_cache, block_table, seq_lens,
                                                 scale=scale, k_scale=k_scale, v_scale=v_scale)
    _check_kernel_head_dim(shape.head_dim, decode.REQUIREMENTS)
    require_launchable(q, k_cache, v_cache, block_table, seq_lens)
    return decode.decode_attention_triton(q, k_cache, v_cache, block_table, seq_lens, scale=scale,
                                          num_kv_splits=num_kv_splits, tile_size=tile_size,
                                          reduce_in_fp32=reduce_in_fp32, k_scale=k_scale,
                                          v_scale=v_scale)


def extend_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     block_table: torch.Tensor, seq_lens: torch.Tensor, extend_lens: torch.Tensor, *,
                     scale: float, k_scale: float = 1.0, v_scale: float = 1.0,
                     max_extend_len: int | None = None, impl: str = "triton") -> torch.Tensor:
    """Causal attention of each sequence's new tokens over its cached prefix and themselves.

    q: [sum(extend_lens), num_q_heads, head_dim], sequences' new tokens packed in batch order.
    seq_lens: tokens in the cache per sequence, new ones included (their K/V already written);
    extend_lens: new tokens per sequence (prefix = seq_lens - extend_lens). max_extend_len: the
    largest extend_lens entry if the caller knows it (saves a device-to-host sync); other
    arguments as :func:`decode_attention`. Returns a tensor shaped like q.
    """
    check_impl(impl)
    _check_query(q, 3, "[num_new_tokens, num_q_heads, head_dim]")
    shape = check_cache(k_cache, v_cache)
    _check_heads(q, shape)
    check_index("block_table", block_table, 2)
    check_index("seq_lens", seq_lens, 1)
    check_index("extend_lens", extend_lens, 1)
    if not block_table.shape[0] == seq_lens.shape[0] == extend_lens.shape[0]:
        raise ValueError(f"block_table ({block_table.shape[0]} rows), seq_lens ({seq_lens.shape[0]}) "
                         f"and extend_lens ({extend_lens.shape[0]}) must describe the same batch.")
    if impl == "torch":
        return extend.extend_attention_reference(q, k_cache, v_cache, block_table, seq_lens,
                                                 extend_lens, scale=scale, k_scale=k_scale,
                                                 v_scale=v_scale)
    _check_kernel_head_dim(shape.head_dim, extend.REQUIREMENTS)
    require_launchable(q, k_cache, v_cache, block_table, seq_lens, extend_lens)
    if max_extend_len is None:
        max_extend_len = int(extend_lens.max()) if extend_lens.numel() else 0
    return extend.extend_attention_triton(q, k_cache, v_cache, block_table, seq_lens, extend_lens,
                                          scale=scale, k_scale=k_scale, v_scale=v_scale,
                                          max_extend_len=max_extend_len)


def _check_query(q: torch.Tensor, dims: int, layout: str) -> None:
    if q.dim() != dims:
        raise ValueError(f"q must be {layout}, got shape {tuple(q.shape)}.")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"q must be float16, bfloat16 or float32, got {q.dtype}.")
    if q.stride(-1) != 1:
        raise ValueError("q must be contiguous in head_dim (stride(-1) == 1).")


def _check_heads(q: torch.Tensor, shape: PagedCacheShape) -> None:
    num_q_heads, head_dim = q.shape[-2], q.shape[-1]
    if head_dim != shape.head_dim:
        raise ValueError(f"q head_dim {head_dim} does not match the KV cache head_dim {shape.head_dim}.")
    if num_q_heads % shape.num_kv_heads:
        raise ValueError(f"num_q_heads {num_q_heads} is not a multiple of num_kv_heads "
                         f"{shape.num_kv_heads} (grouped-query attention needs equal groups).")


def _check_kernel_head_dim(head_dim: int, requirements: dict) -> None:
    widest = requirements["max_head_dim"]
    if head_dim > widest:
        raise ValueError(f"head_dim {head_dim} exceeds {widest}, the widest head the Triton attention "
                         "kernels keep in registers; use impl='torch' (attention_backend torch_native).")
