"""Attention backends: what a phase's resolved backend (prefill_attention_backend,
decode_attention_backend) runs, all of it from kernels/.

Both backends the engine implements make the same calls with a different ``impl``: ``triton``
runs the Triton kernels, ``torch_native`` the torch references that live beside them. A step of
either phase first writes its new tokens' K/V into their cache slots (quantize-on-write when the
cache is FP8), then attends over the paged cache (dequantize-on-read):

- decode (one new token per sequence): split-KV flash decoding, shaped by the resolved
  triton_attention_* flags (the reference computes the exact result in one pass and takes none);
- extend (several new tokens per sequence after a cached prefix): causal attention.

The model's other kernel, RMSNorm, follows the same ``impl`` (see engine.llm.model), so one step
runs entirely on one implementation. On CPU the Triton kernels run only under the Triton
interpreter, switched on before the kernels are first imported (engine.llm.server).

A torch_native decode step over a 16-bit or fp32 cache whose lengths the host knows takes a
shorter road to the same fp32 attention: the rows of every cached token are worked out once per
step (:meth:`AttentionBackend.plan`, shared by all layers), each layer writes its K/V with one
``index_copy_`` per cache, gathers just those rows and hands them to torch's fused
``scaled_dot_product_attention`` (each KV head's group of query heads as its query rows). At batch
size one and a few hundred tokens, the reference's per-layer work (whole pages gathered, masks,
two einsums, a softmax fix-up) costs more than the attention itself; this is a few ops per layer.
FP8 caches and CUDA-graph batches (no host lengths) take the reference path.

An extend step (new prompts, or a mixed step: running decodes plus prompt chunks) on that cache
takes the same road: its one-token sequences as above, the others padded into one batched causal
``scaled_dot_product_attention`` call (queries padded to the longest chunk, keys to the longest
sequence, a mask for causality and padding), instead of the reference's per-sequence loop with
whole-page gathers, which at a hundred short prompts costs more than the model's matmuls.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from accord.kernels.attention import decode_attention, extend_attention
from accord.kernels.kv_quant import store_kv
from accord.kernels.launch import INTERPRETER
from accord.kernels.paged_kv import FP8_DTYPES
from accord.resolver.errors import UsageError

if TYPE_CHECKING:
    from accord.engine.llm.batch import ForwardBatch
    from accord.engine.llm.kv_cache import KVPool
    from accord.engine.llm.settings import EngineSettings

IMPLS = {"torch_native": "torch", "triton": "triton"}
"""The kernels/ implementation each attention backend runs."""


@dataclasses.dataclass
class DecodeRows:
    """Where a torch_native decode step reads each sequence's cached tokens, for every layer."""

    rows: torch.Tensor               # [batch, longest] flat cache row of token t of sequence b
    mask: torch.Tensor | None        # [batch, 1, 1, longest] True where t < its length; None if all
                                     # sequences are equally long (then nothing is padding)


@dataclasses.dataclass
class ExtendRows:
    """Where a torch_native extend step reads and writes, for every layer."""

    single: torch.Tensor             # [S] token index of each one-token sequence (a decode)
    decode: DecodeRows | None        # their cached-token rows
    multi_rows: torch.Tensor | None  # [M, longest] cached rows of each longer sequence
    query_index: torch.Tensor | None  # [M, longest chunk] token index of each query (padding: 0)
    query_valid: torch.Tensor | None  # [M, longest chunk] True where that query exists
    mask: torch.Tensor | None        # [M, longest chunk, longest] causal and padding mask


