"""A scheduler rank as a process: the Worker plus its sockets and the loop that keeps ranks in step.

Each loop iteration: the request leader of a group drains its ZMQ inbox (blocking briefly only when
nothing anywhere is running), broadcasts what it got to the ranks of its group, every rank runs
one Worker step, and the leader pushes the outputs to the detokenizer. When idle the leader still
broadcasts every IDLE_WAIT_S so waiting ranks never hit a collective timeout.

Watchdog (--watchdog-timeout, upstream's default 300 s): the leader sends the front end a
heartbeat (carrying its load figures for /metrics) at least every HEARTBEAT_S while its loop turns, so the front end notices a stuck group
(and fails its requests and /health) after the timeout. Every rank also watches its own loop: one
iteration (a forward step, or a collective waiting on a stopped peer) that takes longer than the
timeout plus RANK_WATCHDOG_MARGIN_S ends the rank with EXIT_WATCHDOG, so a group never hangs
for the 24 h collective timeout, even on a node without the front end. The margin lets the front
end, which reacts at the timeout itself, report first.
"""

from __future__ import annotations

import os
import threading
import time

import torch
import zmq

from accord.engine.llm.messages import pack, unpack
from accord.engine.llm.settings import EngineSettings, Rank
from accord.engine.llm.worker import Worker
from accord.engine.ports import Endpoints, bind_private
from accord.engine.supervisor import EXIT_WATCHDOG, report_error, report_ready
from accord.resolver.frozen import ResolvedConfig

IDLE_WAIT_S = 1.0
# Under DP attention every attention group steps together, so an idle group must not sleep long
# while another one has work waiting to start.
DP_ATTENTION_IDLE_WAIT_S = 0.02
HEARTBEAT_S = 1.0
RANK_WATCHDOG_MARGIN_S = 10.0


class LoopWatchdog:
    """Ends this process if the scheduling loop stops turning for longer than `timeout_s`."""

    def __init__(self, timeout_s: float, name: str):
        self.timeout_s, self.name = timeout_s, name
        self.last = time.monotonic()
        threading.Thread(target=self._watch, name="loop-watchdog", daemon=True).start()

    def tick(self) -> None:
        self.last = time.monotonic()

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout_s / 4))
            stuck = time.monotonic() - self.last
            if stuck > self.timeout_s:
                report_error(f"watchdog: scheduler rank {self.name} made no progress for {stuck:.0f} s "
                             f"(--watchdog-timeout {self.timeout_s - RANK_WATCHDOG_MARGIN_S:g} s; a peer "
                             "rank or the device is stuck)")
                os._exit(EXIT_WATCHDOG)


def _drain(inbox, wait_s: float) -> list[dict]:
    """Every message waiting in the inbox, after waiting up to `wait_s` for the first one."""
    messages = []
    if wait_s and not inbox.poll(int(wait_s * 1000)):
        return messages
    while True:
        try:
            messages.append(unpack(inbox.recv(zmq.NOBLOCK)))
        except zmq.Again:
            return messages


def run_scheduler(config_data: dict, rank: Rank, endpoints: Endpoints, threads: int | None = None) -> None:
    """Process entry point of one (dp, pp, tp) rank; `threads`: its CPU intra-op threads
    (engine/llm/cpu_threads.py, decided before torch was imported)."""
    settings = EngineSettings.from_config(ResolvedConfig.from_dict(config_data))
    if settings.device_type == "cpu" and threads is not None:
        torch.set_num_threads(threads)
    worker = Worker(settings, rank, endpoints.dist_init_methods[rank.world])
    comm = worker.comm
    inbox = outbox = None
    if comm.is_request_leader:
        context = zmq.Context()
        context.setsockopt(zmq.LINGER, 0)  # never block exit on unsent messages
        inbox = context.socket(zmq.PULL)
        bind_private(inbox, endpoints.scheduler_inputs[rank.dp])
        outbox = context.socket(zmq.PUSH)
        outbox.connect(endpoints.detokenizer)
        outbox.send(pack({"type": "ready", "dp": rank.dp, "runtime": worker.runtime_info()}))
    report_ready()
    idle_wait = DP_ATTENTION_IDLE_WAIT_S if comm.dp_attention else IDLE_WAIT_S
    timeout = config_data["values"].get("watchdog_timeout")
    watchdog = LoopWatchdog(timeout + RANK_WATCHDOG_MARGIN_S, rank.name) if timeout else None
    last_beat = 0.0
    while True:
        if watchdog is not None:
            watchdog.tick()
        if outbox is not None and time.monotonic() - last_beat >= HEARTBEAT_S:
            outbox.send(pack({"type": "heartbeat", "dp": rank.dp, "stats": worker.scheduler.stats()}))
            last_beat = time.monotonic()
        payload = None
        if inbox is not None:
            busy = worker.has_work() or worker.any_group_busy
            messages = _drain(inbox, 0 if busy else idle_wait)
            payload = pack({"type": "messages", "messages": messages}) if messages else b""
        payload = comm.share_bytes(payload)
        messages = unpack(payload)["messages"] if payload else []
        outputs = worker.step(messages)
        if outbox is not None and outputs:
            outbox.send(pack({"type": "outputs", "items": outputs}))
