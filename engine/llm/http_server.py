"""The front end process: HTTP (starlette + uvicorn), tokenization, and routing to the schedulers.

Endpoints: SGLang's native /generate, OpenAI-compatible /v1/completions and /v1/chat/completions
(streamed as server-sent events when "stream" is true), /v1/models, /health (200 once every
scheduler group reported ready) and /server_info (the resolved config with provenance, plus the
sizes the ranks derived from it). A bad body is a 400 naming the field; a prompt that does not fit
the context is a 400 saying by how much. Requests go to the DP groups in turn. Imports no torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import time
import uuid
from typing import Any, AsyncIterator

import uvicorn
import zmq
import zmq.asyncio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine.llm.messages import pack, unpack
from engine.llm.model_config import ModelConfig, context_length, load_model_config
from engine.llm.sampling_params import MAX_NEW_TOKENS_DEFAULT, SamplingParams
from engine.llm.settings import EngineSettings
from engine.llm.tokenizer import make_tokenizer
from engine.ports import Endpoints, bind_private
from engine.supervisor import report_ready
from resolver.frozen import ResolvedConfig

OPENAI_COMPLETION_DEFAULT_MAX_TOKENS = 16


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def error_response(message: str, status: int) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


class FrontEnd:
    """Tokenizes requests, sends them to a scheduler group, and routes outputs back to callers."""

    def __init__(self, config: ResolvedConfig, settings: EngineSettings, model: ModelConfig,
                 endpoints: Endpoints):
        self.config, self.settings, self.endpoints = config, settings, endpoints
        self.tokenizer = make_tokenizer(model)
        self.context_length = context_length(settings.context_length, model)
        self.model_name = settings.served_model_name or settings.model_path or "tiny-llama"
        self.runtime: dict[int, dict] = {}
        self._queues: dict[str, asyncio.Queue] = {}
        self._next_group = itertools.cycle(range(len(endpoints.scheduler_inputs)))

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

    async def _read_outputs(self) -> None:
        while True:
            message = unpack(await self._inbox.recv())
            if message["type"] == "ready":
                self.runtime[message["dp"]] = message["runtime"]
            elif message["type"] == "outputs":
                for item in message["items"]:
                    queue = self._queues.get(item["rid"])
                    if queue is not None:
                        queue.put_nowait(item)

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

    def submit(self, input_ids: list[int], params: SamplingParams, stream: bool,
               rid: str) -> AsyncIterator[dict]:
        """Check the prompt now (so a bad one is a 400 before any streaming starts), then return
        the request's output items (a single one when not streaming)."""
        self.check_prompt(input_ids, params.max_new_tokens)
        if rid in self._queues:
            raise BadRequest(f"rid {rid!r} is already in use by a running request")
        self._queues[rid] = asyncio.Queue()
        return self._outputs_of(input_ids, params, stream, rid)

    async def _outputs_of(self, input_ids: list[int], params: SamplingParams, stream: bool,
                          rid: str) -> AsyncIterator[dict]:
        queue = self._queues[rid]
        outbox = self._outboxes[next(self._next_group)]
        finished = False
        try:
            await outbox.send(pack(
                {"type": "generate", "rid": rid, "input_ids": input_ids, "sampling": params.to_dict(),
                 "stream": stream}))
            while not finished:
                item = await queue.get()
                if item.get("error"):
                    finished = True
                    raise BadRequest(item["error"], item.get("error_code") or 400)
                finished = item["finished"]
                yield item
        finally:
            del self._queues[rid]
            if not finished:  # the caller went away: stop spending compute on it
                await outbox.send(pack({"type": "abort", "rid": rid}))


async def final_item(items: AsyncIterator[dict]) -> dict:
    """The last (for a non-streamed request, the only) output item."""
    async for item in items:
        last = item
    return last


# -- request parsing -------------------------------------------------------------------------------

async def read_json(request: Request) -> dict:
    try:
        body = json.loads(await request.body())
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


def openai_sampling(body: dict, default_max_tokens: int | None) -> SamplingParams:
    if body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
        raise BadRequest("n and best_of must be 1; this server returns one choice per request")
    for unsupported in ("logprobs", "top_logprobs", "echo", "suffix"):
        if body.get(unsupported):
            raise BadRequest(f"{unsupported} is not supported by this server")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", default_max_tokens))
    raw = {"max_new_tokens": max_tokens if max_tokens is not None else MAX_NEW_TOKENS_DEFAULT,
           "temperature": body.get("temperature"), "top_p": body.get("top_p"), "top_k": body.get("top_k"),
           "stop": body.get("stop"), "seed": body.get("seed"), "ignore_eos": body.get("ignore_eos")}
    try:
        return SamplingParams.from_request(raw)
    except (ValueError, TypeError) as err:
        raise BadRequest(str(err).replace("max_new_tokens", "max_tokens")) from None


