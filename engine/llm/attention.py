"""Attention backends: what the resolved attention_backend (per phase) actually runs.

A backend answers two questions over the paged KV pool, after the new tokens' K/V were written:
- `extend`: queries of new tokens [T, Hq, D] (several per sequence, after a cached prefix),
  causal within each sequence;
- `decode`: one query per sequence [B, Hq, D] over everything cached.
"torch_native" is plain torch (the reference); "triton" runs the kernels of `kernels.attention`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from engine.llm.batch import ForwardBatch
    from engine.llm.kv_cache import KVPool


class AttentionBackend:
    name = ""

    def __init__(self, head_dim: int):
        self.scale = 1.0 / math.sqrt(head_dim)

    def extend(self, q: torch.Tensor, pool: "KVPool", layer: int, batch: "ForwardBatch") -> torch.Tensor:
        raise NotImplementedError

    def decode(self, q: torch.Tensor, pool: "KVPool", layer: int, batch: "ForwardBatch") -> torch.Tensor:
        raise NotImplementedError


class TorchNativeAttention(AttentionBackend):
    """Gather each sequence's pages, then scaled-dot-product attention with an explicit mask."""

    name = "torch_native"

    def extend(self, q, pool, layer, batch):
        out = torch.empty_like(q)
        for i, (start, new, total) in enumerate(zip(batch.extend_starts, batch.extend_lens, batch.seq_lens_list)):
            pages = -(-total // pool.page_size)
            k, v = pool.gather(layer, batch.block_table[i, :pages], total)
            prefix = total - new
            rows = torch.arange(new, device=q.device)[:, None] + prefix
            mask = torch.arange(total, device=q.device)[None, :] <= rows
            out[start:start + new] = self._attend(q[start:start + new].unsqueeze(0), k.unsqueeze(0),
                                                  v.unsqueeze(0), mask[None]).squeeze(0)
        return out

    def decode(self, q, pool, layer, batch):
        length = batch.block_table.shape[1] * pool.page_size
        k, v = pool.gather(layer, batch.block_table, length)
        valid = torch.arange(length, device=q.device)[None, :] < batch.seq_lens[:, None]
        # Slots past a sequence's end hold whatever the page holds (pages are never zeroed); clear
        # them so a stray NaN cannot leak through 0 * NaN.
        k = k.masked_fill(~valid[:, :, None, None], 0)
        v = v.masked_fill(~valid[:, :, None, None], 0)
        return self._attend(q.unsqueeze(1), k, v, valid[:, None, :]).squeeze(1)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """q [B, Tq, Hq, D], k/v [B, Tk, Hkv, D], mask [B or 1, Tq, Tk] -> [B, Tq, Hq, D]."""
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=mask.unsqueeze(1), scale=self.scale,
                                             enable_gqa=q.shape[2] != k.shape[2])
        return out.transpose(1, 2)


class TritonAttention(AttentionBackend):
    """The Triton kernels of `kernels.attention`, with the resolved triton_attention_* knobs.

    On CPU they run under the Triton interpreter, which must be on before triton is imported
    (scheduler_process sets TRITON_INTERPRET=1 for such a config).
    """

    name = "triton"

    def __init__(self, head_dim: int, settings):
        super().__init__(head_dim)
        from kernels.attention import decode_attention, extend_attention

        self._decode, self._extend = decode_attention, extend_attention
        self._decode_options = dict(num_kv_splits=settings.triton_num_kv_splits,
                                    tile_size=settings.triton_split_tile_size,
                                    reduce_in_fp32=settings.triton_reduce_in_fp32)

    def extend(self, q, pool, layer, batch):
        return self._extend(q.contiguous(), pool.k[layer], pool.v[layer], batch.block_table, batch.seq_lens,
                            batch.extend_lens_tensor, scale=self.scale, k_scale=pool.k_scale,
                            v_scale=pool.v_scale, max_extend_len=max(batch.extend_lens, default=0),
                            impl="triton")

    def decode(self, q, pool, layer, batch):
        return self._decode(q.contiguous(), pool.k[layer], pool.v[layer], batch.block_table, batch.seq_lens,
                            scale=self.scale, k_scale=pool.k_scale, v_scale=pool.v_scale,
                            impl="triton", **self._decode_options)



def make_backend(name: str, head_dim: int, settings) -> AttentionBackend:
    if name == "triton":
        return TritonAttention(head_dim, settings)
    return TorchNativeAttention(head_dim)
