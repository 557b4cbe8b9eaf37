"""Prefill/extend attention over a paged KV cache, in Triton, and the torch reference it must match.

An extend step appends ``extend_lens[b]`` new tokens to sequence ``b`` whose first
``prefix_len = seq_lens[b] - extend_lens[b]`` tokens are already cached (a radix-cache hit, or the
earlier chunks of a chunked prefill); a plain prefill is the case ``prefix_len == 0``. The new
tokens' K/V are written to the cache first (:func:`kernels.kv_quant.store_kv`), so attention reads
prefix and new tokens alike from the pages (layout: :mod:`kernels.paged_kv`). Causal masking: new
token ``i`` sits at position ``prefix_len + i`` and sees positions ``0 ... prefix_len + i``.

Queries are packed: ``q`` is ``[sum(extend_lens), num_q_heads, head_dim]`` with sequence ``b``'s new
tokens after those of sequences ``0 ... b-1``.

The kernel
----------
Flash attention: one program per (sequence, query head, block of ``BLOCK_M`` new tokens) walks the
sequence's KV in ``BLOCK_N`` steps with an online softmax, and stops at the last position its
block can see, so the causal upper triangle is never loaded. Blocks past a sequence's new tokens
return at once, so a ragged batch costs one grid sized by its longest extend. FP8 KV is
dequantized on read as in :mod:`kernels.attention.decode` (scales folded into scores and output).

The reference
-------------
:func:`extend_attention_reference` loops over sequences, gathers each one's KV, dequantizes it to
fp32 and applies a dense causal mask.

How they compare
----------------
As for decode: the kernel rounds the softmax weights to the compute dtype before multiplying by V
and sums in a different order; tolerances per dtype are in :mod:`kernels.testing`.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from accord.kernels.launch import dot_dtype, dot_precision
from accord.kernels.paged_kv import gather_tokens

REQUIREMENTS = {
    "phases": ("prefill",),
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
}
"""What this kernel needs, mirrored by rules/llm/kernels.yaml (keys as in kernels.attention.decode)."""


def launch_config(head_dim: int) -> dict:
    """Tile sizes and warps per head width: (BLOCK_M new tokens) x (BLOCK_N KV tokens) per step.

    Chosen so that the compiled kernel keeps its tiles in registers without spilling (checked
    offline with ptxas for sm_90: about 180 registers, no stack, either width); smaller tiles for
    heads wider than 128 keep it so.
    """
    if head_dim <= 128:
        return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8}
    return {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 8}


@triton.jit
def _extend_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, block_table_ptr, seq_lens_ptr, extend_lens_ptr, q_starts_ptr,
    qk_scale, v_scale,
    stride_q_token, stride_q_head,
    stride_k_page, stride_k_slot, stride_k_head,
    stride_v_page, stride_v_slot, stride_v_head,
    stride_out_token, stride_out_head,
    stride_table_batch,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    COMPUTE: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Causal flash attention of one block of a sequence's new tokens for one query head."""
    batch = tl.program_id(0)
    head = tl.program_id(1)
    block_m = tl.program_id(2)

    extend_len = tl.load(extend_lens_ptr + batch)
    m_start = block_m * BLOCK_M
    if m_start >= extend_len:
        return
    seq_len = tl.load(seq_lens_ptr + batch)
    prefix_len = seq_len - extend_len
    q_start = tl.load(q_starts_ptr + batch).to(tl.int64)
    kv_head = head // GROUP

    offs_m = m_start + tl.arange(0, BLOCK_M)
    mask_m = offs_m < extend_len
    q_pos = prefix_len + offs_m
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    q_rows = q_start + offs_m
    q = tl.load(q_ptr + q_rows[:, None] * stride_q_token + head * stride_q_head + offs_d[None, :],
                mask=mask_m[:, None] & mask_d[None, :], other=0.0).to(COMPUTE)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    end = tl.minimum(seq_len, prefix_len + m_start + BLOCK_M)
    for block_start in range(0, end, BLOCK_N):
        pos = block_start + tl.arange(0, BLOCK_N)
        mask_n = pos < end
        page = tl.load(block_table_ptr + batch * stride_table_batch + pos // PAGE_SIZE,
                       mask=mask_n, other=0).to(tl.int64)
        slot = pos % PAGE_SIZE
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_ptr + page[:, None] * stride_k_page + slot[:, None] * stride_k_slot
                    + kv_head * stride_k_head + offs_d[None, :], mask=kv_mask, other=0.0).to(COMPUTE)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        visible = mask_n[None, :] & (pos[None, :] <= q_pos[:, None])
        scores = tl.where(visible, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + page[:, None] * stride_v_page + slot[:, None] * stride_v_slot
                    + kv_head * stride_v_head + offs_d[None, :], mask=kv_mask, other=0.0).to(COMPUTE)
        acc = acc * alpha[:, None] + tl.dot(p.to(COMPUTE), v, input_precision=DOT_PRECISION)
        m_i = m_new

    out = acc / l_i[:, None] * v_scale
    tl.store(out_ptr + q_rows[:, None] * stride_out_token + head * stride_out_head + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])


