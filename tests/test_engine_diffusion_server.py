"""The diffusion server as processes: HTTP API, executed warmup plan, supervision, refusal to start.

Two servers are started (each is a supervisor, a scheduler, two gloo worker ranks and an HTTP
front end): a cfg-parallel one with a breakable-CUDA-graph warmup plan for the API tests, and a
sequence-parallel one whose worker is killed.
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from accord.resolver.errors import UsageError
from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.catalog import load_catalog

REPO = Path(__file__).resolve().parents[1]
LAUNCH = ("import json, sys; from accord.engine.diffusion.server import serve; from accord.resolver.frozen import ResolvedConfig; "
          "sys.exit(serve(ResolvedConfig.from_dict(json.load(open(sys.argv[1])))))")
CONCRETE = {"tp_size": 1, "sp_degree": 1, "ulysses_degree": 1, "ring_degree": 1, "enable_cfg_parallel": False,
            "cfg_parallel_degree": 1, "warmup_mode": "off"}
CFG_BCG = {"num_gpus": 2, "enable_cfg_parallel": True, "cfg_parallel_degree": 2, "enable_breakable_cuda_graph": True,
           "warmup_mode": "server", "warmup_resolutions": ["64x64", "48x80"], "bcg_text_buckets": [16, 64],
           "warmup_steps": 2}
SP = {"num_gpus": 2, "sp_degree": 2, "ulysses_degree": 2}
READY_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_config(**overrides) -> ResolvedConfig:
    values = {**load_catalog("diffusion").defaults(), **CONCRETE, "port": free_port(),
              "scheduler_port": free_port(), "master_port": free_port(), **overrides}
    return ResolvedConfig("diffusion", {"platform": "cpu"}, values)


class Server:
    """`serve(config)` in a child Python process, with its output in a file."""

    def __init__(self, tmp: Path, config: ResolvedConfig):
        self.config = config
        self.url = f"http://127.0.0.1:{config.values['port']}"
        (tmp / "config.json").write_text(json.dumps(config.to_dict()))
        self.log = open(tmp / "server.log", "w+")
        self.process = subprocess.Popen([sys.executable, "-c", LAUNCH, str(tmp / "config.json")], cwd=REPO,
                                        stdout=self.log, stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the server exited with {self.process.returncode}:\n{self.output()}")
            try:
                if self.client.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        pytest.fail(f"the server was not ready within {READY_TIMEOUT_S} s:\n{self.output()}")

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(30)
        self.log.close()


def alive(pid: int) -> bool:
    """Is `pid` a live process (not gone, not a zombie)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def png_pixels(b64: str) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB"))


def single_process_image(prompt: str, size: tuple[int, int], seed: int, steps: int) -> np.ndarray:
    from accord.engine.diffusion.pipeline import DiffusionPipeline, GenerationBatch, ImageJob
    from accord.engine.diffusion.settings import EngineSettings
    from accord.engine.diffusion.warmup import Resolution

    pipe = DiffusionPipeline(EngineSettings.from_config(make_config()))
    guidance = float(pipe.settings.model.sampling["guidance_scale"])
    return pipe.generate(GenerationBatch(Resolution(*size), steps, (ImageJob(prompt, "", seed, guidance),))).images[0]


@pytest.fixture(scope="module")
def cfg_server(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("cfg_server"), make_config(**CFG_BCG))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def generate(server: Server, **body) -> httpx.Response:
    return server.client.post("/v1/images/generations", json=body)


# -- API and warmup ---------------------------------------------------------------------------

def test_health_and_server_info_report_the_resolved_config(cfg_server):
    assert cfg_server.client.get("/health").json() == {"status": "ok"}
    info = cfg_server.client.get("/server_info").json()
    assert info["config"]["hash"] == cfg_server.config.hash
    assert info["config"]["provenance"] == {} and info["config"]["values"]["cfg_parallel_degree"] == 2
    assert info["engine"]["layout"]["cfg_parallel_degree"] == 2
    assert info["endpoints"]["http_port"] == cfg_server.config.values["port"]
    assert set(info["processes"]) == {"supervisor", "http", "scheduler", "worker0", "worker1"}


def test_every_rank_executed_exactly_the_resolved_warmup_plan(cfg_server):
    warmup = cfg_server.client.get("/server_info").json()["warmup"]
    planned = [(e["resolution"], e["text_bucket"]) for e in warmup["plan"]["entries"]]
    assert planned == [(r, b) for r in CFG_BCG["warmup_resolutions"] for b in CFG_BCG["bcg_text_buckets"]]
    assert set(warmup["executed"]) == {"0", "1"}
    for rank, executed in warmup["executed"].items():
        assert [(e["resolution"], e["text_bucket"]) for e in executed] == planned, rank
        assert all(e["steps"] == CFG_BCG["warmup_steps"] and e["execution"] == "eager" for e in executed)


