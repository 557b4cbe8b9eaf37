"""The paged KV pool: its size from the resolved memory budget, its storage dtype, its pages.

Layout (shared with kernels/paged_kv.py): per layer, k and v are
[num_pages, page_size, num_kv_heads, head_dim]; token t of a sequence lives at flat slot
`page * page_size + t % page_size` where `page = block_table[t // page_size]`. Page 0 is a scratch
page that is never handed out: block-table padding points at it, and padded (CUDA-graph) batch
rows write their K/V there harmlessly.

FP8 storage (kv_cache_dtype fp8_e4m3 / fp8_e5m2) keeps value / scale as torch float8 and
dequantizes on read; without calibrated scales the scale is 1.0, as upstream does.
"""

from __future__ import annotations

import torch

from resolver.errors import UsageError

GIB = 1 << 30
SCRATCH_PAGE = 0

STORAGE_DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


def storage_dtype(kv_cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    """'auto' stores K/V in the model's dtype; the other names map to one torch dtype each."""
    return model_dtype if kv_cache_dtype == "auto" else STORAGE_DTYPES[kv_cache_dtype]


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


class KVPool:
    """K and V pages of every layer this rank holds, plus the page allocator."""

    def __init__(self, *, num_pages: int, page_size: int, num_layers: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, model_dtype: torch.dtype, device: torch.device):
        if num_pages < 1:
            raise UsageError(f"the KV cache holds less than one page of {page_size} tokens; raise "
                             "--max-total-tokens / --mem-fraction-static or lower --page-size.")
        self.page_size = page_size
        self.num_pages = num_pages  # usable pages, the scratch page not counted
        self.dtype = dtype
        self.model_dtype = model_dtype
        self.is_fp8 = dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
        self.k_scale = 1.0
        self.v_scale = 1.0
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

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new tokens' K/V ([n, heads, dim]) at flat slots [n]."""
        self.k[layer].view(-1, *k.shape[1:])[slots] = self._to_storage(k, self.k_scale)
        self.v[layer].view(-1, *v.shape[1:])[slots] = self._to_storage(v, self.v_scale)

    def gather(self, layer: int, block_rows: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V of the first `length` tokens of block-table rows ([pages] or [batch, pages]), in
        token order ([.., length, heads, dim]) and in the model dtype."""
        page_dim = block_rows.dim() - 1
        k = self.k[layer][block_rows].flatten(page_dim, page_dim + 1)[..., :length, :, :]
        v = self.v[layer][block_rows].flatten(page_dim, page_dim + 1)[..., :length, :, :]
        return self._from_storage(k, self.k_scale), self._from_storage(v, self.v_scale)

    def _to_storage(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        if self.is_fp8:
            limit = torch.finfo(self.dtype).max  # out-of-range values would become NaN, not saturate
            return (x.float() / scale).clamp(-limit, limit).to(self.dtype)
        return x.to(self.dtype)

    def _from_storage(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        if self.is_fp8:
            return (x.float() * scale).to(self.model_dtype)
        return x if x.dtype == self.model_dtype else x.to(self.model_dtype)
