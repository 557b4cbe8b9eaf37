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

A mixed step (running decodes plus new prompt chunks, an extend batch) takes the same road for its
one-token sequences and the reference extend attention for the others only, instead of the
reference's per-sequence loop (and whole-page gathers) over every sequence of the batch.
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
class MixedRows:
    """A torch_native extend step that holds one-token sequences (a mixed step's decodes)."""

    single: torch.Tensor             # [S] token index of each one-token sequence
    decode: DecodeRows               # their cached-token rows
    multi: torch.Tensor              # token indices of the other sequences, in batch order
    block_table: torch.Tensor        # the other sequences' rows of the batch
    seq_lens: torch.Tensor
    extend_lens: torch.Tensor
    max_extend_len: int


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

    def plan(self, batch: "ForwardBatch", pool: "KVPool") -> DecodeRows | MixedRows | None:
        """Once per step: what the torch fast path needs for a decode step, or for the one-token
        sequences of an extend step (None: the step takes the reference path)."""
        if self.impl != "torch" or batch.kv_lens is None or pool.dtype in FP8_DTYPES:
            return None
        if batch.mode == "decode":
            return decode_rows(batch.block_table, batch.kv_lens, batch.seq_lens, pool.page_size)
        single = [b for b, n in enumerate(batch.extend_lens) if n == 1]
        if not single:
            return None
        multi = [b for b, n in enumerate(batch.extend_lens) if n != 1]
        starts, at = [], 0
        for n in batch.extend_lens:
            starts.append(at)
            at += n
        device = batch.block_table.device

        def index(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.int64, device=device)

        chosen = index(single)
        others = index(multi)
        return MixedRows(
            single=index([starts[b] for b in single]),
            decode=decode_rows(batch.block_table[chosen], [batch.kv_lens[b] for b in single],
                               batch.seq_lens[chosen], pool.page_size),
            multi=index([starts[b] + j for b in multi for j in range(batch.extend_lens[b])]),
            block_table=batch.block_table[others], seq_lens=batch.seq_lens[others],
            extend_lens=batch.extend_lens_tensor[others],
            max_extend_len=max((batch.extend_lens[b] for b in multi), default=0))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pool: "KVPool", layer: int,
                batch: "ForwardBatch", rows: DecodeRows | None = None) -> torch.Tensor:
        """Store the new tokens' K/V ([T, kv_heads, D]) at ``batch.out_slots`` of ``layer``, then
        return the attention of their queries q ([T, q_heads, D]) over the cache, shaped like q.
        ``rows``: this step's :meth:`plan`, when it has one."""
        if isinstance(rows, MixedRows):
            return self._torch_mixed(q, k, v, pool, layer, batch, rows)
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

    def _torch_mixed(self, q, k, v, pool: "KVPool", layer: int, batch: "ForwardBatch",
                     plan: MixedRows) -> torch.Tensor:
        """A planned extend step: its one-token sequences as a decode, the others by the reference."""
        flat_k, flat_v = self._store(k, v, pool, layer, batch)
        out = torch.empty_like(q)
        out[plan.single] = self._sdpa(q[plan.single], flat_k, flat_v, plan.decode)
        if plan.multi.numel():
            scale = pool.kv_scales[layer]
            out[plan.multi] = extend_attention(q[plan.multi], pool.k[layer], pool.v[layer], plan.block_table,
                                               plan.seq_lens, plan.extend_lens, scale=self.scale, k_scale=scale,
                                               v_scale=scale, max_extend_len=plan.max_extend_len, impl=self.impl)
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