def test_cfg_parallel_server_image_equals_the_single_process_image(cfg_server):
    reply = generate(cfg_server, prompt="a small boat", size="64x64", seed=5, num_inference_steps=3)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    meta = body["metadata"]
    assert (meta["in_warmup_plan"], meta["text_bucket"], meta["execution"]) == (True, 16, "eager")
    expected = single_process_image("a small boat", (64, 64), seed=5, steps=3)
    got = png_pixels(body["data"][0]["b64_json"])
    assert got.shape == (64, 64, 3)
    assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1


def test_n_images_use_consecutive_seeds(cfg_server):
    body = generate(cfg_server, prompt="stars", size="48x80", n=2, num_inference_steps=2).json()
    first, second = (png_pixels(d["b64_json"]) for d in body["data"])
    assert first.shape == (80, 48, 3) and (first != second).any()


def test_a_resolution_outside_the_plan_is_served_eagerly_and_says_so(cfg_server):
    meta = generate(cfg_server, prompt="stars", size="96x96", num_inference_steps=1).json()["metadata"]
    assert not meta["in_warmup_plan"] and meta["execution"] == "eager"
    assert "96x96 is not in the warmup plan" in meta["note"]


def test_a_prompt_past_the_largest_bucket_falls_back_and_says_so(cfg_server):
    meta = generate(cfg_server, prompt="y" * 80, size="64x64", num_inference_steps=1).json()["metadata"]
    assert meta["text_bucket"] is None
    assert "more than the largest text bucket 64" in meta["note"]


@pytest.mark.parametrize("body, param", [
    ({"prompt": "p", "size": "64-by-64"}, "size"),
    ({"prompt": "p", "size": "65x64"}, "size"),
    ({"prompt": "p", "style": "vivid"}, "style"),
    ({"size": "64x64"}, "prompt"),
    ({"prompt": "p", "n": 99}, "n"),
])
def test_bad_requests_get_400_naming_the_field(cfg_server, body, param):
    reply = generate(cfg_server, **body)
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == param


def test_malformed_requests_get_4xx(cfg_server):
    assert cfg_server.client.post("/v1/images/generations", content=b"{not json").status_code == 400
    assert cfg_server.client.get("/v1/images/generations").status_code == 405
    assert cfg_server.client.get("/v1/nothing").status_code == 404


def test_malformed_messages_on_the_scheduler_port_are_answered_not_fatal(cfg_server):
    import zmq

    from accord.engine.diffusion.protocol import pack, unpack

    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.RCVTIMEO, 10_000)
    dealer.connect(f"tcp://127.0.0.1:{cfg_server.config.values['scheduler_port']}")
    try:
        for payload in (b"\xc1 not msgpack", pack({"op": "generate", "id": "x", "jobs": [{"prompt": 1}]})):
            dealer.send(payload)
            assert "error" in unpack(dealer.recv())
    finally:
        dealer.close()
        context.term()
    assert cfg_server.client.get("/health").status_code == 200


# -- supervision and refusal ------------------------------------------------------------------

def test_a_killed_worker_tears_the_whole_group_down(tmp_path):
    server = Server(tmp_path, make_config(**SP))
    try:
        server.wait_ready()
        reply = generate(server, prompt="a quiet street", size="80x48", seed=3, num_inference_steps=2)
        expected = single_process_image("a quiet street", (80, 48), seed=3, steps=2)
        assert np.abs(png_pixels(reply.json()["data"][0]["b64_json"]).astype(int) - expected.astype(int)).max() <= 1

        pids = server.client.get("/server_info").json()["processes"]
        os.kill(pids["worker1"], signal.SIGKILL)
        assert server.process.wait(30) != 0
        assert "process 'worker1'" in server.output() and "SIGKILL" in server.output()
        assert [name for name, pid in pids.items() if alive(pid)] == []
    finally:
        server.stop()


def test_a_taken_port_under_strict_ports_fails_before_anything_starts():
    import multiprocessing

    from accord.engine.diffusion.server import serve

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = make_config(strict_ports=True, port=taken.getsockname()[1])
        with pytest.raises(UsageError, match="already in use and --strict-ports"):
            serve(config)
    assert multiprocessing.active_children() == []


def test_breakable_graph_on_a_model_outside_the_allow_list_gets_the_resolver_conflict_and_starts_nothing():
    port = free_port()
    command = [sys.executable, "-m", "accord.resolver.cli", "serve", "--system", "diffusion",
               "--enable-breakable-cuda-graph", "--warmup-resolutions", "64x64", "--port", str(port)]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:  # it started serving after all: stop it and everything it started
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 3, output
    assert "--enable-breakable-cuda-graph" in output and "ready" not in output
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))  # nothing is listening on the HTTP port
