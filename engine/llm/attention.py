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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from kernels.attention import decode_attention, extend_attention
from kernels.kv_quant import store_kv
from kernels.launch import INTERPRETER
from resolver.errors import UsageError

if TYPE_CHECKING:
    from engine.llm.batch import ForwardBatch
    from engine.llm.kv_cache import KVPool
    from engine.llm.settings import EngineSettings

IMPLS = {"torch_native": "torch", "triton": "triton"}
"""The kernels/ implementation each attention backend runs."""


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

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pool: "KVPool", layer: int,
                batch: "ForwardBatch") -> torch.Tensor:
        """Store the new tokens' K/V ([T, kv_heads, D]) at ``batch.out_slots`` of ``layer``, then
        return the attention of their queries q ([T, q_heads, D]) over the cache, shaped like q."""
        k_cache, v_cache, scale = pool.k[layer], pool.v[layer], pool.kv_scales[layer]
        store_kv(k_cache, v_cache, k, v, batch.out_slots, k_scale=scale, v_scale=scale, impl=self.impl)
        if batch.mode == "decode":
            return decode_attention(q, k_cache, v_cache, batch.block_table, batch.seq_lens,
                                    scale=self.scale, k_scale=scale, v_scale=scale, impl=self.impl,
                                    **self._decode_options)
        return extend_attention(q, k_cache, v_cache, batch.block_table, batch.seq_lens,
                                batch.extend_lens_tensor, scale=self.scale, k_scale=scale, v_scale=scale,
                                max_extend_len=max(batch.extend_lens, default=0), impl=self.impl)