def bool_field(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be true or false")
    return value


def finish_reason(item: dict) -> str | None:
    reason = item.get("finish_reason")
    return None if reason is None else ("length" if reason["type"] == "length" else "stop")


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

    def prompt_ids(prompt: Any, field: str) -> list[int]:
        """A prompt given as text or as token ids."""
        if isinstance(prompt, list):
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
                raise BadRequest(f"{field} must be a list of integer token ids")
            return prompt
        if isinstance(prompt, str):
            if skip_text:
                raise BadRequest("the server runs with --skip-tokenizer-init: send token ids, not text")
            return tokenizer.encode(prompt)
        raise BadRequest(f"{field} must be a string or a list of token ids")

    def meta(item: dict, rid: str) -> dict:
        return {"id": rid, "finish_reason": item.get("finish_reason"),
                "prompt_tokens": item["prompt_tokens"], "completion_tokens": item["completion_tokens"],
                "cached_tokens": item["cached_tokens"]}

    async def generate(request: Request) -> Response:
        body = await read_json(request)
        params = sampling_from(body.get("sampling_params") or {})
        stream = bool_field(body, "stream")
        if "input_ids" not in body and "text" not in body:
            raise BadRequest("text or input_ids is required")
        field = "input_ids" if "input_ids" in body else "text"
        ids = prompt_ids(body[field], field)
        rid = str(body.get("rid") or uuid.uuid4().hex)
        items = front.submit(ids, params, stream, rid)
        if stream:
            async def events():
                text, out_ids = "", []
                async for item in items:
                    text += item["text"] or ""
                    out_ids += item["ids"]
                    yield {"text": None if skip_text else text, "output_ids": out_ids,
                           "meta_info": meta(item, rid)}
            return sse(events(), items)
        item = await final_item(items)
        return JSONResponse({"text": item["text"], "output_ids": item["ids"], "meta_info": meta(item, rid)})

    def usage(item: dict) -> dict:
        return {"prompt_tokens": item["prompt_tokens"], "completion_tokens": item["completion_tokens"],
                "total_tokens": item["prompt_tokens"] + item["completion_tokens"]}

    async def completions(request: Request) -> Response:
        body = await read_json(request)
        params = openai_sampling(body, OPENAI_COMPLETION_DEFAULT_MAX_TOKENS)
        stream = bool_field(body, "stream")
        if "prompt" not in body:
            raise BadRequest("prompt is required")
        ids = prompt_ids(body["prompt"], "prompt")
        rid = f"cmpl-{uuid.uuid4().hex}"
        base = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": front.model_name}
        items = front.submit(ids, params, stream, rid)
        if stream:
            async def events():
                async for item in items:
                    yield {**base, "choices": [{"index": 0, "text": item["text"] or "", "logprobs": None,
                                                "finish_reason": finish_reason(item)}]}
            return sse(events(), items)
        item = await final_item(items)
        return JSONResponse({**base, "choices": [{"index": 0, "text": item["text"] or "", "logprobs": None,
                                                  "finish_reason": finish_reason(item)}],
                             "usage": usage(item)})

    async def chat_completions(request: Request) -> Response:
        body = await read_json(request)
        params = openai_sampling(body, None)
        stream = bool_field(body, "stream")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            raise BadRequest("messages must be a non-empty list of {\"role\": str, \"content\": str} objects")
        if skip_text:
            raise BadRequest("chat needs the tokenizer; the server runs with --skip-tokenizer-init")
        ids = tokenizer.encode(tokenizer.apply_chat_template(messages))
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        base = {"id": rid, "created": int(time.time()), "model": front.model_name}
        items = front.submit(ids, params, stream, rid)
        if stream:
            async def events():
                first = True
                async for item in items:
                    delta = {"content": item["text"] or ""}
                    if first:
                        delta["role"], first = "assistant", False
                    yield {**base, "object": "chat.completion.chunk",
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason(item)}]}
            return sse(events(), items)
        item = await final_item(items)
        return JSONResponse({**base, "object": "chat.completion",
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": item["text"]},
                                          "finish_reason": finish_reason(item)}],
                             "usage": usage(item)})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": front.model_name, "object": "model",
                                                         "owned_by": "accord"}]})

    async def health(request: Request) -> Response:
        if front.ready:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "starting"}, status_code=503)

    async def server_info(request: Request) -> Response:
        info = front.config.to_dict()
        info["runtime"] = {f"dp{d}": front.runtime[d] for d in sorted(front.runtime)}
        return JSONResponse(info)

    def guarded(handler, public: bool = False):
        async def endpoint(request: Request) -> Response:
            key = front.settings.api_key
            if key and not public and request.headers.get("authorization") != f"Bearer {key}":
                return error_response("missing or wrong API key (Authorization: Bearer ...)", 401)
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
        Route("/health", guarded(health, public=True), methods=["GET"]),
        Route("/server_info", guarded(server_info), methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the supervisor decides when this process stops."""

    def capture_signals(self):
        return contextlib.nullcontext()


def run_http(config_data: dict, endpoints: Endpoints) -> None:
    """Process entry point."""
    config = ResolvedConfig.from_dict(config_data)
    settings = EngineSettings.from_config(config)
    front = FrontEnd(config, settings, load_model_config(settings.model_path), endpoints)
    server = _Server(uvicorn.Config(build_app(front), host=settings.host, port=settings.port,
                                    log_level="warning", access_log=False, lifespan="on",
                                    timeout_graceful_shutdown=1))

    async def main() -> None:
        # SIGTERM from the supervisor: let uvicorn finish open responses and exit cleanly.
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, lambda: setattr(server, "should_exit", True))
        serving = asyncio.create_task(server.serve())
        while not server.started:
            if serving.done():
                serving.result()
                raise RuntimeError(f"the HTTP server could not start on {settings.host}:{settings.port}")
            await asyncio.sleep(0.01)
        report_ready()
        # Either task ending ends the process; a failure of either is this process's error.
        done, _ = await asyncio.wait({serving, front.reader}, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()

    asyncio.run(main())
