"""engine.llm.http_server under faults: a client that goes away stops costing compute, for every
request kind (watched through the server's own /metrics); a stopped rank trips the watchdog; a
killed rank reaches every client in flight as an error; SIGTERM drains: requests in flight finish,
new ones are refused, and only what outlives the drain period is cut.

One tp=1 server for the disconnect tests; the watchdog, rank-death and SIGTERM tests start their own.
"""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.processes import children_of
from tests.test_engine_llm_server import Server, alive, server_config


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(server_config(enable_metrics=True), tmp_path_factory.mktemp("llm-faults"))
    yield srv
    assert srv.stop() == 0
    assert [p for p in srv.pids.values() if alive(p)] == []


def samples(server) -> dict[tuple, float]:
    """/metrics parsed by prometheus-client's own parser: {(name, sorted labels): value}."""
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(server, name: str, **labels) -> float | None:
    return samples(server).get((name, tuple(sorted({"model_name": "tiny-llama", **labels}.items()))))


def aborted(server) -> float:
    return sample(server, "accord_requests_total", outcome="aborted") or 0.0


def running(server) -> float:
    return sample(server, "accord_num_requests_running")


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


@pytest.mark.parametrize("path,body", [
    ("/generate", {"text": "go on", "sampling_params": LONG, "stream": True}),
    ("/v1/completions", {"prompt": "go on", "max_tokens": 2000, "temperature": 0, "ignore_eos": True,
                         "stream": True, "n": 2}),
])
def test_a_stream_abandoned_by_its_client_is_aborted_without_a_traceback_in_the_log(server, path, body):
    """Leaving a stream early is an ordinary event, not a server error: it used to log
    `RuntimeError: aclose(): asynchronous generator is already running` as an ASGI exception."""
    logged_before = len(server.output())
    before = aborted(server)
    choices = body.get("n", 1)
    with httpx.Client(base_url=server.url, timeout=httpx.Timeout(30, read=5)) as client:
        with client.stream("POST", path, json=body) as response:
            assert next(line for line in response.iter_lines() if line.startswith("data: "))
    assert wait_for(lambda: aborted(server) == before + choices), "every request of the stream was aborted"
    assert wait_for(lambda: running(server) == 0), "nothing is left running"
    assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
    log = server.output()[logged_before:]
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log


def test_metrics_show_the_schedulers_running_and_queued_requests_and_kv_usage(server):
    with httpx.Client(base_url=server.url, timeout=120) as client:
        with client.stream("POST", "/generate", json={"text": "load", "sampling_params": LONG,
                                                      "stream": True}) as response:
            lines = response.iter_lines()  # kept: dropping it would close the stream
            assert next(line for line in lines if line.startswith("data: {"))
            assert wait_for(lambda: sample(server, "accord_num_running_reqs", dp="0") == 1)
            usage = sample(server, "accord_token_usage", dp="0")
            capacity = sample(server, "accord_kv_capacity_tokens", dp="0")
            assert 0 < usage <= 1 and capacity > 0
            assert sample(server, "accord_kv_request_tokens", dp="0") >= 2000, "prompt + max_new_tokens reserved"
            assert sample(server, "accord_num_queue_reqs", dp="0") == 0
    assert wait_for(lambda: sample(server, "accord_num_running_reqs", dp="0") == 0)
    assert wait_for(lambda: sample(server, "accord_token_usage", dp="0") == 0)


