"""The paged KV pool: sized from the resolved memory budget, with its storage dtype, pages and scales.

Layout: :mod:`kernels.paged_kv` (per layer, k and v are [num_pages, page_size, num_kv_heads,
head_dim]). Page 0 is a scratch page that is never handed out: block-table padding points at it,
and padded (CUDA-graph) batch rows write their K/V there harmlessly.

This module only owns the memory. Writing K/V into it (quantize-on-write for FP8) and reading it
(dequantize-on-read) are done by kernels/ through the attention backend of the step's phase
(:mod:`engine.llm.attention`), so the engine has one write path, whichever backend was resolved.

FP8 storage (kv_cache_dtype fp8_e4m3 / fp8_e5m2) keeps value / scale with one scale per layer,
for K and V alike: read from the resolved quantization_param_path when there is one, else 1.0
(the resolver warns about that case, rule kv.fp8.scales).
"""

from __future__ import annotations

import torch

from accord.kernels.kv_quant import load_kv_scales
from accord.kernels.paged_kv import FP8_DTYPES
from accord.resolver.errors import UsageError

GIB = 1 << 30
SCRATCH_PAGE = 0


def pool_tokens(*, mem_fraction_static: float | None, device_mem_gib: float | None,
                max_total_tokens: int | None, weight_bytes: int, bytes_per_token: int) -> int:
    """How many tokens of KV this rank can hold.

    Upstream's rule: the static budget (mem_fraction_static x device memory) minus the weights, in
    tokens; --max-total-tokens caps it when given (or is the size when there is no budget).
    """
    tokens = None
    if mem_fraction_static is not None:
        budget = mem_fraction_static * device_mem_gib * GIB - weight_bytes
        if budget < bytes_per_token:
            raise UsageError(
                f"the static memory budget ({mem_fraction_static} x {device_mem_gib:g} GiB) leaves no "
                f"room for a KV cache after {weight_bytes / GIB:.2f} GiB of weights; raise "
                "--mem-fraction-static or use more ranks.")
        tokens = int(budget // bytes_per_token)
    if max_total_tokens is not None:
        tokens = max_total_tokens if tokens is None else min(tokens, max_total_tokens)
    return tokens


def layer_kv_scales(quantization_param_path: str | None, dtype: torch.dtype, *, attn_tp_rank: int,
                    num_layers: int, layers: range) -> list[float]:
    """The KV scale of each layer in ``layers`` (this pipeline stage's), as upstream applies them.

    Only an FP8 cache is scaled: with a 16-bit cache the file has nothing to apply to and is not
    read (upstream ignores it too). The file holds scales per TP rank for the KV heads that rank
    stores, which are the heads of ``attn_tp_rank`` (the TP rank, or under DP attention the rank
    inside the attention group). A file that cannot serve this model is a UsageError naming it.
    """
    if dtype not in FP8_DTYPES or quantization_param_path is None:
        return [1.0] * len(layers)
    try:
        scales = load_kv_scales(quantization_param_path, tp_rank=attn_tp_rank, num_layers=num_layers)
    except ValueError as exc:
        raise UsageError(str(exc)) from None  # it names the file and what is wrong with it
    return [scales[layer] for layer in layers]


class KVPool:
    """K and V pages of every layer this rank holds, their FP8 scales, and the page allocator."""

    def __init__(self, *, num_pages: int, page_size: int, num_layers: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device,
                 kv_scales: list[float] | None = None):
        if num_pages < 1:
            raise UsageError(f"the KV cache holds less than one page of {page_size} tokens; raise "
                             "--max-total-tokens / --mem-fraction-static or lower --page-size.")
        self.page_size = page_size
        self.num_pages = num_pages  # usable pages, the scratch page not counted
        self.dtype = dtype
        # One scale per layer for K and V (see layer_kv_scales); 1.0 leaves values unscaled.
        self.kv_scales = [1.0] * num_layers if kv_scales is None else list(kv_scales)
        if len(self.kv_scales) != num_layers:
            raise ValueError(f"{len(self.kv_scales)} KV scales given for {num_layers} layers.")
        shape = (num_pages + 1, page_size, num_kv_heads, head_dim)
        # torch.empty: on CPU the OS commits pages only when they are first written.
        self.k = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        # Pages never handed out are the range [next_fresh, num_pages]; released ones are reused
        # first (most recently released first). No per-page list up front: pools can hold millions.
        self._next_fresh = SCRATCH_PAGE + 1
        self._released: list[int] = []

    @property
    def capacity_tokens(self) -> int:
        return self.num_pages * self.page_size

    @property
    def free_pages(self) -> int:
        return len(self._released) + self.num_pages + 1 - self._next_fresh

    def alloc(self, count: int) -> list[int] | None:
        """`count` pages, or None (and nothing taken) if fewer are free."""
        if count > self.free_pages:
            return None
        reused = min(count, len(self._released))
        pages = [self._released.pop() for _ in range(reused)]
        fresh = count - reused
        pages += range(self._next_fresh, self._next_fresh + fresh)
        self._next_fresh += fresh
        return pages

    def release(self, pages: list[int]) -> None:
        self._released.extend(reversed(pages))
