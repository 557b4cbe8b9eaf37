"""The LLM server end to end: a resolved config starts real processes that answer HTTP, and any
death takes the whole group down with nothing left behind.

Two server launches in all: one shared tp=2 server for the HTTP behaviour, one killed on purpose.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch

from accord.engine.llm.detokenizer import run_detokenizer
from accord.engine.llm.scheduler_process import run_scheduler
from accord.engine.llm.settings import EngineSettings
from accord.engine.llm.worker import Worker
from accord.engine.ports import allocate, free_port
from accord.engine.supervisor import ProcessGroup
from accord.resolver.api import resolve
from accord.resolver.facts.machine import load_facts
from accord.resolver.frozen import ConfigHashMismatch, ResolvedConfig

REPO = Path(__file__).resolve().parent.parent
API_KEY = "test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
SERVE_SCRIPT = ("import json, sys\n"
                "from accord.resolver.frozen import ResolvedConfig\n"
                "from accord.engine.llm.server import serve\n"
                "sys.exit(serve(ResolvedConfig.from_dict(json.load(open(sys.argv[1])))))\n")


def server_config(**flags) -> ResolvedConfig:
    user = {"model_path": "tiny-llama", "random_seed": 0, "dtype": "float32", "max_total_tokens": 8192,
            "page_size": 16, "attention_backend": "torch_native", "port": free_port(), **flags}
    facts = load_facts("cpu", ["host.ram_gib=8"], model_path=user["model_path"])
    return resolve("llm", user, {**facts, "engine": "accord"})  # as `accord serve` resolves


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class Server:
    """`serve(config)` in a subprocess, as `accord serve` runs it."""

    def __init__(self, config: ResolvedConfig, tmp: Path, env: dict[str, str] | None = None):
        path = tmp / f"config-{config.hash[:8]}.json"
        path.write_text(config.to_json())
        self.config = config
        self.url = f"http://127.0.0.1:{config.values['port']}"
        self.ipc_before = set(Path("/tmp").glob("accord-ipc-*"))
        self.log = open(tmp / "server.log", "w+")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-c", SERVE_SCRIPT, str(path)], cwd=REPO, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.pids = self._wait_ready()

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def _wait_ready(self, timeout: float = 180) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode}: {self.output()}")
            for line in self.output().splitlines():
                if "accord serve: ready" in line:
                    listing = line.split("processes ", 1)[1].rstrip(")")
                    return {k: int(v) for k, v in (p.split("=") for p in listing.split())}
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"server not ready within {timeout} s: {self.output()}")

    def new_ipc_dirs(self) -> set[Path]:
        return set(Path("/tmp").glob("accord-ipc-*")) - self.ipc_before

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(server_config(tp_size=2, api_key=API_KEY), tmp_path_factory.mktemp("llm-server"))
    yield srv
    assert srv.stop() == 0, "SIGTERM is a clean shutdown"
    assert [p for p in srv.pids.values() if alive(p)] == [], "no process outlives the server"
    assert srv.new_ipc_dirs() == set(), "IPC socket files are removed"


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def expected(server) -> dict[str, list[int]]:
    """Greedy tokens of the same resolved model on one in-process rank (tp=1)."""
    torch.set_num_threads(1)
    values = {**server.config.values, "tp_size": 1}
    settings = EngineSettings.from_config(ResolvedConfig("llm", server.config.facts, values))
    worker = Worker(settings, settings.topology.all_ranks()[0])
    messages = [{"type": "generate", "rid": p, "input_ids": [256, *p.encode()], "stream": False,
                 "sampling": {"max_new_tokens": 12, "temperature": 0.0, "ignore_eos": True}} for p in PROMPTS]
    results = {}
    pending = messages
    while pending or worker.has_work():
        for item in worker.step(pending):
            results[item["rid"]] = item["ids"]
        pending = []
    return results


PROMPTS = ["Hello, Accord!", "tensor parallel over gloo", "ü", "The resolved config is the only input. " * 3]


def generate(client, prompt: str, **extra) -> dict:
    body = {"text": prompt, "sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True},
            **extra}
    response = client.post("/generate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_health_and_server_info_show_what_the_processes_run(client, server):
    assert client.get("/health").json() == {"status": "ok"}
    info = client.get("/server_info").json()
    assert info["hash"] == server.config.hash and info["values"]["tp_size"] == 2
    assert info["provenance"]["tp_size"]["source"] == "user"
    runtime = info["runtime"]["dp0"]
    assert runtime["kv_pool_tokens"] == 8192 and runtime["page_size"] == 16
    assert runtime["attention_backend"] == {"prefill": "torch_native", "decode": "torch_native"}
    assert runtime["context_length"] == info["values"]["context_length"]


def test_tp2_server_generates_the_tp1_tokens(client, expected):
    for prompt in PROMPTS:
        assert generate(client, prompt)["output_ids"] == expected[prompt]


def test_tp2_logprobs_reach_the_front_end_with_the_tp1_tokens(client, expected):
    """Logprobs are computed on the sampling rank and shared with the rest of the group."""
    prompt = PROMPTS[0]
    out = generate(client, prompt, return_logprob=True, top_logprobs_num=3, logprob_start_len=0)
    info = out["meta_info"]
    assert [t for _, t, _ in info["output_token_logprobs"]] == out["output_ids"] == expected[prompt]
    for (chosen, _, _), top in zip(info["output_token_logprobs"], info["output_top_logprobs"]):
        assert chosen == top[0][0] and [v for v, _, _ in top] == sorted((v for v, _, _ in top), reverse=True)
    assert [t for _, t, _ in info["input_token_logprobs"]] == [256, *prompt.encode()]


def test_concurrent_requests_each_get_their_own_output(client, expected):
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outputs = list(pool.map(lambda p: generate(client, p)["output_ids"], PROMPTS * 2))
    assert outputs == [expected[p] for p in PROMPTS * 2]


def test_streamed_completion_concatenates_to_the_plain_one(client):
    body = {"prompt": PROMPTS[0], "max_tokens": 10, "temperature": 0, "ignore_eos": True}
    plain = client.post("/v1/completions", json=body).json()
    assert plain["object"] == "text_completion" and plain["usage"]["completion_tokens"] == 10
    with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == plain["choices"][0]["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_chat_completion_streams_and_not(client):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0}
    plain = client.post("/v1/chat/completions", json=body).json()
    assert plain["choices"][0]["message"]["role"] == "assistant"
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks) == plain["choices"][0]["message"]["content"]


def test_prefix_cache_hits_are_reported_and_change_nothing(client, expected):
    prompt = PROMPTS[3]
    again = generate(client, prompt)
    assert again["output_ids"] == expected[prompt] and again["meta_info"]["cached_tokens"] >= 16


@pytest.mark.parametrize("path,body,words", [
    ("/generate", b"{not json", "not valid JSON"),
    ("/generate", b"[1, 2]", "must be a JSON object"),
    ("/generate", {"sampling_params": {}}, "text or input_ids is required"),
    ("/generate", {"text": 5}, "text must be a string"),
    ("/generate", {"text": "hi", "sampling_params": {"temprature": 0.5}}, "unknown sampling parameter"),
    ("/generate", {"text": "hi", "sampling_params": {"top_p": 0}}, "top_p must be in (0, 1]"),
    ("/generate", {"input_ids": [1, 99999]}, "input_ids must be integers in [0, 258)"),
    ("/generate", {"text": "hi", "stream": "yes"}, "stream must be true or false"),
    ("/v1/completions", {"prompt": "x" * 5000}, "exceed the context length"),
    ("/v1/completions", {"prompt": "hi", "n": 0}, "n must be an integer in [1, 128]"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 0}, "max_tokens must be an integer >= 1"),
    ("/v1/completions", {"max_tokens": 3}, "prompt is required"),
    ("/v1/chat/completions", {"messages": "hi"}, "messages must be a non-empty list"),
])
def test_bad_requests_get_a_4xx_with_a_message(client, path, body, words):
    response = client.post(path, content=body) if isinstance(body, bytes) else client.post(path, json=body)
    assert response.status_code == 400, response.text
    assert words in response.json()["error"]["message"]


def listening_addresses(pids) -> set[str]:
    """Hex local addresses of the TCP sockets these processes listen on (from /proc)."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd) if fd.is_symlink() else ""
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.add(fields[1].split(":")[0])
    return found


