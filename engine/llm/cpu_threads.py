"""How many intra-op threads a CPU scheduler rank runs, decided before torch is imported.

Measured on a 2-core machine at load ~8.5 (other jobs), SmolLM2-135M fp32 decode through one
rank (`benchmarks/bench_smollm2.py --threads-sweep --tokens 16` prints this table):

    threads  OMP_WAIT_POLICY   batch 1     batch 8
    1        (default)         5.6 tok/s   25.1 tok/s
    2        (default)         0.9 tok/s    2.6 tok/s   <- every core: 6-10x slower
    2        PASSIVE           5.4 tok/s   21.4 tok/s

OpenMP threads that spin while they wait for each other fight the machine's other jobs for the
same cores. So a rank takes the cores that were free when it started (the cores it may run on,
os.sched_getaffinity, less the 1-minute load average, shared among this node's ranks), at least
one; and when it runs more than one thread, they wait passively (OMP_WAIT_POLICY=PASSIVE), so load
that arrives later slows the rank down in proportion instead of collapsing it. On an idle machine
that is every core, the fastest setting there. OMP_NUM_THREADS or OMP_WAIT_POLICY set by the user
are kept as they are. Imports no torch.
"""

from __future__ import annotations

import os
from typing import Mapping, MutableMapping


def free_cores(cores: int, load: float) -> int:
    """Cores not busy with other work: all of them less the load, rounded, at least one."""
    return max(1, min(cores, int(cores - load + 0.5)))


def rank_threads(ranks_here: int, environ: Mapping[str, str], cores: int | None = None,
                 load: float | None = None) -> int:
    """Threads for one of `ranks_here` CPU ranks: OMP_NUM_THREADS if set, else its share of the
    free cores."""
    if environ.get("OMP_NUM_THREADS", "").isdigit() and int(environ["OMP_NUM_THREADS"]) > 0:
        return int(environ["OMP_NUM_THREADS"])
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(1, free_cores(cores, load) // max(1, ranks_here))


def prepare(ranks_here: int, environ: MutableMapping[str, str]) -> int:
    """Decide this rank's threads and, for more than one, make OpenMP wait passively; call
    before torch is imported (OpenMP reads its environment once)."""
    threads = rank_threads(ranks_here, environ)
    if threads > 1:
        environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return threads
