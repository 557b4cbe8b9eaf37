"""engine.llm.http_server under faults: a client that goes away stops costing compute, for every
request kind (watched through the server's own /metrics).

One tp=1 server for the module.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.test_engine_llm_server import Server, alive, server_config


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(server_config(enable_metrics=True), tmp_path_factory.mktemp("llm-faults"))
    yield srv
    assert srv.stop() == 0
    assert [p for p in srv.pids.values() if alive(p)] == []


def samples(server) -> dict[str, float]:
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def aborted(server) -> float:
    return samples(server).get('accord_requests_total{model_name="tiny-llama",outcome="aborted"}', 0.0)


def running(server) -> float:
    return samples(server)['accord_num_requests_running{model_name="tiny-llama"}']


def wait_for(condition, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


LONG = {"max_new_tokens": 2000, "temperature": 0, "ignore_eos": True}


@pytest.mark.parametrize("path,body,stream", [
    ("/generate", {"text": "go on", "sampling_params": LONG}, False),
    ("/generate", {"text": "go on", "sampling_params": LONG, "stream": True}, True),
    ("/v1/completions", {"prompt": "go on", "max_tokens": 2000, "temperature": 0, "ignore_eos": True}, False),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "go on"}], "max_tokens": 2000,
                              "temperature": 0, "ignore_eos": True, "stream": True}, True),
])
def test_a_client_that_disconnects_aborts_its_request(server, path, body, stream):
    before = aborted(server)
    with httpx.Client(base_url=server.url, timeout=httpx.Timeout(30, read=0.5)) as client:
        if stream:  # read the first event, then hang up
            with client.stream("POST", path, json=body) as response:
                assert next(line for line in response.iter_lines() if line.startswith("data: "))
        else:
            with pytest.raises(httpx.ReadTimeout):
                client.post(path, json=body)
    assert wait_for(lambda: aborted(server) == before + 1), "the request was aborted"
    assert wait_for(lambda: running(server) == 0), "nothing is left running"


def test_a_stopped_rank_fails_requests_then_health_and_the_server_exits_with_the_watchdog_code(tmp_path):
    """SIGSTOP on the scheduler rank: after --watchdog-timeout the request in flight gets a JSON
    503 naming the watchdog, /health turns 503, and the whole group goes down with EXIT_WATCHDOG."""
    import os
    import signal

    from engine.supervisor import EXIT_WATCHDOG

    srv = Server(server_config(watchdog_timeout=2), tmp_path)
    rank = next(pid for name, pid in srv.pids.items() if name not in ("http", "detokenizer"))
    try:
        os.kill(rank, signal.SIGSTOP)
        response = httpx.post(f"{srv.url}/generate", timeout=60, json={"text": "stuck", "sampling_params": LONG})
        assert response.status_code == 503 and "watchdog" in response.json()["error"]["message"]
        health = httpx.get(f"{srv.url}/health", timeout=10)
        assert health.status_code == 503 and "watchdog" in health.json()["error"]
        assert srv.proc.wait(60) == EXIT_WATCHDOG
        assert "watchdog" in srv.output()
    finally:
        srv.stop()
    assert [p for p in srv.pids.values() if alive(p)] == [], "the stopped rank was killed too"
    assert srv.new_ipc_dirs() == set()
