"""The front end process: HTTP (starlette + uvicorn), tokenization, and routing to the schedulers.

Endpoints: SGLang's native /generate, /tokenize, /detokenize, /get_model_info; OpenAI-compatible
/v1/completions and /v1/chat/completions (n choices, list prompts, text content parts,
stream_options.include_usage, logprobs / top_logprobs, echo, penalties, logit_bias, min_tokens)
(streamed as server-sent events when "stream" is true), /v1/models, /health (200 once every
scheduler group reported ready) and /server_info (the resolved config with provenance, plus the
sizes the ranks derived from it). A bad body is a 400 naming the field; a prompt that does not fit
the context is a 400 saying by how much. Requests go to the DP groups in turn. Imports no torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import os
import signal
import time
import uuid
from typing import Any, AsyncIterator

import uvicorn
import zmq
import zmq.asyncio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from accord.engine.llm.messages import pack, unpack
from accord.engine.llm.model_config import ModelConfig, context_length, load_model_config
from accord.engine.llm.sampling_params import MAX_NEW_TOKENS_DEFAULT, SamplingParams
from accord.engine.llm.settings import EngineSettings
from accord.engine.llm.tokenizer import make_tokenizer
from accord.engine.ports import Endpoints, bind_private
from accord.engine.supervisor import EXIT_WATCHDOG, report_ready
from accord.resolver.errors import AccordError, UsageError
from accord.resolver.frozen import ResolvedConfig

OPENAI_COMPLETION_DEFAULT_MAX_TOKENS = 16
HEALTH_GENERATE_TIMEOUT_S = 20.0


WATCHDOG_POLL_S = 0.25
# After the watchdog fires, /health answers 503 this long before the process exits (and the
# supervisor tears the group down), so health checkers see why.
WATCHDOG_EXIT_GRACE_S = 5.0


# SIGTERM: stop accepting, give in-flight requests this long to finish, then end each one still
# running with a JSON error (an error event for a stream) and exit. The supervisor waits for this
# process for the drain period + DRAIN_EXIT_S before it stops the processes behind it; uvicorn gives
# open responses all but the last second of that (time to write the errors of cut requests).
DRAIN_GRACE_S = 10.0
DRAIN_EXIT_S = 5.0
DRAIN_GRACE_ENV = "ACCORD_DRAIN_GRACE_S"


def drain_grace_s(environ=os.environ) -> float:
    """The drain period: ACCORD_DRAIN_GRACE_S seconds when set (an orchestrator with its own
    termination deadline sets it below that deadline), else DRAIN_GRACE_S."""
    raw = environ.get(DRAIN_GRACE_ENV)
    if raw is None:
        return DRAIN_GRACE_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 3600:  # also false for nan
        raise UsageError(f"{DRAIN_GRACE_ENV}={raw!r} is not a drain period; set it to a number of "
                         f"seconds between 0 and 3600 (or unset it for {DRAIN_GRACE_S:g} s).")
    return value


class WatchdogTimeout(AccordError):
    exit_code = EXIT_WATCHDOG


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def error_response(message: str, status: int) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


SECRET_KEYS = ("api_key", "admin_api_key")
# Where a key can come from instead of argv (where `ps` shows it): an environment variable holding
# the key, or one naming a file that holds it. SGLang itself only has --api-key / --admin-api-key.
KEY_SOURCES = {"api_key": ("ACCORD_API_KEY", "ACCORD_API_KEY_FILE"),
               "admin_api_key": ("ACCORD_ADMIN_API_KEY", "ACCORD_ADMIN_API_KEY_FILE")}


def secret(name: str, from_config: str | None, environ) -> str | None:
    """The key `name` from exactly one of: its flag, its environment variable, its file (named by
    an environment variable). More than one, an unreadable or an empty file is a UsageError; the
    key itself is never part of a message."""
    variable, file_variable = KEY_SOURCES[name]
    flag = "--" + name.replace("_", "-")
    given = [what for what, present in ((flag, from_config is not None), (variable, variable in environ),
                                        (file_variable, file_variable in environ)) if present]
    if len(given) > 1:
        raise UsageError(f"the {name.replace('_', ' ').replace('api', 'API')} is given more than once "
                         f"({' and '.join(given)}); keep one of them.")
    if file_variable in environ:
        path = environ[file_variable]
        try:
            with open(path, encoding="utf-8") as fh:
                value = fh.read().strip()
        except OSError as err:
            raise UsageError(f"{file_variable}={path}: cannot read the key file ({err.strerror}); "
                             "point it at a readable file holding the key.") from None
        if not value:
            raise UsageError(f"{file_variable}={path}: the key file is empty; write the key into it.")
        return value
    if variable in environ:
        if not environ[variable]:
            raise UsageError(f"{variable} is set but empty; set it to the key or unset it.")
        return environ[variable]
    return from_config


def redacted(info: dict) -> dict:
    """The config as /server_info shows it: secrets replaced by a marker saying one is set."""
    values = dict(info.get("values", {}))
    for key in SECRET_KEYS:
        if values.get(key) is not None:
            values[key] = "<redacted>"
    provenance = dict(info.get("provenance", {}))
    for key in SECRET_KEYS:
        if isinstance(provenance.get(key), dict):
            provenance[key] = {"source": provenance[key].get("source")}
    return {**info, "values": values, "provenance": provenance}


class FrontEnd:
    """Tokenizes requests, sends them to a scheduler group, and routes outputs back to callers."""

    def __init__(self, config: ResolvedConfig, settings: EngineSettings, model: ModelConfig,
                 endpoints: Endpoints):
        self.config, self.settings, self.endpoints = config, settings, endpoints
        self.tokenizer = make_tokenizer(model)
        self.context_length = context_length(settings.context_length, model)
        self.model_name = settings.served_model_name or settings.model_path or "smollm2"
        self.runtime: dict[int, dict] = {}
        self._queues: dict[str, asyncio.Queue] = {}
        self._next_group = itertools.cycle(range(len(endpoints.scheduler_inputs)))
        self.api_key = secret("api_key", settings.api_key, os.environ)
        self.admin_key = secret("admin_api_key", config.values.get("admin_api_key"), os.environ)
        self.watchdog_timeout = config.values.get("watchdog_timeout")
        self.heartbeats: dict[int, float] = {}  # DP group -> when its leader last reported
        self.stuck: str | None = None            # set once the watchdog fired
        self.draining = False                    # set on SIGTERM: no new requests
        self.metrics = None
        if config.values.get("enable_metrics"):
            from accord.engine.llm.metrics import Metrics  # prometheus-client only when asked for
            self.metrics = Metrics(self.model_name)

    @property
    def ready(self) -> bool:
        return len(self.runtime) == len(self.endpoints.scheduler_inputs)

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

    async def drain(self, server) -> None:
        """SIGTERM: refuse new requests, let running ones finish for the drain period, cut the rest."""
        self.draining = True
        server.should_exit = True  # uvicorn stops listening and waits for open responses
        grace = drain_grace_s()
        deadline = time.monotonic() + grace
        while self._queues and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self.fail_all(f"the server is shutting down (SIGTERM) and this request did not finish within "
                      f"the {grace:g} s drain period", 503)

    def check_prompt(self, input_ids: list[int], max_new_tokens: int) -> None:
        if not input_ids:
            raise BadRequest("the prompt is empty")
        bad = [i for i in input_ids if not isinstance(i, int) or not 0 <= i < self.tokenizer.vocab_size]
        if bad:
            raise BadRequest(f"input_ids must be integers in [0, {self.tokenizer.vocab_size}); got {bad[0]!r}")
        total = len(input_ids) + max_new_tokens
        if total > self.context_length:
            raise BadRequest(f"the prompt has {len(input_ids)} tokens and max_new_tokens is "
                             f"{max_new_tokens}: {total} tokens exceed the context length of "
                             f"{self.context_length} by {total - self.context_length}; shorten the "
                             "prompt or lower max_new_tokens / max_tokens")

    def check_token_ids(self, params: SamplingParams) -> None:
        vocab = self.tokenizer.vocab_size
        bad = [t for t in (params.logit_bias or {}) if int(t) >= vocab]
        if bad:
            raise BadRequest(f"logit_bias: token id {bad[0]} is outside the vocabulary [0, {vocab})")

    def submit(self, input_ids: list[int], params: SamplingParams, stream: bool,
               rid: str, logprobs: dict | None = None) -> AsyncIterator[dict]:
        """Check the prompt now (so a bad one is a 400 before any streaming starts), then return
        the request's output items (a single one when not streaming). `logprobs`, when given, is
        {"top": alternatives per position, "start": first prompt position, or None for none}."""
        if self.stuck:
            raise BadRequest(self.stuck, 503)
        if self.draining:
            raise BadRequest("the server is shutting down (SIGTERM); no new requests are taken", 503)
        self.check_prompt(input_ids, params.max_new_tokens)
        self.check_token_ids(params)
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


DISCONNECT_POLL_S = 0.25


async def unless_disconnected(request: Request, work):
    """Await `work`, cancelling it (which aborts its requests) if the client goes away first."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                raise BadRequest("the client disconnected", 499)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, BadRequest):
                await task


