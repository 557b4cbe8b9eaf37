"""Paged decode attention: split-KV flash decoding in Triton, and the torch reference it must match.

Decode gives each sequence one new query token, which attends to every token of its sequence in
the paged KV cache (layout: :mod:`kernels.paged_kv`).

The kernel
----------
One program per (sequence, KV head) would leave most of a GPU idle at small batch and long
context, so each sequence's KV is cut into ``num_kv_splits`` contiguous splits that run as
separate programs (stage 1, grid ``batch x num_kv_heads x num_kv_splits``). Each program runs the
online softmax over its split and writes a normalised partial output and its log-sum-exp; stage 2
(grid ``batch x num_q_heads``) merges the splits exactly, weighting each partial by
``exp(lse_split - lse_total)``.

- Split boundaries: a sequence of ``n`` tokens is cut at multiples of
  ``split_len = tile * ceil(ceil(n / tile) / num_kv_splits)`` where ``tile`` is ``tile_size``
  (``triton_attention_split_tile_size``) or 1 when unset. Boundaries depend only on the sequence's
  own length and the two settings, never on the rest of the batch, so a sequence gets bit-identical
  results whatever it is batched with; a tile size additionally keeps every boundary on a
  ``tile_size`` multiple. Splits past the end of a short sequence are empty and skipped by stage 2.
- GQA: one stage-1 program serves all query heads that share a KV head (a block of
  ``BLOCK_H >= 16`` rows, the smallest ``tl.dot`` on GPUs), so each K/V tile is read once per group.
- ``reduce_in_fp32`` (``triton_attention_reduce_in_fp32``): partial outputs are stored in fp32
  instead of the query dtype. The log-sum-exps are always fp32.
- FP8 KV (dequantize on read): K/V are converted exactly to the compute dtype; ``k_scale`` is
  folded into the score scale and ``v_scale`` into the output, so no scaled copy is ever made.

The reference
-------------
:func:`decode_attention_reference` gathers each sequence's whole (padded) KV, dequantizes it to
fp32 and computes exact softmax attention in one pass; the split settings do not apply to it.

How they compare
----------------
Same inputs, same maths, different rounding: the kernel rounds the softmax weights to the compute
dtype before multiplying by V (as flash attention does), sums in a different order, and with
``reduce_in_fp32=False`` rounds partial outputs to the query dtype. Tests hold the two to the
per-dtype tolerances in :mod:`kernels.testing`.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from accord.kernels.launch import dot_dtype, dot_precision
from accord.kernels.paged_kv import gather_tokens

LAUNCH_CONFIG = {"BLOCK_N": 64, "num_warps": 4}
"""Stage 1 tiles: BLOCK_N KV tokens per inner step. Compiled offline for sm_90 (head_dim 128, GQA
8:1) this keeps everything in about 80 registers with no spills; BLOCK_N 128 doubles that."""

REQUIREMENTS = {
    "phases": ("decode",),
    "platforms": ("cuda", "rocm", "cpu"),
    "kv_cache_dtypes": ("auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2"),
    "min_triton": "3.2",
    "min_cuda_sm": {  # {first Triton release: lowest CUDA capability}, from kernels/capabilities.yaml
        "auto": {"3.2": 80, "3.4": 0},
        "bf16": {"3.2": 80, "3.4": 0},
        "bfloat16": {"3.2": 80, "3.4": 0},
        "fp8_e4m3": {"3.2": 90, "3.3": 89},
        "fp8_e5m2": {"3.2": 80, "3.4": 0},
    },
    "max_cuda_sm": {"3.2": 90, "3.3": None},
    "max_head_dim": 256,
    "flag_minimums": {"triton_attention_num_kv_splits": 1, "triton_attention_split_tile_size": 1},
}
"""What this kernel needs, mirrored by rules/llm/kernels.yaml: the attention phases whose resolved
backend (triton, or torch_native for the reference) runs it, the platforms the Triton kernel runs
on ("cpu": under the interpreter), the kv_cache_dtype values kernel and reference both handle, the
oldest Triton release it is probed with, the CUDA capabilities it builds for under each Triton
release (lowest per KV dtype, newest overall: steps read by kernels.capabilities.at_release; the
Triton 3.2 and 3.3 compilers lower its tl.dot only from sm_80, Triton 3.2 turns e4m3 into bf16
through a cvt that needs sm_90 and its ptxas knows no Blackwell), the widest head, and the smallest
legal value of its flags."""


@triton.jit
def _decode_split_kernel(
    q_ptr, k_ptr, v_ptr, block_table_ptr, seq_lens_ptr, part_out_ptr, part_lse_ptr,
    qk_scale, v_scale,
    stride_q_batch, stride_q_head,
    stride_k_page, stride_k_slot, stride_k_head,
    stride_v_page, stride_v_slot, stride_v_head,
    stride_table_batch,
    stride_part_batch, stride_part_head, stride_part_split,
    stride_lse_batch, stride_lse_head,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
    NUM_SPLITS: tl.constexpr, TILE: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    COMPUTE: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Stage 1: online softmax of one KV head's query group over one split of one sequence."""
    batch = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    seq_len = tl.load(seq_lens_ptr + batch)
    split_len = TILE * tl.cdiv(tl.cdiv(seq_len, TILE), NUM_SPLITS)
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    offs_h = tl.arange(0, BLOCK_H)
    heads = kv_head * GROUP + offs_h
    mask_h = offs_h < GROUP
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    q = tl.load(q_ptr + batch * stride_q_batch + heads[:, None] * stride_q_head + offs_d[None, :],
                mask=mask_h[:, None] & mask_d[None, :], other=0.0).to(COMPUTE)

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    for block_start in range(start, end, BLOCK_N):
        pos = block_start + tl.arange(0, BLOCK_N)
        mask_n = pos < end
        page = tl.load(block_table_ptr + batch * stride_table_batch + pos // PAGE_SIZE,
                       mask=mask_n, other=0).to(tl.int64)
        slot = pos % PAGE_SIZE
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_ptr + page[:, None] * stride_k_page + slot[:, None] * stride_k_slot
                    + kv_head * stride_k_head + offs_d[None, :], mask=kv_mask, other=0.0).to(COMPUTE)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        scores = tl.where(mask_n[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + page[:, None] * stride_v_page + slot[:, None] * stride_v_slot
                    + kv_head * stride_v_head + offs_d[None, :], mask=kv_mask, other=0.0).to(COMPUTE)
        acc = acc * alpha[:, None] + tl.dot(p.to(COMPUTE), v, input_precision=DOT_PRECISION)
        m_i = m_new

    lse_ptrs = part_lse_ptr + batch * stride_lse_batch + heads * stride_lse_head + split
    if end > start:
        out = acc / l_i[:, None] * v_scale
        part_ptrs = (part_out_ptr + batch * stride_part_batch + heads[:, None] * stride_part_head
                     + split * stride_part_split + offs_d[None, :])
        tl.store(part_ptrs, out.to(part_out_ptr.dtype.element_ty), mask=mask_h[:, None] & mask_d[None, :])
        tl.store(lse_ptrs, m_i + tl.log2(l_i), mask=mask_h)
    else:
        tl.store(lse_ptrs, tl.full([BLOCK_H], float("-inf"), tl.float32), mask=mask_h)


@triton.jit
def _decode_merge_kernel(
    part_out_ptr, part_lse_ptr, out_ptr,
    stride_part_batch, stride_part_head, stride_part_split,
    stride_lse_batch, stride_lse_head,
    stride_out_batch, stride_out_head,
    HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Stage 2: merge one query head's split partials by their log-sum-exp (base 2)."""
    batch = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM

    lse = tl.load(part_lse_ptr + batch * stride_lse_batch + head * stride_lse_head + offs_s,
                  mask=offs_s < NUM_SPLITS, other=float("-inf"))
    filled = lse > float("-inf")
    lse_max = tl.max(lse, 0)
    lse_max = tl.where(lse_max > float("-inf"), lse_max, 0.0)
    weights = tl.where(filled, tl.exp2(lse - lse_max), 0.0)
    parts = tl.load(part_out_ptr + batch * stride_part_batch + head * stride_part_head
                    + offs_s[:, None] * stride_part_split + offs_d[None, :],
                    mask=filled[:, None] & mask_d[None, :], other=0.0).to(tl.float32)
    total = tl.sum(weights, 0)
    out = tl.sum(parts * weights[:, None], 0) / tl.where(total > 0.0, total, 1.0)
    tl.store(out_ptr + batch * stride_out_batch + head * stride_out_head + offs_d,
             out.to(out_ptr.dtype.element_ty), mask=mask_d)


def decode_attention_triton(q, k_cache, v_cache, block_table, seq_lens, *, scale, num_kv_splits,
                            tile_size, reduce_in_fp32, k_scale, v_scale):
    """Launch both stages; arguments as :func:`kernels.attention.decode_attention` (validated there)."""
    batch, num_q_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    group = num_q_heads // num_kv_heads
    part_dtype = torch.float32 if reduce_in_fp32 else q.dtype
    part_out = torch.empty(batch, num_q_heads, num_kv_splits, head_dim, dtype=part_dtype, device=q.device)
    part_lse = torch.empty(batch, num_q_heads, num_kv_splits, dtype=torch.float32, device=q.device)
    out = torch.empty(batch, num_q_heads, head_dim, dtype=q.dtype, device=q.device)
    block_d = triton.next_power_of_2(head_dim)
    compute = dot_dtype(q.dtype)

    _decode_split_kernel[(batch, num_kv_heads, num_kv_splits)](
        q, k_cache, v_cache, block_table, seq_lens, part_out, part_lse,
        scale * k_scale * math.log2(math.e), v_scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_table.stride(0),
        part_out.stride(0), part_out.stride(1), part_out.stride(2),
        part_lse.stride(0), part_lse.stride(1),
        GROUP=group, HEAD_DIM=head_dim, PAGE_SIZE=page_size,
        NUM_SPLITS=num_kv_splits, TILE=tile_size or 1,
        BLOCK_H=max(16, triton.next_power_of_2(group)), BLOCK_N=LAUNCH_CONFIG["BLOCK_N"],
        BLOCK_D=block_d, COMPUTE=compute, DOT_PRECISION=dot_precision(compute),
        num_warps=LAUNCH_CONFIG["num_warps"], num_stages=2,
    )
    _decode_merge_kernel[(batch, num_q_heads)](
        part_out, part_lse, out,
        part_out.stride(0), part_out.stride(1), part_out.stride(2),
        part_lse.stride(0), part_lse.stride(1),
        out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, NUM_SPLITS=num_kv_splits,
        BLOCK_S=triton.next_power_of_2(num_kv_splits), BLOCK_D=block_d,
        num_warps=4,
    )
    return out


def decode_attention_reference(q, k_cache, v_cache, block_table, seq_lens, *, scale, k_scale=1.0,
                               v_scale=1.0):
    """Exact softmax attention of each sequence's one query over its cached tokens, in fp32.

    Shapes and layout as :func:`kernels.attention.decode_attention`. A sequence with no tokens
    gets a zero output (the kernel's convention too).
    """
    batch, num_q_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    keys = gather_tokens(k_cache, block_table).float() * k_scale
    values = gather_tokens(v_cache, block_table).float() * v_scale
    positions = torch.arange(keys.shape[1], device=q.device)
    cached = positions[None, :] < seq_lens.to(q.device)[:, None]
    # Slots past a sequence's end hold whatever their pages hold (NaN, even): zero them, or a
    # 0 * NaN in P @ V would leak through.
    keys = keys.masked_fill(~cached[:, :, None, None], 0.0)
    values = values.masked_fill(~cached[:, :, None, None], 0.0)
    queries = q.float().reshape(batch, num_kv_heads, group, head_dim)
    scores = torch.einsum("bhgd,bthd->bhgt", queries, keys) * scale
    scores = scores.masked_fill(~cached[:, None, None, :], float("-inf"))
    # A row with no cached token is all -inf, and softmax makes it NaN: call that row zero.
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    out = torch.einsum("bhgt,bthd->bhgd", probs, values)
    return out.reshape(batch, num_q_heads, head_dim).to(q.dtype)
