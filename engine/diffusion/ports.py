"""The three TCP ports a diffusion server listens on, chosen the way the seed chooses them.

HTTP (`port`), the scheduler's request socket (`scheduler_port`) and the torch.distributed
rendezvous (`master_port`). With `strict_ports` each must be free and distinct or the launch fails
before any process starts. Without it a taken port is replaced by the next free one, stepping by 42
(HTTP, scheduler) or 37 (master) and never reusing a port already chosen, and the move is reported.
The seed also adds a random offset to the default scheduler port and wraps past 60000 to a random
port; both are deterministic here so a launch is reproducible: the probing already avoids
collisions.

The resolved config is frozen and hashed, so the settled ports are not written back into it: they
travel beside it as `Endpoints`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from accord.engine.ports import port_is_free
from accord.resolver.errors import UsageError

MAX_ATTEMPTS = 100
_STEPS = {"http": 42, "scheduler": 42, "master": 37}
_FLAGS = {"http": ("port", "--port"), "scheduler": ("scheduler_port", "--scheduler-port"),
          "master": ("master_port", "--master-port")}


def internal_host(host: str | None) -> str:
    """The address the scheduler binds: the configured host, with localhost spelled as an IP."""
    if host in (None, "", "localhost"):
        return "127.0.0.1"
    return host


def connect_host(host: str | None) -> str:
    """The address a local process dials to reach a socket bound on `host`."""
    bound = internal_host(host)
    return {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(bound, bound)


def _bind_host(which: str, host: str) -> str:
    return "127.0.0.1" if which == "master" else internal_host(host)


@dataclasses.dataclass(frozen=True)
class Endpoints:
    host: str
    http_port: int
    scheduler_port: int
    master_port: int
    moved: tuple[tuple[str, int, int], ...] = ()  # (which, requested, chosen)

    @property
    def scheduler_bind_address(self) -> str:
        return f"tcp://{_bracket(internal_host(self.host))}:{self.scheduler_port}"

    @property
    def scheduler_connect_address(self) -> str:
        return f"tcp://{_bracket(connect_host(self.host))}:{self.scheduler_port}"

    @property
    def http_url(self) -> str:
        return f"http://{_bracket(connect_host(self.host))}:{self.http_port}"

    @property
    def master_address(self) -> str:
        return f"tcp://127.0.0.1:{self.master_port}"

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "http_port": self.http_port, "scheduler_port": self.scheduler_port,
                "master_port": self.master_port,
                "moved": [{"port": w, "requested": a, "chosen": b} for w, a, b in self.moved]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Endpoints":
        return cls(data["host"], data["http_port"], data["scheduler_port"], data["master_port"],
                   tuple((m["port"], m["requested"], m["chosen"]) for m in data.get("moved", ())))


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _settle(which: str, host: str, port: int, taken: set[int]) -> int:
    """The first free port at or after `port`, stepping like the seed; UsageError when none is found."""
    candidate = port
    for _ in range(MAX_ATTEMPTS):
        if candidate not in taken and 0 < candidate < 65536 and port_is_free(candidate, host):
            return candidate
        candidate = candidate + _STEPS[which] if candidate < 60000 else 5000 + candidate % 1000
    name, flag = _FLAGS[which]
    raise UsageError(f"no free {which} port found in {MAX_ATTEMPTS} tries starting at {flag} {port}; "
                     f"free some ports or pick another {flag}.")


def choose_ports(values: Mapping[str, Any]) -> Endpoints:
    """Check (strict) or settle (default) the HTTP, scheduler and master ports of a resolved config."""
    host = values["host"]
    if host is None or values["port"] is None:
        raise UsageError("the diffusion server needs --host and --port to serve HTTP; the resolved config "
                         "leaves one of them unset.")
    requested = {w: values[_FLAGS[w][0]] for w in ("http", "scheduler", "master")}
    for which, port in requested.items():
        if not isinstance(port, int) or not 0 < port < 65536:
            raise UsageError(f"{_FLAGS[which][1]} {port!r} is not a TCP port (1-65535).")
    chosen: dict[str, int] = {}
    if values["strict_ports"]:
        seen: dict[int, str] = {}
        for which, port in requested.items():
            if port in seen:
                raise UsageError(f"{_FLAGS[which][1]} {port} is the same port as {_FLAGS[seen[port]][1]} and "
                                 "--strict-ports is set; give each its own port.")
            seen[port] = which
            if not port_is_free(port, _bind_host(which, host)):
                raise UsageError(f"{which} port {port} ({_FLAGS[which][1]}) is already in use and --strict-ports "
                                 f"is set; free it, choose another {_FLAGS[which][1]}, or drop --strict-ports "
                                 "to let the server pick the next free port.")
            chosen[which] = port
    else:
        for which, port in requested.items():
            chosen[which] = _settle(which, _bind_host(which, host), port, set(chosen.values()))
    moved = tuple((w, requested[w], chosen[w]) for w in ("http", "scheduler", "master")
                  if chosen[w] != requested[w])
    return Endpoints(host=host, http_port=chosen["http"], scheduler_port=chosen["scheduler"],
                     master_port=chosen["master"], moved=moved)