def test_nothing_listens_beyond_loopback(server):
    loopback = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1
    addresses = listening_addresses(list(server.pids.values()))
    assert addresses and addresses <= loopback


def test_api_key_is_required_except_for_health(server):
    assert httpx.post(f"{server.url}/generate", json={"text": "hi"}).status_code == 401
    assert httpx.get(f"{server.url}/health").status_code == 200


def test_a_killed_rank_tears_everything_down(tmp_path):
    srv = Server(server_config(tp_size=2), tmp_path)
    try:
        victim = srv.pids["scheduler_dp0_pp0_tp1"]
        os.kill(victim, signal.SIGKILL)
        code = srv.proc.wait(30)
    finally:
        srv.stop()
    assert code != 0
    message = srv_output = Path(tmp_path / "server.log").read_text()
    assert "'scheduler_dp0_pp0_tp1'" in message and "SIGKILL" in message, srv_output
    assert [name for name, pid in srv.pids.items() if alive(pid)] == []
    assert srv.new_ipc_dirs() == set()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{srv.url}/health")


def test_a_port_taken_after_resolution_is_a_usage_error_exit_2(capsys):
    """The bind race (the port was free when checked, taken when the front end binds it) is bad
    usage, exit 2, naming the port; never 3, which means "no legal configuration"."""
    from accord.engine.llm.http_server import run_http
    from accord.resolver.errors import EXIT_USAGE

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        config = server_config(port=holder.getsockname()[1])
        endpoints = allocate(port=config.values["port"], nccl_port=None, dist_init_addr=None, nnodes=1,
                             dp_size=1, dp_attention=False, worlds=1)
        group = ProcessGroup("accord serve")
        group.add_cleanup(endpoints.cleanup)
        group.start("http", run_http, config.to_dict(), endpoints)
        assert group.run(ready_timeout=120) == EXIT_USAGE == 2
    assert "pick a free --port" in capsys.readouterr().err


