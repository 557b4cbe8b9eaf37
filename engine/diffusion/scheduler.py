"""The scheduler process: queues requests, batches them, and drives the data-parallel replicas.

It owns the resolved `scheduler_port` (a ROUTER socket the HTTP front end talks to), one pipe to
each worker rank and one pipe back from all of them. Every rank of a replica receives the same
batch, in the same order, because collectives inside a replica must line up; only the replica's
leader rank answers with images. A replica gets its next batch when it has answered the last.

The scheduler also keeps what /health and /server_info report: which ranks are ready, their
process ids, the warmup each rank actually executed, and batching counters (logged per batch with
`--enable-batching-metrics`). It never imports torch.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

import zmq

from accord.engine.diffusion.batching import Batcher
from accord.engine.diffusion.ports import Endpoints
from accord.engine.diffusion.protocol import JOB_FIELDS, pack, rank_address, results_address, unpack, unpack_or_none
from accord.engine.diffusion.settings import EngineSettings
from accord.engine.supervisor import report_ready
from accord.resolver.frozen import ResolvedConfig


class Scheduler:
    def __init__(self, settings: EngineSettings, endpoints: Endpoints, ipc_dir: str):
        self.settings = settings
        self.layout = settings.layout
        self.context = zmq.Context()
        self.context.setsockopt(zmq.LINGER, 0)  # never hold exit for messages to a dead peer
        self.frontend = self.context.socket(zmq.ROUTER)
        self.frontend.bind(endpoints.scheduler_bind_address)
        self.results = self.context.socket(zmq.PULL)
        self.results.bind(results_address(ipc_dir))
        self.to_rank = []
        for rank in range(self.layout.world_size):
            sock = self.context.socket(zmq.PUSH)
            sock.bind(rank_address(ipc_dir, rank))
            self.to_rank.append(sock)
        self.batcher = Batcher(settings.batching_max_size, settings.batching_delay_ms / 1000.0)
        self.workers: dict[int, dict[str, Any]] = {}  # rank -> {"pid", "device", "warmup"}
        self.request_warmup: list[dict[str, Any]] | None = None
        self.busy: dict[int, int] = {}  # dp rank -> batch id in flight
        self.in_flight: dict[int, list[tuple[bytes, dict[str, Any]]]] = {}
        self.batch_ids = itertools.count()
        self.counters = {"batches": 0, "requests": 0, "images": 0, "queue_wait_s": 0.0}

    @property
    def ready(self) -> bool:
        return len(self.workers) == self.layout.world_size

    def serve_forever(self) -> None:
        poller = zmq.Poller()
        poller.register(self.frontend, zmq.POLLIN)
        poller.register(self.results, zmq.POLLIN)
        report_ready()
        while True:
            wait = self.batcher.seconds_until_due(time.monotonic()) if self.ready else None
            events = dict(poller.poll(None if wait is None else max(1, int(wait * 1000))))
            if self.frontend in events:
                while self.frontend.poll(0):
                    self._on_frontend(self.frontend.recv_multipart())
            if self.results in events:
                while self.results.poll(0):
                    self._on_worker_message(unpack(self.results.recv()))
            self._dispatch()

    # -- front end ---------------------------------------------------------------------------

    def _on_frontend(self, frames: list[bytes]) -> None:
        """One message on the scheduler port; a malformed one is answered, never allowed to crash us."""
        identity = frames[0]
        message = unpack_or_none(frames[-1]) if len(frames) == 2 else None
        if message is None:
            self._reply(identity, {"id": None, "error": "malformed message: expected one msgpack map"})
        elif message.get("op") == "status":
            self._reply(identity, {"id": message.get("id"), **self.status()})
        elif message.get("op") == "generate" and _well_formed(message):
            key = (message["width"], message["height"], message["steps"])
            now = time.monotonic()
            self.batcher.add(key, (identity, message, now), now)
        else:
            self._reply(identity, {"id": message.get("id"), "error": f"unknown or malformed op {message.get('op')!r}"})

    def status(self) -> dict[str, Any]:
        plan = self.settings.plan
        if plan.mode == "server":
            executed = {str(r): w["warmup"] for r, w in sorted(self.workers.items())}
        else:
            executed = {"leader": self.request_warmup} if self.request_warmup is not None else {}
        return {
            "ready": self.ready,
            "ready_workers": len(self.workers),
            "workers": self.layout.world_size,
            "queued_requests": len(self.batcher),
            "processes": {"scheduler": os.getpid(),
                          **{f"worker{r}": w["pid"] for r, w in sorted(self.workers.items())}},
            "devices": {str(r): w["device"] for r, w in sorted(self.workers.items())},
            "warmup_executed": executed,
            "batching": self._batching_summary(),
        }

    def _batching_summary(self) -> dict[str, Any]:
        batches = self.counters["batches"]
        return {"batches": batches, "requests": self.counters["requests"], "images": self.counters["images"],
                "mean_requests_per_batch": round(self.counters["requests"] / batches, 3) if batches else None,
                "mean_queue_wait_ms": round(1000 * self.counters["queue_wait_s"] / batches, 3) if batches else None}

    def _reply(self, identity: bytes, message: dict[str, Any]) -> None:
        self.frontend.send_multipart([identity, pack(message)])

    # -- workers -----------------------------------------------------------------------------

    def _on_worker_message(self, message: dict[str, Any]) -> None:
        if message["kind"] == "ready":
            self.workers[message["rank"]] = {"pid": message["pid"], "device": message["device"],
                                             "warmup": message["warmup"]}
        elif message["kind"] == "result":
            self._on_result(message)

    def _on_result(self, message: dict[str, Any]) -> None:
        waiting = self.in_flight.pop(message["batch_id"])
        self.busy = {dp: b for dp, b in self.busy.items() if b != message["batch_id"]}
        info = message["info"]
        if info.get("warmup"):
            self.request_warmup = info["warmup"]["ran_before_this_request"]
        images = iter(message["images"])
        for identity, request, _ in waiting:
            own = [next(images) for _ in request["jobs"]]
            self._reply(identity, {"id": request["id"], "images": own, "info": info})

    def _dispatch(self) -> None:
        if not self.ready:
            return
        for dp in range(self.layout.dp):
            if dp in self.busy:
                continue
            now = time.monotonic()
            chosen = self.batcher.next_batch(now)
            if chosen is None:
                return
            batch_id = next(self.batch_ids)
            first = chosen[0][1]
            batch = {"kind": "batch", "batch_id": batch_id, "width": first["width"], "height": first["height"],
                     "steps": first["steps"], "jobs": [job for _, request, _ in chosen for job in request["jobs"]]}
            self._count(batch_id, dp, len(chosen), len(batch["jobs"]), now - chosen[0][2])
            payload = pack(batch)
            for rank in self.layout.replica_ranks(dp):
                self.to_rank[rank].send(payload)
            self.busy[dp] = batch_id
            self.in_flight[batch_id] = chosen

    def _count(self, batch_id: int, dp: int, requests: int, images: int, waited_s: float) -> None:
        for key, amount in (("batches", 1), ("requests", requests), ("images", images), ("queue_wait_s", waited_s)):
            self.counters[key] += amount
        if self.settings.batching_metrics:
            print(f"accord diffusion scheduler: batch {batch_id} -> replica {dp}: {requests} request(s), "
                  f"{images} image(s), oldest waited {1000 * waited_s:.1f} ms", flush=True)


def _well_formed(message: dict[str, Any]) -> bool:
    """Does a generate message carry what a worker unpacks? (The front end has checked the values.)"""
    jobs = message.get("jobs")
    sizes_ok = all(isinstance(message.get(k), int) and message[k] > 0 for k in ("width", "height", "steps"))
    return sizes_ok and isinstance(jobs, list) and bool(jobs) and all(
        isinstance(job, dict) and set(job) == JOB_FIELDS for job in jobs)


def scheduler_main(config_dict: dict, endpoints_dict: dict, ipc_dir: str) -> None:
    """Entry point of the scheduler process."""
    config = ResolvedConfig.from_dict(config_dict)
    Scheduler(EngineSettings.from_config(config), Endpoints.from_dict(endpoints_dict), ipc_dir).serve_forever()
