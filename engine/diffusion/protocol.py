"""The messages between the diffusion server's processes, and where their sockets live.

Front end <-> scheduler: a DEALER/ROUTER pair on the resolved `scheduler_port` (TCP), one msgpack
map per message, matched by `id`. Scheduler -> worker ranks: one PUSH/PULL pipe per rank; worker
ranks -> scheduler: one shared PULL pipe. The pipes are IPC sockets in a private directory the
parent creates and removes. msgpack carries only plain data (maps, lists, strings, numbers,
bytes), so no process ever unpickles what another sent.
"""

from __future__ import annotations

import os
from typing import Any

import msgpack


def pack(message: dict[str, Any]) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


# The fields of one image job, as the front end sends them and a worker builds its ImageJob.
JOB_FIELDS = frozenset({"prompt", "negative_prompt", "seed", "guidance_scale"})


def unpack(data: bytes) -> dict[str, Any]:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def unpack_or_none(data: bytes) -> dict[str, Any] | None:
    """A message from a socket others can reach: None unless it is a msgpack map."""
    try:
        message = unpack(data)
    except ValueError:  # every msgpack decoding error is one
        return None
    return message if isinstance(message, dict) else None


def rank_address(ipc_dir: str, rank: int) -> str:
    """Where worker `rank` receives batches from the scheduler."""
    return "ipc://" + os.path.join(ipc_dir, f"rank{rank}")


def results_address(ipc_dir: str) -> str:
    """Where worker ranks send readiness reports and results to the scheduler."""
    return "ipc://" + os.path.join(ipc_dir, "results")