def extend_attention_triton(q, k_cache, v_cache, block_table, seq_lens, extend_lens, *, scale,
                            k_scale, v_scale, max_extend_len):
    """Launch the kernel; arguments as :func:`kernels.attention.extend_attention` (validated there)."""
    num_tokens, num_q_heads, head_dim = q.shape
    batch = seq_lens.shape[0]
    _, page_size, num_kv_heads, _ = k_cache.shape
    out = torch.empty_like(q)
    if num_tokens == 0 or max_extend_len == 0:
        return out
    q_starts = torch.cumsum(extend_lens, 0) - extend_lens
    compute = dot_dtype(q.dtype)
    config = launch_config(head_dim)
    _extend_kernel[(batch, num_q_heads, triton.cdiv(max_extend_len, config["BLOCK_M"]))](
        q, k_cache, v_cache, out, block_table, seq_lens, extend_lens, q_starts,
        scale * k_scale * math.log2(math.e), v_scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        out.stride(0), out.stride(1),
        block_table.stride(0),
        GROUP=num_q_heads // num_kv_heads, HEAD_DIM=head_dim, PAGE_SIZE=page_size,
        BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], BLOCK_D=triton.next_power_of_2(head_dim),
        COMPUTE=compute, DOT_PRECISION=dot_precision(compute),
        num_warps=config["num_warps"], num_stages=2,
    )
    return out


def extend_attention_reference(q, k_cache, v_cache, block_table, seq_lens, extend_lens, *, scale,
                               k_scale=1.0, v_scale=1.0):
    """Exact causal attention of each sequence's new tokens over its prefix and themselves, in fp32.

    Shapes and layout as :func:`kernels.attention.extend_attention`.
    """
    num_q_heads = q.shape[1]
    group = num_q_heads // k_cache.shape[2]
    out = torch.empty_like(q)
    keys_all = gather_tokens(k_cache, block_table)
    values_all = gather_tokens(v_cache, block_table)
    q_start = 0
    for b, (seq_len, extend_len) in enumerate(zip(seq_lens.tolist(), extend_lens.tolist())):
        prefix_len = seq_len - extend_len
        keys = (keys_all[b, :seq_len].float() * k_scale).repeat_interleave(group, dim=1)
        values = (values_all[b, :seq_len].float() * v_scale).repeat_interleave(group, dim=1)
        queries = q[q_start:q_start + extend_len].float()
        scores = torch.einsum("ehd,lhd->hel", queries, keys) * scale
        query_pos = prefix_len + torch.arange(extend_len, device=q.device)
        causal = torch.arange(seq_len, device=q.device)[None, :] <= query_pos[:, None]
        probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        out[q_start:q_start + extend_len] = torch.einsum("hel,lhd->ehd", probs, values).to(q.dtype)
        q_start += extend_len
    return out
