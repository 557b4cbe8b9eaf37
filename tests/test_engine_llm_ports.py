"""engine.ports: IPC in a private directory on one node; the seed's TCP port block with DP attention."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys

import pytest
import zmq

from accord.engine import ports
from accord.resolver.errors import UsageError


def test_single_node_uses_private_ipc_files():
    endpoints = ports.allocate(port=30000, nccl_port=None, dist_init_addr=None, nnodes=1, dp_size=2,
                               dp_attention=False, worlds=2)
    try:
        assert stat.S_IMODE(os.stat(endpoints.ipc_dir).st_mode) == 0o700
        assert all(e.startswith(f"ipc://{endpoints.ipc_dir}/") for e in
                   (endpoints.tokenizer, endpoints.detokenizer, *endpoints.scheduler_inputs))
        assert len(endpoints.scheduler_inputs) == 2 and len(endpoints.dist_init_methods) == 2
        sock = zmq.Context.instance().socket(zmq.PULL)
        ports.bind_private(sock, endpoints.tokenizer)
        assert stat.S_IMODE(os.stat(endpoints.tokenizer[len("ipc://"):]).st_mode) == 0o600
        sock.close(linger=0)
    finally:
        endpoints.cleanup()
    assert not os.path.exists(endpoints.ipc_dir)


def test_dp_attention_uses_the_seed_tcp_block():
    endpoints = ports.allocate(port=20000, nccl_port=21000, dist_init_addr=None, nnodes=1, dp_size=2,
                               dp_attention=True, worlds=1)
    base = 20000 + ports.ZMQ_TCP_PORT_DELTA + 1
    assert endpoints.tokenizer == f"tcp://127.0.0.1:{base}"
    assert endpoints.detokenizer == f"tcp://127.0.0.1:{base + 1}"
    assert endpoints.scheduler_inputs == (f"tcp://127.0.0.1:{base + 6}", f"tcp://127.0.0.1:{base + 7}")
    assert endpoints.dist_init_methods == ("tcp://127.0.0.1:21000",) and endpoints.ipc_dir is None


def test_multi_node_block_follows_dist_init_addr_and_overflows_downwards():
    endpoints = ports.allocate(port=30000, nccl_port=None, dist_init_addr="10.0.0.1:65530", nnodes=2,
                               dp_size=1, dp_attention=True, worlds=1)
    assert endpoints.dist_init_methods == ("tcp://10.0.0.1:65530",)
    assert endpoints.tokenizer == f"tcp://10.0.0.1:{65530 - 7 - 1}"


def test_rendezvous_problems_are_usage_errors():
    with pytest.raises(UsageError, match="needs --dist-init-addr"):
        ports.allocate(port=30000, nccl_port=None, dist_init_addr=None, nnodes=2, dp_size=1,
                       dp_attention=False, worlds=1)
    with pytest.raises(UsageError, match="is not HOST:PORT"):
        ports.parse_host_port("10.0.0.1", "--dist-init-addr")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        with pytest.raises(UsageError, match=f"port {taken} .*already in use"):
            ports.allocate(port=30000, nccl_port=taken, dist_init_addr=None, nnodes=1, dp_size=1,
                           dp_attention=False, worlds=1)


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_stale_ipc_dirs_of_dead_supervisors_are_swept_and_live_ones_kept(tmp_path):
    stale = tmp_path / f"{ports.IPC_DIR_PREFIX}{dead_pid()}-abc"
    live = tmp_path / f"{ports.IPC_DIR_PREFIX}{os.getpid()}-def"
    other = tmp_path / "accord-ipc-unrelated"
    for path in (stale, live, other):
        path.mkdir()
    (stale / "tokenizer").write_text("")
    assert ports.sweep_stale_ipc_dirs(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and live.exists() and other.exists()


def test_the_ipc_dir_of_a_sigkilled_supervisor_is_removed_by_the_next_start():
    script = ("from accord.engine import ports; import time\n"
              "e = ports.allocate(port=30000, nccl_port=None, dist_init_addr=None, nnodes=1, dp_size=1, "
              "dp_attention=False, worlds=1)\n"
              "print(e.ipc_dir, flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    ipc_dir = proc.stdout.readline().strip()
    proc.kill()
    proc.wait()
    assert os.path.isdir(ipc_dir), "a SIGKILLed process cannot clean up after itself"
    endpoints = ports.allocate(port=30000, nccl_port=None, dist_init_addr=None, nnodes=1, dp_size=1,
                               dp_attention=False, worlds=1)
    endpoints.cleanup()
    assert not os.path.exists(ipc_dir)
