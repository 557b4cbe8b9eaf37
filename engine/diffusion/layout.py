"""Which worker rank does what: the parallel layout a resolved diffusion config describes.

The `num_gpus` worker ranks form a grid of four dimensions, outermost first:

- `dp`  data-parallel replicas, each serving whole requests on its own;
- `cfg` classifier-free-guidance parallel: rank 0 of a cfg group computes the conditional branch,
        rank 1 the unconditional one;
- `sp`  sequence parallel (`sp_degree = ulysses_degree * ring_degree`): the latent token sequence is
        split across the group's ranks;
- `tp`  tensor parallel: attention heads and MLP columns are split across the group's ranks.

`tp` is innermost so tensor-parallel peers are neighbouring ranks, as upstream orders them. The
layout is plain data (no torch), so the parent process validates it before starting anything and
every worker derives the same process groups from it.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from accord.resolver.errors import UsageError

DIMENSIONS = ("dp", "cfg", "sp", "tp")


@dataclasses.dataclass(frozen=True)
class ParallelLayout:
    num_gpus: int
    dp: int
    cfg: int
    sp: int
    tp: int
    ulysses: int
    ring: int

    def __post_init__(self) -> None:
        for dim in DIMENSIONS + ("ulysses", "ring", "num_gpus"):
            if getattr(self, dim) < 1:
                raise UsageError(f"parallel degree {dim}={getattr(self, dim)} must be at least 1.")
        if self.sp != self.ulysses * self.ring:
            raise UsageError(
                f"sp_degree ({self.sp}) must equal ulysses_degree * ring_degree ({self.ulysses} * "
                f"{self.ring}); set --sp-degree, --ulysses-degree and --ring-degree consistently.")
        if self.cfg > 2:
            raise UsageError(
                f"cfg_parallel_degree is {self.cfg}, but classifier-free guidance has two branches "
                "(conditional and unconditional); use --cfg-parallel-size 1 or 2.")
        product = self.dp * self.cfg * self.sp * self.tp
        if product != self.num_gpus:
            raise UsageError(
                f"num_gpus ({self.num_gpus}) must equal dp_size * cfg_parallel_degree * sp_degree * "
                f"tp_size ({self.dp} * {self.cfg} * {self.sp} * {self.tp} = {product}); change --num-gpus "
                "or the parallel degrees.")

    @property
    def world_size(self) -> int:
        return self.num_gpus

    def coords(self, rank: int) -> dict[str, int]:
        """The position of `rank` along each dimension."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside 0..{self.world_size - 1}")
        out = {}
        for dim in reversed(DIMENSIONS):
            size = getattr(self, dim)
            out[dim] = rank % size
            rank //= size
        return {dim: out[dim] for dim in DIMENSIONS}

    def rank_of(self, dp: int, cfg: int, sp: int, tp: int) -> int:
        return ((dp * self.cfg + cfg) * self.sp + sp) * self.tp + tp

    def groups(self, dim: str) -> list[tuple[int, ...]]:
        """Every group along `dim`: ranks that differ only in that coordinate, in a fixed order.

        All ranks must create process groups in the same order, so this order is part of the
        contract between workers.
        """
        if dim not in DIMENSIONS:
            raise ValueError(f"unknown dimension {dim!r}")
        others = [d for d in DIMENSIONS if d != dim]
        result = []
        for fixed in itertools.product(*(range(getattr(self, d)) for d in others)):
            coords = dict(zip(others, fixed))
            result.append(tuple(self.rank_of(**{**coords, dim: i}) for i in range(getattr(self, dim))))
        return result

    def replica_ranks(self, dp_rank: int) -> tuple[int, ...]:
        return tuple(r for r in range(self.world_size) if self.coords(r)["dp"] == dp_rank)

    def leader(self, dp_rank: int) -> int:
        """The rank that decodes and returns a replica's images."""
        return self.rank_of(dp_rank, 0, 0, 0)

    def describe(self) -> dict[str, Any]:
        return {
            "num_gpus": self.num_gpus,
            "dp_size": self.dp,
            "cfg_parallel_degree": self.cfg,
            "sp_degree": self.sp,
            "ulysses_degree": self.ulysses,
            "ring_degree": self.ring,
            "tp_size": self.tp,
            "ranks": {str(r): self.coords(r) for r in range(self.world_size)},
            "sequence_parallel_attention": "all-gather of keys/values" if self.sp > 1 else "none",
        }