def decode_rows(block_table: torch.Tensor, kv_lens: list[int], seq_lens: torch.Tensor, page_size: int) -> DecodeRows:
    """The cached-token rows of sequences that each bring one token."""
    longest = max(kv_lens)
    offsets = torch.arange(longest, device=block_table.device)
    rows = block_table[:, offsets // page_size] * page_size + offsets % page_size
    if min(kv_lens) == longest:
        return DecodeRows(rows, None)
    cached = offsets[None, :] < seq_lens[:, None]
    # Padding reads the sequence's first token (written, so finite: a masked-out NaN would
    # still poison P @ V) and is masked out of the softmax.
    return DecodeRows(torch.where(cached, rows, rows[:, :1]), cached[:, None, None, :])


class AttentionBackend:
    """One phase's attention: ``name`` is the resolved backend, ``impl`` the kernels/ implementation."""

    def __init__(self, name: str, head_dim: int, settings: "EngineSettings", device: torch.device):
        self.name = name
        self.impl = IMPLS[name]
        if self.impl == "triton" and device.type == "cpu" and not INTERPRETER:
            # Found now rather than at the first request, which would fail in its first kernel.
            raise UsageError("--attention-backend triton on CPU runs under the Triton interpreter, which "
                             "this process did not switch on: set TRITON_INTERPRET=1 before the engine "
                             "starts (accord serve does so), or pass --attention-backend torch_native.")
        self.scale = head_dim ** -0.5
        # The split flags shape the Triton decode kernel only; the reference has no splits.
        self._decode_options = {}
        if self.impl == "triton":
            self._decode_options = dict(num_kv_splits=settings.triton_num_kv_splits,
                                        tile_size=settings.triton_split_tile_size,
                                        reduce_in_fp32=settings.triton_reduce_in_fp32)

    def plan(self, batch: "ForwardBatch", pool: "KVPool") -> DecodeRows | ExtendRows | None:
        """Once per step: what the torch fast path needs for a decode step, or for the one-token
        sequences of an extend step (None: the step takes the reference path)."""
        if self.impl != "torch" or batch.kv_lens is None or pool.dtype in FP8_DTYPES:
            return None
        if batch.mode == "decode":
            return decode_rows(batch.block_table, batch.kv_lens, batch.seq_lens, pool.page_size)
        lens, kv_lens = batch.extend_lens, batch.kv_lens
        single = [b for b, n in enumerate(lens) if n == 1]
        multi = [b for b, n in enumerate(lens) if n != 1]
        starts, at = [], 0
        for n in lens:
            starts.append(at)
            at += n
        device = batch.block_table.device

        def index(values) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.int64, device=device)

        plan = ExtendRows(index([starts[b] for b in single]), None, None, None, None, None)
        if single:
            chosen = index(single)
            plan.decode = decode_rows(batch.block_table[chosen], [kv_lens[b] for b in single],
                                      batch.seq_lens[chosen], pool.page_size)
        if multi:
            others = index(multi)
            plan.multi_rows = decode_rows(batch.block_table[others], [kv_lens[b] for b in multi],
                                          batch.seq_lens[others], pool.page_size).rows
            chunk = max(lens[b] for b in multi)
            steps = torch.arange(chunk, device=device)
            ext, kv = index([lens[b] for b in multi]), index([kv_lens[b] for b in multi])
            plan.query_valid = steps[None, :] < ext[:, None]
            plan.query_index = torch.where(plan.query_valid, index([starts[b] for b in multi])[:, None] + steps, 0)
            keys = torch.arange(plan.multi_rows.shape[1], device=device)
            position = (kv - ext)[:, None] + steps[None, :]                  # each query's position
            mask = (keys[None, None, :] <= position[:, :, None]) & (keys[None, None, :] < kv[:, None, None])
            # A padding query sees key 0 (its output is dropped; an empty row would be NaN).
            plan.mask = mask | (~plan.query_valid[:, :, None] & (keys == 0)[None, None, :])
        return plan

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pool: "KVPool", layer: int,
                batch: "ForwardBatch", rows: DecodeRows | None = None) -> torch.Tensor:
        """Store the new tokens' K/V ([T, kv_heads, D]) at ``batch.out_slots`` of ``layer``, then
        return the attention of their queries q ([T, q_heads, D]) over the cache, shaped like q.
        ``rows``: this step's :meth:`plan`, when it has one."""
        if isinstance(rows, ExtendRows):
            return self._torch_extend(q, k, v, pool, layer, batch, rows)
        if rows is not None:
            return self._torch_decode(q, k, v, pool, layer, batch, rows)
        k_cache, v_cache, scale = pool.k[layer], pool.v[layer], pool.kv_scales[layer]
        store_kv(k_cache, v_cache, k, v, batch.out_slots, k_scale=scale, v_scale=scale, impl=self.impl)
        if batch.mode == "decode":
            return decode_attention(q, k_cache, v_cache, batch.block_table, batch.seq_lens,
                                    scale=self.scale, k_scale=scale, v_scale=scale, impl=self.impl,
                                    **self._decode_options)
        return extend_attention(q, k_cache, v_cache, batch.block_table, batch.seq_lens,
                                batch.extend_lens_tensor, scale=self.scale, k_scale=scale, v_scale=scale,
                                max_extend_len=max(batch.extend_lens, default=0), impl=self.impl)

    def _torch_decode(self, q, k, v, pool: "KVPool", layer: int, batch: "ForwardBatch",
                      rows: DecodeRows) -> torch.Tensor:
        """The torch_native decode of a planned step: the reference's fp32 attention in fewer ops."""
        flat_k, flat_v = self._store(k, v, pool, layer, batch)
        return self._sdpa(q, flat_k, flat_v, rows)

    def _torch_extend(self, q, k, v, pool: "KVPool", layer: int, batch: "ForwardBatch",
                      plan: ExtendRows) -> torch.Tensor:
        """A planned extend step: one-token sequences as a decode, the others as one padded causal
        attention over their cached rows."""
        flat_k, flat_v = self._store(k, v, pool, layer, batch)
        out = torch.empty_like(q)
        if plan.decode is not None:
            out[plan.single] = self._sdpa(q[plan.single], flat_k, flat_v, plan.decode)
        if plan.multi_rows is not None:
            seqs, chunk = plan.query_index.shape
            _, q_heads, head_dim = q.shape
            kv_heads = flat_k.shape[1]
            group = q_heads // kv_heads
            keys = flat_k[plan.multi_rows].transpose(1, 2).float()      # [M, kv_heads, longest, D]
            values = flat_v[plan.multi_rows].transpose(1, 2).float()
            queries = q[plan.query_index].float().reshape(seqs, chunk, kv_heads, group, head_dim)
            queries = queries.permute(0, 2, 3, 1, 4).reshape(seqs, kv_heads, group * chunk, head_dim)
            mask = plan.mask[:, None, None].expand(seqs, 1, group, chunk, -1).reshape(seqs, 1, group * chunk, -1)
            attended = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, scale=self.scale)
            attended = attended.reshape(seqs, kv_heads, group, chunk, head_dim).permute(0, 3, 1, 2, 4)
            attended = attended.reshape(seqs, chunk, q_heads, head_dim)
            out[plan.query_index[plan.query_valid]] = attended[plan.query_valid].to(q.dtype)
        return out

    @staticmethod
    def _store(k, v, pool: "KVPool", layer: int, batch: "ForwardBatch"):
        """Write the step's K/V (a 16-bit or fp32 cache: a plain copy) and return the flat caches."""
        kv_heads, head_dim = k.shape[1], k.shape[2]
        flat_k = pool.k[layer].view(-1, kv_heads, head_dim)
        flat_v = pool.v[layer].view(-1, kv_heads, head_dim)
        flat_k.index_copy_(0, batch.out_slots, k.to(flat_k.dtype))
        flat_v.index_copy_(0, batch.out_slots, v.to(flat_v.dtype))
        return flat_k, flat_v

    def _sdpa(self, q, flat_k, flat_v, rows: DecodeRows) -> torch.Tensor:
        """One query token per sequence over its cached rows, in fp32."""
        batch_size, q_heads, head_dim = q.shape
        kv_heads = flat_k.shape[1]
        # [batch, kv_heads, longest, D]; the query heads sharing a KV head are its query rows.
        keys = flat_k[rows.rows].transpose(1, 2).float()
        values = flat_v[rows.rows].transpose(1, 2).float()
        queries = q.float().reshape(batch_size, kv_heads, q_heads // kv_heads, head_dim)
        out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=rows.mask, scale=self.scale)
        return out.reshape(batch_size, q_heads, head_dim).to(q.dtype)
