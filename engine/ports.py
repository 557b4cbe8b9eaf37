"""Where the engine processes meet: ZMQ endpoints and the torch.distributed rendezvous.

Follows the seed's PortArgs. On one node without DP attention the front end, detokenizer and
schedulers talk over IPC socket files in a private directory (mode 0700, files 0600), so no other
user can connect. With DP attention or several nodes they talk TCP on a fixed block of ports derived
from the rendezvous address, so every node computes the same endpoints without talking first:

    rendezvous  = --dist-init-addr, or 127.0.0.1:(port + 233) on one node (port - 233 if that
                  overflows)
    port_base   = rendezvous port + 1 (or below the rendezvous port when the block would overflow)
    tokenizer   = port_base + 0      detokenizer = port_base + 1
    scheduler input of DP group d = port_base + 6 + d   (no separate DP controller process)

torch.distributed rendezvous: tcp://<dist_init_addr>, or tcp://127.0.0.1:<nccl_port> on one node.

The IPC directory is named after the supervising process (accord-ipc-<pid>-<random>): the
supervisor removes it when it stops, and if it was SIGKILLed (so could not), the next server
started by this user removes every such directory whose process is gone.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import stat
import tempfile

from accord.resolver.errors import UsageError

ZMQ_TCP_PORT_DELTA = 233
FIXED_TCP_PORTS = 6
MAX_PORT = 65535
IPC_DIR_PREFIX = "accord-ipc-"
_IPC_DIR_NAME = re.compile(re.escape(IPC_DIR_PREFIX) + r"(\d+)-")


@dataclasses.dataclass(frozen=True)
class Endpoints:
    """Every address the processes of one server use; plain data, so it can be sent to children."""

    tokenizer: str                  # the front end receives detokenized output here
    detokenizer: str                # the detokenizer receives scheduler output here
    scheduler_inputs: tuple[str, ...]  # one per DP group: its leader rank receives requests here
    dist_init_methods: tuple[str, ...]  # torch.distributed rendezvous, one per process world
    ipc_dir: str | None             # private directory of the IPC socket files, removed on exit

    def cleanup(self) -> None:
        """Remove the private IPC directory (and every socket file in it)."""
        if self.ipc_dir and os.path.isdir(self.ipc_dir):
            shutil.rmtree(self.ipc_dir, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def sweep_stale_ipc_dirs(parent: str | None = None) -> list[str]:
    """Remove this user's IPC directories whose supervising process no longer exists (one that
    was SIGKILLed could not remove its own); returns the paths removed."""
    parent = parent or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in sorted(names):
        match = _IPC_DIR_NAME.match(name)
        path = os.path.join(parent, name)
        if not match or _pid_alive(int(match.group(1))):
            continue
        try:
            info = os.lstat(path)
            if info.st_uid != os.getuid() or not stat.S_ISDIR(info.st_mode):
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def parse_host_port(address: str, flag: str) -> tuple[str, int]:
    """Split 'host:port' (IPv6 as '[::1]:port'), naming the flag when it is malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= MAX_PORT:
        raise UsageError(f"{flag} {address!r} is not HOST:PORT; give it as e.g. 10.0.0.1:5000.")
    return host.strip("[]"), int(port)


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Can a listening socket bind `host:port` right now? (IPv4 or IPv6 host.)"""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port that is free right now (the seed's choice when --nccl-port is not given)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tcp_endpoint(host: str, port: int) -> str:
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def allocate(*, port: int, nccl_port: int | None, dist_init_addr: str | None, nnodes: int,
             dp_size: int, dp_attention: bool, worlds: int) -> Endpoints:
    """Decide every endpoint of one server.

    `worlds` is the number of separate torch.distributed worlds (DP replicas without DP attention
    each have their own; with DP attention all ranks share one). Ports a single-node server is
    about to bind are checked here, so a clash is reported before any process starts.
    """
    if nccl_port is None:
        nccl_port = free_port()
    if dist_init_addr is not None:
        rendezvous_host, rendezvous_port = parse_host_port(dist_init_addr, "--dist-init-addr")
        init_methods = tuple(tcp_endpoint(rendezvous_host, rendezvous_port + w) for w in range(worlds))
    elif nnodes > 1:
        raise UsageError(f"--nnodes {nnodes} needs --dist-init-addr HOST:PORT (the address of node 0) "
                         "so every node meets at the same rendezvous.")
    else:
        init_methods = tuple(tcp_endpoint("127.0.0.1", nccl_port + w) for w in range(worlds))
        for w in range(worlds):
            _require_free(nccl_port + w, "--nccl-port" if w == 0 else f"--nccl-port + {w} (DP replica {w})")

    if not dp_attention and nnodes == 1:
        sweep_stale_ipc_dirs()
        ipc_dir = tempfile.mkdtemp(prefix=f"{IPC_DIR_PREFIX}{os.getpid()}-")
        os.chmod(ipc_dir, 0o700)
        ipc = lambda name: f"ipc://{os.path.join(ipc_dir, name)}"  # noqa: E731
        return Endpoints(tokenizer=ipc("tokenizer"), detokenizer=ipc("detokenizer"),
                         scheduler_inputs=tuple(ipc(f"scheduler-{d}") for d in range(dp_size)),
                         dist_init_methods=init_methods, ipc_dir=ipc_dir)

    if dist_init_addr is None:
        host, rendezvous_port = "127.0.0.1", port + ZMQ_TCP_PORT_DELTA
        if rendezvous_port > MAX_PORT:
            rendezvous_port = port - ZMQ_TCP_PORT_DELTA
    else:
        host, rendezvous_port = parse_host_port(dist_init_addr, "--dist-init-addr")
    block = FIXED_TCP_PORTS + dp_size
    base = rendezvous_port + 1 if rendezvous_port + block <= MAX_PORT else rendezvous_port - block - 1
    endpoints = Endpoints(
        tokenizer=tcp_endpoint(host, base), detokenizer=tcp_endpoint(host, base + 1),
        scheduler_inputs=tuple(tcp_endpoint(host, base + FIXED_TCP_PORTS + d) for d in range(dp_size)),
        dist_init_methods=init_methods, ipc_dir=None)
    if nnodes == 1:
        _require_free(base, "the tokenizer port (port_base)")
        _require_free(base + 1, "the detokenizer port (port_base + 1)")
        for d in range(dp_size):
            _require_free(base + FIXED_TCP_PORTS + d, f"the scheduler input port of DP group {d}")
    return endpoints


def bind_private(sock, endpoint: str) -> None:
    """Bind a ZMQ socket; an IPC socket file is made readable and writable by its owner only."""
    sock.bind(endpoint)
    if endpoint.startswith("ipc://"):
        os.chmod(endpoint[len("ipc://"):], 0o600)


def _require_free(port: int, what: str) -> None:
    if not port_is_free(port):
        raise UsageError(f"port {port} ({what}) is already in use; stop whatever holds it or choose "
                         "other ports with --port / --nccl-port / --dist-init-addr.")
