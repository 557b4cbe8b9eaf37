"""`serve(config)`: start the diffusion server a resolved config describes, and supervise it.

Everything that can be wrong with the config (a flag left unset, degrees that do not multiply to
`num_gpus`, a warmup plan that cannot run, a port taken under `--strict-ports`) is checked here,
in the parent, before the first process starts; such a failure raises `UsageError` and starts
nothing. Then one process group is started:

    scheduler      the request queue and batcher, on the resolved scheduler port
    worker0..N-1   num_gpus ranks of one torch.distributed job (gloo on CPU, nccl on GPU)
    http           the OpenAI-style front end, on the resolved host and port

Each child receives the frozen config as a dict and rebuilds it with `ResolvedConfig.from_dict`,
which refuses a config whose content does not match its hash. If any child dies the supervisor
stops all of them and `serve` returns non-zero.
"""

from __future__ import annotations

import shutil
import sys
import tempfile

from accord.engine.diffusion.ports import choose_ports
from accord.engine.diffusion.settings import EngineSettings
from accord.engine.supervisor import ProcessGroup
from accord.resolver.frozen import ResolvedConfig

READY_TIMEOUT_S = 600.0


# Children start through these functions so each process imports only what it runs: torch loads
# in the workers alone, never in the supervisor, the scheduler or the HTTP front end.

def _scheduler_process(*args) -> None:
    from accord.engine.diffusion.scheduler import scheduler_main

    scheduler_main(*args)


def _worker_process(*args) -> None:
    from accord.engine.diffusion.worker import worker_main

    worker_main(*args)


def _http_process(*args) -> None:
    from accord.engine.diffusion.http_api import http_main

    http_main(*args)


def serve(config: ResolvedConfig, *, ready_timeout: float = READY_TIMEOUT_S) -> int:
    """Run the diffusion server until SIGINT/SIGTERM (0) or until a process of it fails (non-zero)."""
    settings = EngineSettings.from_config(config)
    endpoints = choose_ports(config.values)
    for which, requested, chosen in endpoints.moved:
        print(f"accord serve: {which} port {requested} is in use; using {chosen} instead.", file=sys.stderr)
    payload = config.to_dict()
    ipc_dir = tempfile.mkdtemp(prefix="accord-diffusion-")
    group = ProcessGroup("diffusion")
    try:
        group.start("scheduler", _scheduler_process, payload, endpoints.to_dict(), ipc_dir)
        for rank in range(settings.layout.world_size):
            group.start(f"worker{rank}", _worker_process, payload, rank, endpoints.to_dict(), ipc_dir)
        group.start("http", _http_process, payload, endpoints.to_dict())
        return group.run(ready_timeout=ready_timeout, on_ready=lambda: print(
            f"accord serve: diffusion server ready at {endpoints.http_url} ({settings.layout.world_size} worker rank(s), "
            f"warmup {settings.plan.mode}, config {config.hash[:12]})", flush=True))
    finally:
        group.shutdown()
        shutil.rmtree(ipc_dir, ignore_errors=True)