async def final_item(items: AsyncIterator[dict]) -> dict:
    """The last (for a non-streamed request, the only) output item."""
    try:
        async for item in items:
            last = item
        return last
    finally:
        await items.aclose()  # on cancellation too: closing an unfinished request aborts it


# -- request parsing -------------------------------------------------------------------------------

# Far above any prompt the context holds as text or token ids; a bigger body is refused unread.
MAX_BODY_BYTES = 32 * 1024 * 1024


async def read_json(request: Request) -> dict:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise BadRequest(f"the request body is {declared} bytes; the limit is {MAX_BODY_BYTES}", 413)
    data = bytearray()
    async for piece in request.stream():
        data += piece
        if len(data) > MAX_BODY_BYTES:
            raise BadRequest(f"the request body exceeds the limit of {MAX_BODY_BYTES} bytes", 413)
    try:
        # Parsing a large body takes a while: off the event loop, so other requests keep flowing.
        body = await asyncio.to_thread(json.loads, bytes(data))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BadRequest(f"the request body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def sampling_from(raw: Any) -> SamplingParams:
    if not isinstance(raw, dict):
        raise BadRequest("sampling_params must be a JSON object")
    try:
        return SamplingParams.from_request(raw)
    except (ValueError, TypeError) as err:
        raise BadRequest(f"sampling_params: {err}") from None


# Fields this engine does not implement: a request that sets them is refused, never half-served.
UNSUPPORTED_WHEN_SET = ("suffix", "tools", "functions")
MAX_TOP_LOGPROBS = 20  # as vLLM and OpenAI's chat API allow


def choice_count(body: dict) -> int:
    """`n` (and `best_of`, which must not ask for more candidates than are returned)."""
    n, best_of = body.get("n", 1), body.get("best_of")
    if n is None:
        n = 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 128:
        raise BadRequest("n must be an integer in [1, 128]")
    if best_of is not None and best_of != n:
        raise BadRequest("best_of must equal n: this server returns every candidate it samples")
    return n


def openai_sampling(body: dict, default_max_tokens: int | None) -> SamplingParams:
    for field in UNSUPPORTED_WHEN_SET:
        if body.get(field) not in (None, False, [], {}):
            raise BadRequest(f"{field} is not supported by this server; remove it from the request")
    if body.get("tool_choice") not in (None, "none"):
        raise BadRequest("tool_choice is not supported by this server (no tool calling)")
    response_format = body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise BadRequest("response_format other than {\"type\": \"text\"} is not supported by this "
                         "server (no constrained decoding)")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", default_max_tokens))
    raw = {"max_new_tokens": max_tokens if max_tokens is not None else MAX_NEW_TOKENS_DEFAULT,
           "temperature": body.get("temperature"), "top_p": body.get("top_p"), "top_k": body.get("top_k"),
           "stop": body.get("stop"), "seed": body.get("seed"), "ignore_eos": body.get("ignore_eos"),
           "stop_token_ids": body.get("stop_token_ids"), "frequency_penalty": body.get("frequency_penalty"),
           "presence_penalty": body.get("presence_penalty"),
           "repetition_penalty": body.get("repetition_penalty"), "min_new_tokens": body.get("min_tokens"),
           "logit_bias": body.get("logit_bias")}
    try:
        return SamplingParams.from_request(raw)
    except (ValueError, TypeError) as err:
        raise BadRequest(str(err).replace("max_new_tokens", "max_tokens").replace("min_new_tokens", "min_tokens")) from None


def top_count(value: Any, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TOP_LOGPROBS:
        raise BadRequest(f"{field} must be an integer in [0, {MAX_TOP_LOGPROBS}]")
    return value


def completion_logprobs(body: dict) -> dict | None:
    """Completions: `logprobs` N asks for N alternatives per token; with `echo`, the prompt's too."""
    if body.get("logprobs") is None:
        return None
    return {"top": top_count(body["logprobs"], "logprobs"), "start": 0 if body.get("echo") else None}


def chat_logprobs(body: dict) -> dict | None:
    """Chat: `logprobs: true` asks for them, `top_logprobs` N for N alternatives."""
    wanted = bool_field(body, "logprobs")
    top = body.get("top_logprobs")
    if top is not None and not wanted:
        raise BadRequest("top_logprobs needs logprobs: true")
    return {"top": top_count(top or 0, "top_logprobs"), "start": None} if wanted else None


def native_logprobs(body: dict) -> dict | None:
    """/generate: return_logprob, top_logprobs_num, logprob_start_len (-1: output only), as upstream."""
    if not bool_field(body, "return_logprob"):
        return None
    start = body.get("logprob_start_len", -1)
    if start is None:
        start = -1
    if not isinstance(start, int) or isinstance(start, bool) or start < -1:
        raise BadRequest("logprob_start_len must be an integer >= -1 (-1: output tokens only)")
    return {"top": top_count(body.get("top_logprobs_num") or 0, "top_logprobs_num"),
            "start": None if start == -1 else start}


def bool_field(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be true or false")
    return value


def finish_reason(item: dict) -> str | None:
    reason = item.get("finish_reason")
    return None if reason is None else ("length" if reason["type"] == "length" else "stop")


async def merged(streams: list[AsyncIterator[dict]]) -> AsyncIterator[tuple[int, dict]]:
    """(choice index, item) from several requests' outputs as they arrive."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, items: AsyncIterator[dict]) -> None:
        try:
            async for item in items:
                await queue.put((index, item, None))
        except BadRequest as err:
            await queue.put((index, None, err))
        await queue.put((index, None, None))

    tasks = [asyncio.create_task(pump(i, items)) for i, items in enumerate(streams)]
    try:
        open_streams = len(streams)
        while open_streams:
            index, item, err = await queue.get()
            if err is not None:
                raise err
            if item is None:
                open_streams -= 1
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        for items in streams:
            await items.aclose()


class Choices:
    """The n x prompts requests behind one OpenAI call, closed together (which aborts them)."""

    def __init__(self, streams: list[AsyncIterator[dict]]):
        self.streams = streams

    async def aclose(self) -> None:
        for items in self.streams:
            await items.aclose()

    async def finals(self) -> list[dict]:
        try:
            return list(await asyncio.gather(*(final_item(items) for items in self.streams)))
        finally:
            await self.aclose()


def include_usage(body: dict) -> bool:
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("stream_options must be an object")
    value = options.get("include_usage", False)
    if not isinstance(value, bool):
        raise BadRequest("stream_options.include_usage must be true or false")
    return value


def text_content(content: Any, index: int) -> str:
    """A chat message's content: a string, or a list of {"type": "text"} parts (joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise BadRequest(f"messages[{index}].content: only text parts are supported, got {kind!r}")
            texts.append(part["text"])
        return "".join(texts)
    raise BadRequest(f"messages[{index}].content must be a string or a list of text parts")


def sse(events: AsyncIterator[dict], items: AsyncIterator[dict]) -> StreamingResponse:
    """Server-sent events; closing `items` at the end aborts the request if the client left early."""
    async def body():
        try:
            async for event in events:
                yield f"data: {json.dumps(event, sort_keys=True)}\n\n"
        except BadRequest as err:
            yield f"data: {json.dumps({'error': {'message': str(err), 'code': err.status}})}\n\n"
        finally:
            await items.aclose()
        yield "data: [DONE]\n\n"
    return StreamingResponse(body(), media_type="text/event-stream")


# -- the application -----------------------------------------------------------------------------

def build_app(front: FrontEnd) -> Starlette:
    tokenizer = front.tokenizer
    skip_text = front.settings.skip_tokenizer_init

    async def prompt_ids(prompt: Any, field: str) -> list[int]:
        """A prompt given as text or as token ids."""
        if isinstance(prompt, list):
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
                raise BadRequest(f"{field} must be a list of integer token ids")
            return prompt
        if isinstance(prompt, str):
            if skip_text:
                raise BadRequest("the server runs with --skip-tokenizer-init: send token ids, not text")
            return await asyncio.to_thread(tokenizer.encode, prompt)
        raise BadRequest(f"{field} must be a string or a list of token ids")

    def token_str(token: int) -> str:
        return f"token_id:{token}" if skip_text else tokenizer.decode([token])

    def meta(item: dict, rid: str, logprobs: dict | None = None) -> dict:
        info = {"id": rid, "finish_reason": item.get("finish_reason"),
                "prompt_tokens": item["prompt_tokens"], "completion_tokens": item["completion_tokens"],
                "cached_tokens": item["cached_tokens"]}
        return {**info, **(logprobs or {})}

    def native_logprob_fields(entries: dict, top: int, with_text: bool) -> dict:
        """Upstream's meta_info shape: (logprob, token id, text or None) per position, and per
        position its top alternatives (None where there is no logprob: the first prompt token)."""
        def one(lp, token):
            return [lp, token, token_str(token) if with_text else None]
        fields = {}
        for side in ("input", "output"):
            fields[f"{side}_token_logprobs"] = [one(lp, t) for lp, t, _ in entries[side]]
            if top:
                fields[f"{side}_top_logprobs"] = [None if lp is None else [one(a, b) for a, b in alts]
                                                  for lp, _, alts in entries[side]]
        return fields

    async def generate(request: Request) -> Response:
        body = await read_json(request)
        params = sampling_from(body.get("sampling_params") or {})
        stream = bool_field(body, "stream")
        wanted = native_logprobs(body)
        with_text = bool_field(body, "return_text_in_logprobs")
        if "input_ids" not in body and "text" not in body:
            raise BadRequest("text or input_ids is required")
        field = "input_ids" if "input_ids" in body else "text"
        ids = await prompt_ids(body[field], field)
        rid = str(body.get("rid") or uuid.uuid4().hex)
        items = front.submit(ids, params, stream, rid, wanted)
        entries = {"input": [], "output": []}

        def logprob_fields(item: dict) -> dict | None:
            if wanted is None:
                return None
            for side in entries:
                entries[side] += (item.get("logprobs") or {}).get(side, [])
            return native_logprob_fields(entries, wanted["top"], with_text)

        if stream:
            async def events():
                text, out_ids = "", []
                async for item in items:
                    text += item["text"] or ""
                    out_ids += item["ids"]
                    yield {"text": None if skip_text else text, "output_ids": out_ids,
                           "meta_info": meta(item, rid, logprob_fields(item))}
            return sse(events(), items)
        item = await unless_disconnected(request, final_item(items))
        return JSONResponse({"text": item["text"], "output_ids": item["ids"],
                             "meta_info": meta(item, rid, logprob_fields(item))})

    def top_dict(alternatives: list) -> dict:
        """{token text: logprob}, best first; tokens that decode alike keep the best logprob."""
        found: dict[str, float] = {}
        for value, token in alternatives:
            found.setdefault(token_str(token), value)
        return found

    def completion_logprob_fields(entries: list, offset: int) -> dict:
        """The legacy completions shape; text offsets count from `offset` in the choice's text."""
        tokens = [token_str(t) for _, t, _ in entries]
        offsets = []
        for token in tokens:
            offsets.append(offset)
            offset += len(token)
        return {"tokens": tokens, "token_logprobs": [lp for lp, _, _ in entries],
                "top_logprobs": [None if lp is None else top_dict(alts) for lp, _, alts in entries],
                "text_offset": offsets}

    def chat_logprob_fields(entries: list) -> dict:
        def one(lp, token):
            text = token_str(token)
            return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}
        return {"content": [{**one(lp, t), "top_logprobs": [one(a, b) for a, b in alts]}
                            for lp, t, alts in entries], "refusal": None}

    def usage(item: dict) -> dict:
        return {"prompt_tokens": item["prompt_tokens"], "completion_tokens": item["completion_tokens"],
                "total_tokens": item["prompt_tokens"] + item["completion_tokens"]}

    def check_model(body: dict) -> None:
        model = body.get("model")
        if model is not None and model != front.model_name:
            raise BadRequest(f"The model `{model}` does not exist. This server serves "
                             f"`{front.model_name}`.", 404)

    def prompt_list(raw: Any) -> list:
        """A completion prompt (text, token ids, or a non-empty list of either) as a list of them."""
        if isinstance(raw, list) and raw and all(isinstance(p, (str, list)) for p in raw):
            return raw
        return [raw]

    async def prompts_of(raw: Any) -> list[list[int]]:
        listed = prompt_list(raw)
        return [await prompt_ids(p, "prompt" if listed[0] is raw else f"prompt[{i}]")
                for i, p in enumerate(listed)]

    def start_choices(prompts: list[list[int]], n: int, params: SamplingParams, stream: bool,
                      rid: str, logprobs: dict | None = None) -> Choices:
        streams, rids = [], []
        try:
            for p, ids in enumerate(prompts):
                for k in range(n):
                    rids.append(f"{rid}-{p * n + k}")
                    streams.append(front.submit(ids, params, stream, rids[-1], logprobs))
        except BadRequest:
            for submitted in rids[:len(streams)]:
                front.forget(submitted)
            raise
        return Choices(streams)

    def total_usage(finals: list[dict], prompts: list[list[int]]) -> dict:
        prompt = sum(len(p) for p in prompts)
        completion = sum(item["completion_tokens"] for item in finals)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def openai_stream(choices: Choices, chunk, base: dict, usage_wanted: bool, prompts, n: int):
        async def events():
            completion = [0] * len(choices.streams)
            first = [True] * len(choices.streams)
            async for index, item in merged(choices.streams):
                completion[index] = item["completion_tokens"]
                yield {**base, "choices": [chunk(index, item, first[index])]}
                first[index] = False
            if usage_wanted:
                prompt = sum(len(p) for p in prompts) * n
                yield {**base, "choices": [], "usage": {
                    "prompt_tokens": prompt, "completion_tokens": sum(completion),
                    "total_tokens": prompt + sum(completion)}}
        return sse(events(), choices)

    async def completions(request: Request) -> Response:
        body = await read_json(request)
        check_model(body)
        params = openai_sampling(body, OPENAI_COMPLETION_DEFAULT_MAX_TOKENS)
        stream, n = bool_field(body, "stream"), choice_count(body)
        usage_wanted = include_usage(body)
        echo, wanted = bool_field(body, "echo"), completion_logprobs(body)
        if "prompt" not in body:
            raise BadRequest("prompt is required")
        prompts = await prompts_of(body["prompt"])
        echoed = [r if isinstance(r, str) else tokenizer.decode(ids)
                  for r, ids in zip(prompt_list(body["prompt"]), prompts)] if echo and not skip_text \
            else [""] * len(prompts)
        rid = f"cmpl-{uuid.uuid4().hex}"
        base = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": front.model_name}
        choices = start_choices(prompts, n, params, stream, rid, wanted)

        def choice(index: int, item: dict, first: bool, offset: int = 0) -> dict:
            """One choice (or one chunk of it); with echo the prompt comes first."""
            prefix = echoed[index // n] if first else ""
            text = prefix + (item["text"] or "")
            logprobs = None
            if wanted is not None:
                found = item.get("logprobs") or {}
                entries = (found.get("input", []) if echo else []) + found.get("output", [])
                logprobs = completion_logprob_fields(entries, offset)
            return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason(item)}

        if stream:
            offsets = [0] * len(choices.streams)

            def chunk(index, item, first):
                out = choice(index, item, first, offsets[index])
                offsets[index] += len(out["text"])
                return out
            return openai_stream(choices, chunk, base, usage_wanted, prompts, n)
        finals = await unless_disconnected(request, choices.finals())
        return JSONResponse({**base, "choices": [choice(i, item, True) for i, item in enumerate(finals)],
                             "usage": total_usage(finals, [p for p in prompts for _ in range(n)])})

    async def chat_completions(request: Request) -> Response:
        body = await read_json(request)
        check_model(body)
        params = openai_sampling(body, None)
        stream, n = bool_field(body, "stream"), choice_count(body)
        usage_wanted = include_usage(body)
        wanted = chat_logprobs(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise BadRequest("messages must be a non-empty list of {\"role\": str, \"content\": ...} objects")
        messages = [{"role": m["role"], "content": text_content(m.get("content"), i)}
                    for i, m in enumerate(messages)]
        if skip_text:
            raise BadRequest("chat needs the tokenizer; the server runs with --skip-tokenizer-init")
        prompts = [await asyncio.to_thread(lambda: tokenizer.encode(tokenizer.apply_chat_template(messages)))]
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        base = {"id": rid, "created": int(time.time()), "model": front.model_name}
        choices = start_choices(prompts, n, params, stream, rid, wanted)

        def logprobs_of(item: dict) -> dict | None:
            return None if wanted is None else chat_logprob_fields((item.get("logprobs") or {}).get("output", []))

        if stream:
            def chunk(index, item, first):
                delta = {"content": item["text"] or ""}
                if first:
                    delta["role"] = "assistant"
                return {"index": index, "delta": delta, "logprobs": logprobs_of(item),
                        "finish_reason": finish_reason(item)}
            return openai_stream(choices, chunk, {**base, "object": "chat.completion.chunk"},
                                 usage_wanted, prompts, n)
        finals = await unless_disconnected(request, choices.finals())
        return JSONResponse({**base, "object": "chat.completion", "choices": [
            {"index": i, "message": {"role": "assistant", "content": item["text"]},
             "logprobs": logprobs_of(item), "finish_reason": finish_reason(item)} for i, item in enumerate(finals)],
            "usage": total_usage(finals, prompts * n)})

    def model_card() -> dict:
        return {"id": front.model_name, "object": "model", "created": 0, "owned_by": "accord",
                "max_model_len": front.context_length}

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [model_card()]})

    async def model(request: Request) -> Response:
        check_model({"model": request.path_params["model"]})
        return JSONResponse(model_card())

    async def tokenize(request: Request) -> Response:
        body = await read_json(request)
        if skip_text:
            raise BadRequest("the server runs with --skip-tokenizer-init: no tokenizer")
        if "messages" in body:
            messages = [{"role": m.get("role"), "content": text_content(m.get("content"), i)}
                        for i, m in enumerate(body["messages"] or [])]
            text = tokenizer.apply_chat_template(messages)
        else:
            text = body.get("prompt", body.get("text"))
        if not isinstance(text, str):
            raise BadRequest("prompt (a string) or messages is required")
        add_special = body.get("add_special_tokens", True)
        ids = await asyncio.to_thread(tokenizer.encode, text, bool(add_special))
        return JSONResponse({"tokens": ids, "count": len(ids), "max_model_len": front.context_length})

    async def detokenize(request: Request) -> Response:
        body = await read_json(request)
        ids = body.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise BadRequest("tokens must be a list of integer token ids")
        return JSONResponse({"prompt": tokenizer.decode(ids)})

    async def model_info(request: Request) -> Response:
        return JSONResponse({"model_path": front.settings.model_path, "served_model_name": front.model_name,
                             "is_generation": True, "context_length": front.context_length,
                             "vocab_size": tokenizer.vocab_size})

    async def health(request: Request) -> Response:
        if front.stuck:
            return JSONResponse({"status": "unhealthy", "error": front.stuck}, status_code=503)
        if front.ready:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "starting"}, status_code=503)

    async def health_generate(request: Request) -> Response:
        """Healthy only if a real one-token generation comes back through every process."""
        if front.stuck:
            return JSONResponse({"status": "unhealthy", "error": front.stuck}, status_code=503)
        if not front.ready:
            return JSONResponse({"status": "starting"}, status_code=503)
        seed = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else 0
        params = SamplingParams(max_new_tokens=1, temperature=0.0, ignore_eos=True)
        try:
            await asyncio.wait_for(final_item(front.submit([seed], params, False, f"health-{uuid.uuid4().hex}")),
                                   HEALTH_GENERATE_TIMEOUT_S)
        except (asyncio.TimeoutError, BadRequest) as err:
            return error_response(f"the health generation failed: {err or 'timed out'}", 503)
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        if front.metrics is None:
            raise BadRequest("metrics are off; start the server with --enable-metrics", 404)
        return Response(front.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def flush_cache(request: Request) -> Response:
        for outbox in front._outboxes:
            await outbox.send(pack({"type": "flush_cache"}))
        return JSONResponse({"status": "ok", "message": "cached prefixes not in use are released"})

    async def server_info(request: Request) -> Response:
        info = redacted(front.config.to_dict())
        info["runtime"] = {f"dp{d}": front.runtime[d] for d in sorted(front.runtime)}
        return JSONResponse(info)

    admin_key = front.admin_key

    def guarded(handler, public: bool = False, admin: bool = False):
        """API-key check (constant time); admin routes take --admin-api-key when one is set."""
        async def endpoint(request: Request) -> Response:
            key = admin_key if admin and admin_key else front.api_key
            given = request.headers.get("authorization", "").encode()
            if key and not public and not hmac.compare_digest(given, f"Bearer {key}".encode()):
                which = "admin API key" if admin and admin_key else "API key"
                return error_response(f"missing or wrong {which} (Authorization: Bearer ...)", 401)
            try:
                return await handler(request)
            except BadRequest as err:
                return error_response(str(err), err.status)
        return endpoint

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await front.start()
        yield

    routes = [
        Route("/generate", guarded(generate), methods=["POST"]),
        Route("/v1/completions", guarded(completions), methods=["POST"]),
        Route("/v1/chat/completions", guarded(chat_completions), methods=["POST"]),
        Route("/v1/models", guarded(models), methods=["GET"]),
        Route("/v1/models/{model:path}", guarded(model), methods=["GET"]),
        Route("/tokenize", guarded(tokenize), methods=["POST"]),
        Route("/detokenize", guarded(detokenize), methods=["POST"]),
        Route("/get_model_info", guarded(model_info), methods=["GET"]),
        Route("/metrics", guarded(metrics, public=True), methods=["GET"]),
        Route("/health", guarded(health, public=True), methods=["GET"]),
        Route("/health_generate", guarded(health_generate, public=True), methods=["GET"]),
        Route("/server_info", guarded(server_info, admin=True), methods=["GET"]),
        Route("/flush_cache", guarded(flush_cache, admin=True), methods=["POST"]),
    ]
    async def http_error(request: Request, exc: HTTPException) -> Response:
        return error_response(exc.detail or "error", exc.status_code)

    async def server_error(request: Request, exc: Exception) -> Response:
        return error_response(f"internal server error: {type(exc).__name__}", 500)

    return Starlette(routes=routes, lifespan=lifespan,
                     exception_handlers={HTTPException: http_error, Exception: server_error})


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the supervisor decides when this process stops."""

    def capture_signals(self):
        return contextlib.nullcontext()

    async def startup(self, sockets=None):
        """uvicorn ends the whole process with sys.exit(3) when it cannot bind, and 3 is the code
        for "no legal configuration"; here a failed startup just ends serve(), and run_http
        turns it into the error it is."""
        try:
            await super().startup(sockets)
        except SystemExit:
            self.should_exit = True


def run_http(config_data: dict, endpoints: Endpoints) -> None:
    """Process entry point."""
    config = ResolvedConfig.from_dict(config_data)
    settings = EngineSettings.from_config(config)
    front = FrontEnd(config, settings, load_model_config(settings.model_path), endpoints)
    server = _Server(uvicorn.Config(build_app(front), host=settings.host, port=settings.port,
                                    log_level="warning", access_log=False, lifespan="on",
                                    timeout_graceful_shutdown=drain_grace_s() + DRAIN_EXIT_S - 1))

    async def main() -> None:
        # SIGTERM from the supervisor: drain (finish or cut in-flight requests), then exit cleanly.
        drains = []
        asyncio.get_running_loop().add_signal_handler(
            signal.SIGTERM, lambda: drains or drains.append(asyncio.ensure_future(front.drain(server))))
        serving = asyncio.create_task(server.serve())
        while not server.started:
            if serving.done():
                serving.result()
                if server.lifespan.should_exit:
                    raise RuntimeError("the front end failed while starting (see the error above)")
                # Usually another process took the port after resolution checked it: bad usage (2).
                raise UsageError(f"the HTTP server could not listen on {settings.host}:{settings.port} "
                                 "(is another process using that port?); pick a free --port")
            await asyncio.sleep(0.01)
        report_ready()
        # Any of these tasks ending ends the process; a failure of one is this process's error.
        done, _ = await asyncio.wait({serving, front.reader, front.watchdog}, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()

    asyncio.run(main())
