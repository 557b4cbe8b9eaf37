"""`serve(config)`: start the process topology a resolved LLM config describes and supervise it.

Everything that can be checked without starting a process is checked first (settings, model folder,
parallel split, ports), so a bad launch fails in milliseconds with one clear paragraph and nothing
to clean up. Then, on node 0, the front end and the detokenizer, and on every node its scheduler
ranks, all under one ProcessGroup: if any of them dies, all of them stop and the exit code says so.
"""

from __future__ import annotations

import os
import signal
import sys

from accord.engine import ports
from accord.engine.llm import cpu_threads
from accord.engine.llm.detokenizer import run_detokenizer
from accord.engine.llm.front_end import DRAIN_EXIT_S, drain_grace_s
from accord.engine.llm.api_keys import secret
from accord.engine.llm.http_server import PEER_DIED_SIGNAL, run_http
from accord.engine.llm.model_config import context_length, load_model_config
from accord.engine.llm.settings import EngineSettings
from accord.engine.supervisor import ProcessGroup
from accord.resolver.errors import UsageError
from accord.resolver.frozen import ResolvedConfig


# How long the front end has, after another process died, to send every client its error.
PEER_DIED_EXIT_S = 5.0


def run_scheduler_rank(config_data: dict, rank, endpoints) -> None:
    """Entry point of a scheduler rank. Importing torch here, in the child, keeps it out of the
    parent (and of the front end and detokenizer), so the ranks start sooner.

    Triton fixes interpreter-or-GPU when a kernel module is first imported, which the import below
    does; so a CPU rank that runs Triton kernels switches the interpreter on before it.

    SIGTERM ends a rank at once (the default action): it holds nothing that outlives it, and a
    Python-level exit while torch.distributed threads run can abort with "terminate called
    without an active exception"."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    settings = EngineSettings.from_config(ResolvedConfig.from_dict(config_data))
    if settings.triton_interpreted:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    threads = None
    if settings.device_type == "cpu":
        threads = cpu_threads.prepare(len(settings.topology.ranks_on_this_node()), os.environ)
    from accord.engine.llm.scheduler_process import run_scheduler

    run_scheduler(config_data, rank, endpoints, threads)


def serve(config: ResolvedConfig) -> int:
    """Block until shutdown: 0 after SIGINT/SIGTERM, non-zero if a process failed."""
    settings = EngineSettings.from_config(config)
    topo = settings.topology
    model = load_model_config(settings.model_path)
    model.check_parallel(topo.tp_size, topo.attn_tp_size, topo.pp_size)
    context_length(settings.context_length, model)
    front_end_here = topo.node_rank == 0
    if front_end_here:  # the front end reads its keys again; checked here to fail before starting
        secret("api_key", settings.api_key, os.environ)
        secret("admin_api_key", config.values.get("admin_api_key"), os.environ)
        drain_grace_s(config.values, os.environ)
    if front_end_here and not ports.port_is_free(settings.port, settings.host):
        raise UsageError(f"--port {settings.port} on {settings.host} is already in use; pick another "
                         "with --port.")
    endpoints = ports.allocate(port=settings.port, nccl_port=settings.nccl_port,
                               dist_init_addr=settings.dist_init_addr, nnodes=topo.nnodes,
                               dp_size=topo.dp_size, dp_attention=topo.dp_attention,
                               worlds=topo.num_worlds)
    data = config.to_dict()
    group = ProcessGroup("accord serve")
    group.add_cleanup(endpoints.cleanup)
    try:
        if front_end_here:
            group.start("http", run_http, data, endpoints)
            group.drain("http", drain_grace_s(config.values) + DRAIN_EXIT_S)
            # Another process dying fails the requests in flight: the front end answers each
            # with an error before the group goes down.
            group.alert("http", PEER_DIED_SIGNAL, PEER_DIED_EXIT_S)
            group.start("detokenizer", run_detokenizer, data, endpoints)
        for rank in topo.ranks_on_this_node():
            group.start(rank.name, run_scheduler_rank, data, rank, endpoints)
        where = f"http://{settings.host}:{settings.port}" if front_end_here else f"node {topo.node_rank}"
        pids = " ".join(f"{name}={pid}" for name, pid in group.pids().items())
        return group.run(on_ready=lambda: print(
            f"accord serve: ready at {where} (config {config.hash[:12]}, tp={topo.tp_size} "
            f"pp={topo.pp_size} dp={topo.dp_size}; processes {pids})", file=sys.stderr, flush=True))
    finally:
        group.shutdown()
