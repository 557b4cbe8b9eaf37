"""engine.llm.cpu_threads: a CPU rank takes the cores that are free when it starts (never fewer
than one), shares them with the node's other ranks, waits passively when multi-threaded, and
keeps whatever OMP_NUM_THREADS / OMP_WAIT_POLICY the user set."""

from __future__ import annotations

import pytest

from accord.engine.llm.cpu_threads import prepare, rank_threads


@pytest.mark.parametrize("cores,load,ranks,expected", [
    (16, 0.0, 1, 16),   # idle: every core
    (16, 0.3, 2, 8),    # idle, shared by two ranks
    (16, 6.0, 1, 10),   # six cores busy elsewhere
    (2, 8.5, 1, 1),     # the busy 2-core machine of the measurements: one thread
    (2, 30.0, 4, 1),    # never zero
    (4, 1.6, 1, 2),     # rounded: 2.4 free cores
])
def test_a_rank_takes_its_share_of_the_free_cores(cores, load, ranks, expected):
    assert rank_threads(ranks, {}, cores=cores, load=load) == expected


def test_omp_num_threads_is_kept():
    assert rank_threads(1, {"OMP_NUM_THREADS": "3"}, cores=2, load=8.0) == 3
    assert rank_threads(1, {"OMP_NUM_THREADS": "0"}, cores=8, load=0.0) == 8, "0 is not a thread count"


def test_several_threads_wait_passively_unless_the_user_chose():
    env = {"OMP_NUM_THREADS": "4"}
    assert prepare(1, env) == 4 and env["OMP_WAIT_POLICY"] == "PASSIVE"
    env = {"OMP_NUM_THREADS": "4", "OMP_WAIT_POLICY": "ACTIVE"}
    prepare(1, env)
    assert env["OMP_WAIT_POLICY"] == "ACTIVE"
    env = {"OMP_NUM_THREADS": "1"}
    prepare(1, env)
    assert "OMP_WAIT_POLICY" not in env, "one thread never waits for another"