def test_a_stopped_rank_fails_requests_then_health_and_the_server_exits_with_the_watchdog_code(tmp_path):
    """SIGSTOP on the scheduler rank: after --watchdog-timeout the requests in flight get a JSON
    503 naming the watchdog (an error event for the streamed one), /health turns 503, and the whole group goes down with EXIT_WATCHDOG."""
    from accord.engine.supervisor import EXIT_WATCHDOG

    import threading

    import openai

    srv = Server(server_config(watchdog_timeout=2), tmp_path)
    rank = next(pid for name, pid in srv.pids.items() if name not in ("http", "detokenizer"))
    streamed: dict[str, object] = {}
    first = threading.Event()

    def stream() -> None:
        with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0, timeout=120) as client:
            try:
                for _ in client.completions.create(model="tiny-llama", prompt="go", max_tokens=1900, stream=True,
                                                   temperature=0, extra_body={"ignore_eos": True}):
                    first.set()
                streamed["result"] = "finished"
            except openai.APIError as err:
                streamed["result"] = err

    try:
        thread = threading.Thread(target=stream)
        thread.start()
        assert first.wait(60)
        os.kill(rank, signal.SIGSTOP)
        response = httpx.post(f"{srv.url}/generate", timeout=60, json={"text": "stuck", "sampling_params": LONG})
        assert response.status_code == 503 and "watchdog" in response.json()["error"]["message"]
        thread.join(60)
        assert isinstance(streamed["result"], openai.APIError) and "watchdog" in str(streamed["result"]), \
            "the stream in flight ends with an error event"
        health = httpx.get(f"{srv.url}/health", timeout=10)
        assert health.status_code == 503 and "watchdog" in health.json()["error"]
        assert srv.proc.wait(60) == EXIT_WATCHDOG
        assert "watchdog" in srv.output()
    finally:
        srv.stop()
    assert [p for p in srv.pids.values() if alive(p)] == [], "the stopped rank was killed too"
    assert srv.new_ipc_dirs() == set()


def test_sigterm_drains_running_requests_and_cuts_the_rest_with_json_errors(tmp_path):
    """SIGTERM: a request that finishes within the drain period gets its full answer, one that
    does not gets a JSON error event; the supervisor exits 0 after every process it started
    (the multiprocessing resource tracker too), and no rank aborts on the way down."""
    # Both requests stream, so "running" is seen from the client (its first token arrived), not
    # polled. The short request is sized from this machine's own decode rate to take about a
    # quarter of the 1 s drain period; the 2000-token one takes seconds on any CPU.
    grace = 1.0
    srv = Server(server_config(enable_metrics=True, drain_timeout=grace), tmp_path)
    started = children_of(srv.proc.pid)
    try:
        probe_tokens = 200
        began = time.monotonic()
        httpx.post(f"{srv.url}/generate", timeout=120, json={
            "text": "probe", "sampling_params": {**LONG, "max_new_tokens": probe_tokens}}).raise_for_status()
        tokens_per_s = probe_tokens / (time.monotonic() - began)
        short_tokens = max(10, min(1000, int(tokens_per_s * grace / 4)))
        with httpx.Client(base_url=srv.url, timeout=120) as client:
            with client.stream("POST", "/generate", json={"text": "long", "sampling_params": LONG,
                                                          "stream": True}) as long_response, \
                 client.stream("POST", "/generate", json={"text": "short", "stream": True, "sampling_params":
                                                          {**LONG, "max_new_tokens": short_tokens}}) as short_response:
                long_lines, short_lines = long_response.iter_lines(), short_response.iter_lines()
                assert next(line for line in long_lines if line.startswith("data: {"))
                assert next(line for line in short_lines if line.startswith("data: {"))
                srv.proc.send_signal(signal.SIGTERM)
                short_events = [line for line in short_lines if line.startswith("data: ")]
                long_events = [line for line in long_lines if line.startswith("data: ")]
        error = json.loads(next(e for e in long_events if '"error"' in e)[len("data: "):])["error"]
        assert error["code"] == 503 and "shutting down" in error["message"]
        assert long_events[-1] == "data: [DONE]"
        assert short_events[-1] == "data: [DONE]" and not any('"error"' in e for e in short_events)
        last = json.loads(short_events[-2][len("data: "):])["meta_info"]
        assert last["completion_tokens"] == short_tokens and last["finish_reason"]["type"] == "length", \
            "finished, not cut"
        assert srv.proc.wait(60) == 0
        assert "terminate called" not in srv.output()
    finally:
        srv.stop()
    assert [p for p in [*srv.pids.values(), *started] if alive(p)] == [], "every child has exited"
    assert srv.new_ipc_dirs() == set()