@pytest.mark.parametrize("environ,flag,words", [
    ({"ACCORD_API_KEY": "k1", "ACCORD_API_KEY_FILE": "/x"}, None, "ACCORD_API_KEY and ACCORD_API_KEY_FILE"),
    ({"ACCORD_API_KEY": "k1"}, "k2", "--api-key and ACCORD_API_KEY"),
    ({"ACCORD_API_KEY_FILE": "/no/such/key"}, None, "cannot read"),
    ({"ACCORD_API_KEY": ""}, None, "empty"),
])
def test_a_key_given_twice_or_unreadable_is_a_usage_error_without_the_key(environ, flag, words):
    from accord.engine.llm.http_server import secret
    from accord.resolver.errors import UsageError

    with pytest.raises(UsageError, match=words) as caught:
        secret("api_key", flag, environ)
    assert "k1" not in str(caught.value) and "k2" not in str(caught.value)


def test_the_api_key_can_come_from_a_file_and_appears_in_no_command_line_or_log(tmp_path, monkeypatch):
    key = "file-key-0123456789"
    (tmp_path / "key").write_text(key + "\n")
    monkeypatch.setenv("ACCORD_API_KEY_FILE", str(tmp_path / "key"))
    srv = Server(server_config(), tmp_path)
    try:
        assert httpx.get(f"{srv.url}/v1/models").status_code == 401
        models = httpx.get(f"{srv.url}/v1/models", headers={"Authorization": f"Bearer {key}"})
        assert models.status_code == 200
        command_lines = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in [srv.proc.pid, *srv.pids.values()]]
        assert all(key.encode() not in line for line in command_lines)
    finally:
        srv.stop()
    assert key not in (tmp_path / "server.log").read_text()


def test_launcher_front_end_and_detokenizer_do_not_import_torch():
    """Only scheduler ranks pay for torch; the launcher spawns them without waiting on it."""
    code = ("import sys, engine.llm.server, engine.llm.http_server, engine.llm.detokenizer; "
            "print(sorted(m for m in ('torch', 'triton', 'numpy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.strip() == "[]", done.stderr


def test_processes_refuse_a_config_whose_hash_does_not_match():
    config = server_config()
    tampered = config.to_dict()
    tampered["values"]["tp_size"] = 4
    endpoints = allocate(port=config.values["port"], nccl_port=None, dist_init_addr=None, nnodes=1,
                         dp_size=1, dp_attention=False, worlds=1)
    try:
        with pytest.raises(ConfigHashMismatch):
            run_scheduler(tampered, EngineSettings.from_config(config).topology.all_ranks()[0], endpoints)
        group = ProcessGroup("tamper-test")
        group.start("detokenizer", run_detokenizer, tampered, endpoints)
        assert group.run(ready_timeout=120) != 0
    finally:
        endpoints.cleanup()
