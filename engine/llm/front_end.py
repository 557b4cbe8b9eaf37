"""The front end's state: the sockets to the scheduler groups, the requests in flight, and the
three ways they can end early: a drain (SIGTERM), a stuck group (--watchdog-timeout) and a dead
process behind the front end (the supervisor's SIGUSR1).

Requests go to the DP groups in turn; each request's output items come back (through the
detokenizer) onto its own queue. Ending requests early puts an error item on every queue, which
each handler turns into an error JSON or, inside a stream, an error event followed by the end of
the stream, so a client always learns why. Imports no torch.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import time
from typing import AsyncIterator

import zmq
import zmq.asyncio

from accord.engine.llm.messages import pack, unpack
from accord.engine.llm.model_config import ModelConfig, context_length
from accord.engine.llm.request_errors import BadRequest
from accord.engine.llm.sampling_params import SamplingParams
from accord.engine.llm.settings import EngineSettings
from accord.engine.llm.tokenizer import make_tokenizer
from accord.engine.ports import Endpoints, bind_private
from accord.engine.supervisor import EXIT_WATCHDOG
from accord.resolver.errors import AccordError, UsageError
from accord.resolver.frozen import ResolvedConfig

WATCHDOG_POLL_S = 0.25
# After the watchdog fires, /health answers 503 this long before the process exits (and the
# supervisor tears the group down), so health checkers see why.
WATCHDOG_EXIT_GRACE_S = 5.0

# SIGTERM: stop accepting, give in-flight requests the drain period (--drain-timeout) to finish,
# then end each one still running with a JSON error (an error event for a stream) and exit. The
# supervisor waits for this process for the drain period + DRAIN_EXIT_S before it stops the
# processes behind it; uvicorn gives open responses all but the last second of that (time to
# write the errors of cut requests).
DRAIN_EXIT_S = 5.0
DRAIN_GRACE_ENV = "ACCORD_DRAIN_GRACE_S"
DRAIN_MAX_S = 3600.0


def drain_grace_s(config_values: dict, environ=os.environ) -> float:
    """The drain period: ACCORD_DRAIN_GRACE_S seconds when set (an orchestrator with its own
    termination deadline sets it below that deadline), else the resolved --drain-timeout."""
    raw = environ.get(DRAIN_GRACE_ENV)
    if raw is None:
        value = config_values.get("drain_timeout")
        if value is None:
            raise UsageError("--drain-timeout resolved to None, but the front end needs a drain period; "
                             "resolve with the engine profile (accord serve) or pass --drain-timeout.")
        return float(value)
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= DRAIN_MAX_S or math.isnan(value):
        raise UsageError(f"{DRAIN_GRACE_ENV}={raw!r} is not a drain period; set it to a number of "
                         f"seconds between 0 and {DRAIN_MAX_S:g} (or unset it for --drain-timeout).")
    return value


class WatchdogTimeout(AccordError):
    exit_code = EXIT_WATCHDOG


class FrontEnd:
    """Tokenizes requests, sends them to a scheduler group, and routes outputs back to callers."""

    def __init__(self, config: ResolvedConfig, settings: EngineSettings, model: ModelConfig,
                 endpoints: Endpoints, api_key: str | None, admin_key: str | None):
        self.config, self.settings, self.endpoints = config, settings, endpoints
        self.tokenizer = make_tokenizer(model, settings.model_path)  # as the detokenizer and ranks load it
        self.context_length = context_length(settings.context_length, model)
        self.model_name = settings.served_model_name or settings.model_path or "smollm2"
        self.api_key, self.admin_key = api_key, admin_key
        self.tool_call_parser = config.values.get("tool_call_parser")
        self.reasoning_parser = config.values.get("reasoning_parser")
        self.runtime: dict[int, dict] = {}
        self._queues: dict[str, asyncio.Queue] = {}
        self._next_group = itertools.cycle(range(len(endpoints.scheduler_inputs)))
        self.watchdog_timeout = config.values.get("watchdog_timeout")
        self.heartbeats: dict[int, float] = {}  # DP group -> when its leader last reported
        self.stuck: str | None = None            # set once the watchdog fired or a peer died
        self.draining = False                    # set on SIGTERM: no new requests
        self.metrics = None
        if config.values.get("enable_metrics"):
            from accord.engine.llm.metrics import Metrics  # prometheus-client only when asked for
            self.metrics = Metrics(self.model_name)

    @property
    def ready(self) -> bool:
        return len(self.runtime) == len(self.endpoints.scheduler_inputs)

    @property
    def in_flight(self) -> int:
        return len(self._queues)

    async def start(self) -> None:
        self._zmq = zmq.asyncio.Context()
        self._zmq.setsockopt(zmq.LINGER, 0)  # never block exit on unsent messages
        self._inbox = self._zmq.socket(zmq.PULL)
        bind_private(self._inbox, self.endpoints.tokenizer)
        self._outboxes = []
        for address in self.endpoints.scheduler_inputs:
            sock = self._zmq.socket(zmq.PUSH)
            sock.connect(address)
            self._outboxes.append(sock)
        self.reader = asyncio.create_task(self._read_outputs())
        self.watchdog = asyncio.create_task(self._watch())

    async def _read_outputs(self) -> None:
        while True:
            message = unpack(await self._inbox.recv())
            if message["type"] in ("ready", "heartbeat"):
                self.heartbeats[message["dp"]] = time.monotonic()
            if message.get("stats") and self.metrics is not None:
                self.metrics.scheduler_stats(message["dp"], message["stats"])
            if message["type"] == "ready":
                self.runtime[message["dp"]] = message["runtime"]
            elif message["type"] == "outputs":
                for item in message["items"]:
                    queue = self._queues.get(item["rid"])
                    if queue is not None:
                        queue.put_nowait(item)

    async def _watch(self) -> None:
        """--watchdog-timeout: a scheduler group whose leader stopped reporting fails every
        request in flight, then /health, then (after a short grace) this process with EXIT_WATCHDOG."""
        if not self.watchdog_timeout:
            await asyncio.Event().wait()  # off: never ends
        while True:
            await asyncio.sleep(WATCHDOG_POLL_S)
            now = time.monotonic()
            silent = sorted(d for d, t in self.heartbeats.items() if now - t > self.watchdog_timeout)
            if self.ready and silent:
                self.stuck = (f"watchdog: scheduler group dp{silent[0]} made no progress for more than "
                              f"{self.watchdog_timeout:g} s (--watchdog-timeout); the server is shutting down")
                self.fail_all(self.stuck, 503)
                await asyncio.sleep(WATCHDOG_EXIT_GRACE_S)
                raise WatchdogTimeout(self.stuck)

    def fail_all(self, message: str, status: int) -> None:
        """End every request in flight with an error (each one's handler answers it as JSON)."""
        for rid, queue in self._queues.items():
            queue.put_nowait({"rid": rid, "error": message, "error_code": status})

    def peer_died(self) -> None:
        """SIGUSR1 from the supervisor: a process behind this one (a scheduler rank, the
        detokenizer) died, so no request in flight can finish. Fail them all now, while the
        connections are open, and refuse new ones; the supervisor then stops the group."""
        self.stuck = ("a process of the server (a scheduler rank or the detokenizer) died; the request "
                      "cannot finish and the server is shutting down (see the server log)")
        self.fail_all(self.stuck, 500)

    async def drain(self, server, grace: float) -> None:
        """SIGTERM: refuse new requests, let running ones finish for the drain period, cut the rest."""
        self.draining = True
        server.should_exit = True  # uvicorn stops listening and waits for open responses
        deadline = time.monotonic() + grace
        while self._queues and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self.fail_all(f"the server is shutting down (SIGTERM) and this request did not finish within "
                      f"the {grace:g} s drain period (--drain-timeout)", 503)

    # -- requests ----------------------------------------------------------------------------------

    def check_prompt(self, input_ids: list[int], params: SamplingParams) -> None:
        """A prompt the scheduler can take: token ids in the vocabulary, and with max_new_tokens
        inside the context. Called off the event loop (a prompt can have millions of ids)."""
        if not input_ids:
            raise BadRequest("the prompt is empty")
        vocab = self.tokenizer.vocab_size
        if min(input_ids) < 0 or max(input_ids) >= vocab:
            bad = next(i for i in input_ids if not 0 <= i < vocab)
            raise BadRequest(f"input_ids must be integers in [0, {vocab}); got {bad!r}")
        total = len(input_ids) + params.max_new_tokens
        if total > self.context_length:
            raise BadRequest(f"the prompt has {len(input_ids)} tokens and max_new_tokens is "
                             f"{params.max_new_tokens}: {total} tokens exceed the context length of "
                             f"{self.context_length} by {total - self.context_length}; shorten the "
                             "prompt or lower max_new_tokens / max_tokens")
        bad = [t for t in (params.logit_bias or {}) if int(t) >= vocab]
        if bad:
            raise BadRequest(f"logit_bias: token id {bad[0]} is outside the vocabulary [0, {vocab})")

    def refuse_if_closing(self) -> None:
        if self.stuck:
            raise BadRequest(self.stuck, 503)
        if self.draining:
            raise BadRequest("the server is shutting down (SIGTERM); no new requests are taken", 503)

    def submit(self, input_ids: list[int], params: SamplingParams, stream: bool,
               rid: str, logprobs: dict | None = None) -> AsyncIterator[dict]:
        """Return the request's output items (a single one when not streaming); the request is
        sent when they are first read. `logprobs`, when given, is {"top": alternatives per
        position, "start": first prompt position, or None for none}. The prompt was checked
        with check_prompt."""
        self.refuse_if_closing()
        if rid in self._queues:
            raise BadRequest(f"rid {rid!r} is already in use by a running request")
        self._queues[rid] = asyncio.Queue()
        return self._outputs_of(input_ids, params, stream, rid, logprobs)

    def forget(self, rid: str) -> None:
        """Drop a submitted request whose outputs were never read (nothing was sent for it)."""
        self._queues.pop(rid, None)

    async def _outputs_of(self, input_ids: list[int], params: SamplingParams, stream: bool,
                          rid: str, logprobs: dict | None) -> AsyncIterator[dict]:
        queue = self._queues[rid]
        outbox = self._outboxes[next(self._next_group)]
        finished = False
        timer = self.metrics.track() if self.metrics else None
        outcome = "aborted"
        try:
            await outbox.send(pack(
                {"type": "generate", "rid": rid, "input_ids": input_ids, "sampling": params.to_dict(),
                 "stream": stream, "logprobs": logprobs}))
            while not finished:
                item = await queue.get()
                if item.get("error"):
                    finished, outcome = True, "error"
                    raise BadRequest(item["error"], item.get("error_code") or 400)
                finished = item["finished"]
                if timer:
                    timer.output(item)
                if finished:
                    outcome = "finished"
                yield item
        finally:
            if timer:
                timer.done(outcome)
            del self._queues[rid]
            if not finished:  # the caller went away: stop spending compute on it
                await outbox.send(pack({"type": "abort", "rid": rid}))

    async def flush_cache(self) -> None:
        for outbox in self._outboxes:
            await outbox.send(pack({"type": "flush_cache"}))
