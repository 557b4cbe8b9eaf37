"""The collectives the tiny DiT needs, for one process or for a rank of a torch.distributed job.

The networks never call torch.distributed themselves; they call these four operations, which are
identities in a single process. A worker rank gets `DistributedOps`, whose groups come from the
parallel layout, so the same model code runs 1 rank or a dp x cfg x sp x tp grid:

- `sp_all_gather`: concatenate the sequence shards of the sp group (keys/values for attention, and
  the velocity at the end of a forward);
- `tp_all_reduce`: sum the partial outputs of row-parallel projections across the tp group;
- `cfg_all_gather`: exchange the conditional / unconditional velocities across the cfg group.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from accord.engine.diffusion.layout import DIMENSIONS, ParallelLayout


class ParallelOps:
    """A single process: every group has one member and every collective is the identity."""

    sp_rank = 0
    sp_size = 1
    tp_rank = 0
    tp_size = 1
    cfg_rank = 0
    cfg_size = 1
    is_leader = True

    def sp_all_gather(self, tensor: torch.Tensor, dim: int) -> torch.Tensor:
        return tensor

    def tp_all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def cfg_all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return [tensor]


class DistributedOps(ParallelOps):
    """One worker rank of an initialised torch.distributed job laid out as `layout`."""

    def __init__(self, layout: ParallelLayout, rank: int):
        self.layout = layout
        self.rank = rank
        coords = layout.coords(rank)
        self.groups: dict[str, dist.ProcessGroup | None] = {}
        # Every rank must create every group, in the same order, even groups it is not part of.
        for dim in DIMENSIONS[1:]:
            mine = None
            if getattr(layout, dim) > 1:
                for ranks in layout.groups(dim):
                    group = dist.new_group(list(ranks))
                    if rank in ranks:
                        mine = group
            self.groups[dim] = mine
        self.sp_rank, self.sp_size = coords["sp"], layout.sp
        self.tp_rank, self.tp_size = coords["tp"], layout.tp
        self.cfg_rank, self.cfg_size = coords["cfg"], layout.cfg
        self.is_leader = rank == layout.leader(coords["dp"])

    def _gather(self, tensor: torch.Tensor, dim_name: str) -> list[torch.Tensor]:
        group = self.groups[dim_name]
        if group is None:
            return [tensor]
        tensor = tensor.contiguous()
        parts = [torch.empty_like(tensor) for _ in range(getattr(self.layout, dim_name))]
        dist.all_gather(parts, tensor, group=group)
        return parts

    def sp_all_gather(self, tensor: torch.Tensor, dim: int) -> torch.Tensor:
        return torch.cat(self._gather(tensor, "sp"), dim=dim)

    def tp_all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        group = self.groups["tp"]
        if group is None:
            return tensor
        tensor = tensor.contiguous()
        dist.all_reduce(tensor, group=group)
        return tensor

    def cfg_all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return self._gather(tensor, "cfg")
