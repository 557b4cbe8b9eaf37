"""torch.distributed groups of one scheduler rank, and the collectives the model and loop need.

A world is pp_size x tp_size ranks (rank = pp * tp_size + tp). Groups:
- tp: the ranks of one pipeline stage; shards the MLP (and attention without DP attention);
- attn: the ranks that split one attention group's heads (the tp group, or under DP attention
  the tp_size / dp_size ranks of one DP group);
- attn_leader of each stage-0 attention group receives requests and shares them with its group.
With one rank every collective is the identity, and torch.distributed is not initialised at all.
gloo on CPU, nccl on CUDA.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys

import torch
import torch.distributed as dist

from accord.engine.llm.settings import EngineSettings, Rank
from accord.engine.ports import parse_host_port

LOOPBACK_INTERFACE = "lo"


def rendezvous(init_method: str, world_rank: int, world_size: int, timeout: datetime.timedelta):
    """The TCPStore every rank meets at, listening only on the rendezvous address.

    torch's own store server would listen on every interface; rank 0 binds the socket itself (on
    127.0.0.1 for a one-node launch) and hands it over. On loopback, gloo and NCCL are told to use
    the loopback interface too, so a one-node server opens nothing beyond it.
    """
    host, port = parse_host_port(init_method.removeprefix("tcp://"), "the torch.distributed rendezvous")
    if host.startswith("127.") and sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", LOOPBACK_INTERFACE)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", LOOPBACK_INTERFACE)
    if world_rank != 0:
        return dist.TCPStore(host, port, world_size, False, timeout=timeout)
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen()
    # The store takes the descriptor over (and closes it when it is done).
    return dist.TCPStore(host, port, world_size, True, timeout=timeout, master_listen_fd=listener.detach())


class Comm:
    def __init__(self, settings: EngineSettings, rank: Rank, init_method: str | None):
        topo = settings.topology
        self.tp_size, self.pp_size = topo.tp_size, topo.pp_size
        self.attn_tp_size = topo.attn_tp_size
        self.dp_attention = topo.dp_attention and topo.dp_size > 1
        self.world_size = topo.world_size
        self.world_rank = rank.world_rank
        self.tp_rank, self.pp_rank = rank.tp, rank.pp
        self.attn_tp_rank = rank.tp % self.attn_tp_size
        self.device = torch.device(settings.device_for(rank))
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # before NCCL binds this rank to a device
        self._tp = self._tp_cpu = self._attn = self._attn_cpu = self._world_cpu = None
        self._attn_root = self.world_rank
        if self.world_size == 1:
            return
        timeout = datetime.timedelta(seconds=settings.dist_timeout_s or 24 * 3600)
        self._backend = "gloo" if self.device.type == "cpu" else "nccl"
        store = rendezvous(init_method, self.world_rank, self.world_size, timeout)
        dist.init_process_group(self._backend, store=store, world_size=self.world_size,
                                rank=self.world_rank, timeout=timeout)
        self._world_cpu = self._cpu_twin(dist.group.WORLD, list(range(self.world_size)))
        # Every rank must create every group, in the same order.
        for pp in range(self.pp_size):
            stage = [pp * self.tp_size + t for t in range(self.tp_size)]
            tp, tp_cpu = self._new_group(stage)
            if pp == self.pp_rank:
                self._tp, self._tp_cpu = tp, tp_cpu
            for start in range(0, self.tp_size, self.attn_tp_size):
                members = stage[start:start + self.attn_tp_size]
                attn, attn_cpu = (tp, tp_cpu) if members == stage else self._new_group(members)
                if self.world_rank in members:
                    self._attn, self._attn_cpu, self._attn_root = attn, attn_cpu, members[0]

    def _new_group(self, ranks: list[int]):
        """A group for model tensors and its CPU (gloo) twin for control tensors; None when alone."""
        if len(ranks) == 1:
            return None, None
        group = dist.new_group(ranks)
        return group, self._cpu_twin(group, ranks)

    def _cpu_twin(self, group, ranks: list[int]):
        return group if self._backend == "gloo" else dist.new_group(ranks, backend="gloo")

    # -- topology --------------------------------------------------------------------------------

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp_size - 1

    @property
    def is_request_leader(self) -> bool:
        """Receives its group's requests from the front end and sends its outputs back."""
        return self.pp_rank == 0 and self.attn_tp_rank == 0

    def _stage_peer(self, pp: int) -> int:
        return pp * self.tp_size + self.tp_rank

    # -- collectives used by the model ----------------------------------------------------------

    def attn_all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum of the partial attention outputs of the ranks that split the heads."""
        if self._attn is not None:
            dist.all_reduce(x, group=self._attn)
        return x

    def tp_all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self._tp is not None:
            dist.all_reduce(x, group=self._tp)
        return x

    def gather_attention_groups(self, x: torch.Tensor) -> tuple[torch.Tensor, slice]:
        """DP attention: every attention group's tokens, stacked, and where this group's lie.

        Groups hold different numbers of tokens, so each contribution is padded to the largest.
        Ranks of one attention group hold the same tokens; one copy per group is kept.
        """
        if not self.dp_attention:
            return x, slice(0, x.shape[0])
        counts = torch.tensor([x.shape[0]], dtype=torch.int64)
        all_counts = [torch.zeros_like(counts) for _ in range(self.tp_size)]
        dist.all_gather(all_counts, counts, group=self._tp_cpu)
        sizes = [int(c) for c in all_counts]
        padded = x.new_zeros((max(sizes), *x.shape[1:]))
        padded[: x.shape[0]] = x
        chunks = [torch.empty_like(padded) for _ in range(self.tp_size)]
        dist.all_gather(chunks, padded, group=self._tp)
        leaders = range(0, self.tp_size, self.attn_tp_size)
        start = sum(sizes[r] for r in leaders if r < self.tp_rank - self.attn_tp_rank)
        stacked = torch.cat([chunks[r][: sizes[r]] for r in leaders])
        return stacked, slice(start, start + x.shape[0])

    # -- pipeline --------------------------------------------------------------------------------

    def send_to_next_stage(self, x: torch.Tensor) -> None:
        dist.send(x.contiguous(), dst=self._stage_peer(self.pp_rank + 1))

    def recv_from_previous_stage(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        x = torch.empty(shape, dtype=dtype, device=self.device)
        dist.recv(x, src=self._stage_peer(self.pp_rank - 1))
        return x

    # -- control messages of the scheduling loop -----------------------------------------------

    def share_bytes(self, payload: bytes | None) -> bytes:
        """Broadcast the request leader's bytes to every rank that schedules the same requests."""
        group, root = self._control_group()
        if group is None:
            return payload or b""
        size = torch.tensor([len(payload or b"")], dtype=torch.int64)
        dist.broadcast(size, src=root, group=group)
        if int(size) == 0:
            return b""
        buf = (torch.frombuffer(bytearray(payload), dtype=torch.uint8) if payload
               else torch.empty(int(size), dtype=torch.uint8))
        dist.broadcast(buf, src=root, group=group)
        return buf.numpy().tobytes()

    def share_sampled(self, ids: torch.Tensor | None, count: int) -> torch.Tensor:
        """Broadcast the tokens sampled on the last stage to every rank of the attention group."""
        group, _ = self._control_group()
        if group is None:
            return ids.cpu()
        root = (self.pp_size - 1) * self.tp_size + (self.tp_rank - self.attn_tp_rank)
        buf = ids.to(torch.int64).cpu() if ids is not None else torch.empty(count, dtype=torch.int64)
        dist.broadcast(buf, src=root, group=group)
        return buf

    def any_work(self, has_work: bool) -> bool:
        """DP attention: True if any attention group has a batch (then all must step together)."""
        if not self.dp_attention:
            return has_work
        flag = torch.tensor([int(has_work)], dtype=torch.int64)
        dist.all_reduce(flag, group=self._tp_cpu)
        return bool(flag)

    def min_over_world(self, value: int) -> int:
        """The smallest of every rank's value (ranks must agree on sizes, e.g. the KV pool)."""
        if self._world_cpu is None:
            return value
        tensor = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN, group=self._world_cpu)
        return int(tensor)

    def _control_group(self):
        """The CPU group of the ranks that share one request stream, and its leader's world rank."""
        if self.dp_attention:
            return self._attn_cpu, self._attn_root
        return self._world_cpu, 0

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