@pytest.mark.parametrize("raw", ["soon", "0", "-3", "nan", "inf", "1e9"])
def test_a_drain_period_that_is_not_a_number_of_seconds_is_a_usage_error(raw):
    from accord.engine.llm.front_end import drain_grace_s
    from accord.resolver.errors import UsageError

    with pytest.raises(UsageError, match="ACCORD_DRAIN_GRACE_S"):
        drain_grace_s({"drain_timeout": 60.0}, {"ACCORD_DRAIN_GRACE_S": raw})
    assert drain_grace_s({"drain_timeout": 60.0}, {}) == 60.0, "--drain-timeout"
    assert drain_grace_s({"drain_timeout": 60.0}, {"ACCORD_DRAIN_GRACE_S": "2.5"}) == 2.5, "the variable wins"


def test_the_engine_profile_drains_for_at_least_60_s_by_default():
    config = server_config()
    assert config.values["drain_timeout"] >= 60
    assert config.provenance["drain_timeout"]["rule"] == "engine.http.drain_timeout"


def test_sigterm_lets_8_long_streamed_requests_finish_and_exits_0(tmp_path):
    """With the default drain period, 8 streamed completions of 1000 tokens that are running when
    SIGTERM arrives all finish whole; a new request is refused; the server then exits 0."""
    import threading

    import openai

    tokens = 1000
    srv = Server(server_config(max_total_tokens=8 * 1100 + 1024), tmp_path)
    results: dict[int, tuple[str, str | None, int]] = {}
    started = threading.Barrier(9)

    def one(index: int) -> None:
        with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0, timeout=300) as client:
            text, reason, first = "", None, True
            for chunk in client.completions.create(model="tiny-llama", prompt=f"request {index}", max_tokens=tokens,
                                                   temperature=0, stream=True, extra_body={"ignore_eos": True}):
                if first:
                    started.wait(120)
                    first = False
                text += chunk.choices[0].text
                reason = chunk.choices[0].finish_reason or reason
            results[index] = (text, reason, len(text.encode("utf-8", "surrogatepass")))

    try:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        started.wait(120)  # every request has its first token
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises((httpx.ConnectError, httpx.RemoteProtocolError, httpx.HTTPStatusError)):
            httpx.post(f"{srv.url}/v1/completions", json={"prompt": "late", "max_tokens": 1},
                       timeout=10).raise_for_status()
        for thread in threads:
            thread.join(120)
        assert sorted(results) == list(range(8))
        assert all(reason == "length" for _, reason, _ in results.values()), "finished, not cut"
        assert srv.proc.wait(60) == 0
    finally:
        srv.stop()
    assert [p for p in srv.pids.values() if alive(p)] == []


@pytest.mark.parametrize("stream", [True, False])
def test_a_killed_rank_reaches_every_client_as_an_error_then_the_server_exits_non_zero(tmp_path, stream):
    """SIGKILL of the scheduler rank while requests run: a streamed one gets an error event and
    then the end of the stream, a plain one an error JSON; the server then exits non-zero."""
    import threading

    import openai

    srv = Server(server_config(), tmp_path)
    rank = next(pid for name, pid in srv.pids.items() if name.startswith("scheduler"))
    outcome: dict[str, object] = {}
    first = threading.Event()
    try:
        with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0, timeout=120) as client:
            kwargs = dict(model="tiny-llama", prompt="run", max_tokens=1900, temperature=0,
                          extra_body={"ignore_eos": True})

            def call() -> None:
                try:
                    if stream:
                        for _ in client.completions.create(stream=True, **kwargs):
                            first.set()
                    else:
                        first.set()
                        client.completions.create(**kwargs)
                    outcome["result"] = "finished"
                except openai.APIError as err:
                    outcome["result"] = err
                except Exception as err:  # noqa: BLE001 - a bare connection drop is what must not happen
                    outcome["result"] = err

            thread = threading.Thread(target=call)
            thread.start()
            assert first.wait(60)
            time.sleep(0.3)
            os.kill(rank, signal.SIGKILL)
            thread.join(60)
        error = outcome["result"]
        assert isinstance(error, openai.APIError), f"got {error!r}, not an error from the server"
        assert "died" in str(error)
        assert srv.proc.wait(60) not in (0, None)
        assert "was killed by SIGKILL" in srv.output()
    finally:
        srv.stop()
    assert [p for p in srv.pids.values() if alive(p)] == []
