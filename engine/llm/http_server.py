"""The front end process's HTTP layer (starlette + uvicorn): a route table of plain handlers.

Endpoints: SGLang's native /generate, /tokenize, /detokenize, /get_model_info; OpenAI-compatible
/v1/completions and /v1/chat/completions (streamed as server-sent events when "stream" is true),
/v1/models, /health (200 once every scheduler group reported ready), /health_generate, /metrics,
and the admin routes /server_info and /flush_cache. Request shapes and response formatting live in
openai_protocol.py and tool_calls.py; the state behind the handlers (sockets, requests in flight,
drain, watchdog) in front_end.py.

Each generating handler reads the body, then parses, validates and tokenizes it in a worker
thread (a body of several megabytes never holds up /health), submits one request per prompt and
choice, and answers JSON or an event stream. A bad body is a 400 naming the field. Imports no torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import os
import signal
import time
import uuid
from typing import Any, AsyncIterator, Callable

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from accord.engine.llm import api_keys
from accord.engine.llm import openai_protocol as proto
from accord.engine.llm.front_end import DRAIN_EXIT_S, FrontEnd, drain_grace_s
from accord.engine.llm.reasoning import StreamSplitter
from accord.engine.llm.reasoning import split as split_reasoning
from accord.engine.llm.model_config import load_model_config
from accord.engine.llm.request_errors import BadRequest, error_body
from accord.engine.llm.sampling_params import SamplingParams
from accord.engine.llm.settings import EngineSettings
from accord.engine.llm.api_keys import secret
from accord.engine.llm.tool_calls import constrained_calls, parsed_calls
from accord.engine.ports import Endpoints
from accord.engine.supervisor import report_ready
from accord.resolver.errors import UsageError
from accord.resolver.frozen import ResolvedConfig

HEALTH_GENERATE_TIMEOUT_S = 20.0
DISCONNECT_POLL_S = 0.25
# Far above any prompt the context holds as text or token ids; a bigger body is refused unread.
MAX_BODY_BYTES = 32 * 1024 * 1024
# The signal the supervisor sends this process when another process of the group died.
PEER_DIED_SIGNAL = signal.SIGUSR1


def error_response(message: str, status: int) -> JSONResponse:
    return JSONResponse(error_body(message, status), status_code=status)


# -- reading a request ----------------------------------------------------------------------------

async def parsed(request: Request, parse: Callable[[FrontEnd, dict], Any]) -> Any:
    """Read the body (size-limited), then decode, check and tokenize it off the event loop."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise BadRequest(f"the request body is {declared} bytes; the limit is {MAX_BODY_BYTES}", 413)
    data = bytearray()
    async for piece in request.stream():
        data += piece
        if len(data) > MAX_BODY_BYTES:
            raise BadRequest(f"the request body exceeds the limit of {MAX_BODY_BYTES} bytes", 413)
    front = request.app.state.front
    return await asyncio.to_thread(lambda: parse(front, proto.parse_json(bytes(data))))


# -- running requests ------------------------------------------------------------------------------

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


class Choices:
    """The n x prompts requests behind one call, closed together (which aborts them). Each choice
    of a seeded request samples with its own seed derived from it (proto.choice_seed)."""

    def __init__(self, front: FrontEnd, call: proto.Call, rid: str):
        self.streams: list[AsyncIterator[dict]] = []
        rids = []
        try:
            for p, ids in enumerate(call.prompts):
                for k in range(call.n):
                    rids.append(f"{rid}-{p * call.n + k}" if call.n > 1 or len(call.prompts) > 1 else rid)
                    params = dataclasses.replace(call.params, seed=proto.choice_seed(call.params.seed, k))
                    self.streams.append(front.submit(ids, params, call.stream, rids[-1], call.logprobs))
        except BadRequest:
            for submitted in rids[:len(self.streams)]:
                front.forget(submitted)
            raise

    async def aclose(self) -> None:
        for items in self.streams:
            await items.aclose()

    async def finals(self) -> list[dict]:
        try:
            return list(await asyncio.gather(*(final_item(items) for items in self.streams)))
        finally:
            await self.aclose()

    async def merged(self) -> AsyncIterator[tuple[int, dict]]:
        """(choice index, item) from every request as they arrive."""
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(index: int, items: AsyncIterator[dict]) -> None:
            try:
                async for item in items:
                    await queue.put((index, item, None))
            except BadRequest as err:
                await queue.put((index, None, err))
            await queue.put((index, None, None))

        tasks = [asyncio.create_task(pump(i, items)) for i, items in enumerate(self.streams)]
        try:
            open_streams = len(self.streams)
            while open_streams:
                index, item, err = await queue.get()
                if err is not None:
                    raise err
                if item is None:
                    open_streams -= 1
                else:
                    yield index, item
        finally:
            await self._stop_pumps(tasks)

    async def _stop_pumps(self, tasks: list[asyncio.Task]) -> None:
        """Stop the pumps, then close the streams.

        A pump is suspended inside its stream's `__anext__`, so closing that stream while the pump
        runs fails with "aclose(): asynchronous generator is already running" (what every client
        that left a stream early used to log). Cancelling a pump lands inside its stream, whose own
        cleanup sends the abort; once the pumps have stopped, closing the streams only closes those
        no pump started. A client that hung up cancels this task again at every await (starlette's
        cancel scope), so the wait is shielded: the abort is sent before the handler returns."""
        for task in tasks:
            task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.aclose()


def sse(events: AsyncIterator[dict], choices: Choices) -> StreamingResponse:
    """Server-sent events. An error (a cut or failed request) is one error event, then the end of
    the stream; closing the requests at the end aborts them if the client left early."""
    async def body():
        try:
            async for event in events:
                yield f"data: {json.dumps(event, sort_keys=True)}\n\n"
        except BadRequest as err:
            yield f"data: {json.dumps(error_body(str(err), err.status))}\n\n"
        finally:
            await choices.aclose()
        yield "data: [DONE]\n\n"
    return StreamingResponse(body(), media_type="text/event-stream")


def openai_stream(choices: Choices, call: proto.Call, chunk, base: dict) -> StreamingResponse:
    async def events():
        completion = [0] * len(choices.streams)
        first = [True] * len(choices.streams)
        async for index, item in choices.merged():
            completion[index] = item["completion_tokens"]
            piece = chunk(index, item, first[index])
            if piece is not None:
                yield {**base, "choices": [piece]}
            first[index] = False
        if call.usage_wanted:
            prompt = sum(len(p) for p in call.prompts) * call.n
            yield {**base, "choices": [], "usage": proto.usage(prompt, sum(completion))}
    return sse(events(), choices)


def token_text(front: FrontEnd) -> Callable[[int], str]:
    if front.settings.skip_tokenizer_init:
        return lambda token: f"token_id:{token}"
    return lambda token: front.tokenizer.decode([token])


# -- handlers --------------------------------------------------------------------------------------

async def generate(request: Request) -> Response:
    front: FrontEnd = request.app.state.front
    call = await parsed(request, proto.parse_generate)
    rid = call.rid or uuid.uuid4().hex
    choices = Choices(front, call, rid)
    entries = {"input": [], "output": []}
    skip_text = front.settings.skip_tokenizer_init

    def logprob_fields(item: dict) -> dict | None:
        if call.logprobs is None:
            return None
        for side in entries:
            entries[side] += (item.get("logprobs") or {}).get(side, [])
        return proto.native_logprob_fields(entries, call.logprobs["top"], call.with_text, token_text(front))

    if call.stream:
        async def events():
            text, out_ids = "", []
            async for _, item in choices.merged():
                text += item["text"] or ""
                out_ids += item["ids"]
                yield {"text": None if skip_text else text, "output_ids": out_ids,
                       "meta_info": proto.native_meta(item, rid, logprob_fields(item))}
        return sse(events(), choices)
    item = (await unless_disconnected(request, choices.finals()))[0]
    return JSONResponse({"text": item["text"], "output_ids": item["ids"],
                         "meta_info": proto.native_meta(item, rid, logprob_fields(item))})


def total_usage(call: proto.Call, finals: list[dict]) -> dict:
    return proto.usage(sum(len(p) for p in call.prompts) * call.n, sum(i["completion_tokens"] for i in finals))


async def completions(request: Request) -> Response:
    front: FrontEnd = request.app.state.front
    call = await parsed(request, proto.parse_completion)
    rid = f"cmpl-{uuid.uuid4().hex}"
    base = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": front.model_name}
    choices = Choices(front, call, rid)
    echo_logprobs = call.logprobs is not None and call.logprobs["start"] == 0
    offsets = [0] * len(choices.streams)

    def choice(index: int, item: dict, first: bool) -> dict:
        """One choice (or one chunk of it); with echo the prompt comes first."""
        text = (call.echoed[index // call.n] if first else "") + (item["text"] or "")
        logprobs = None
        if call.logprobs is not None:
            found = item.get("logprobs") or {}
            entries = (found.get("input", []) if echo_logprobs else []) + found.get("output", [])
            logprobs = proto.completion_logprob_fields(entries, offsets[index], token_text(front))
        offsets[index] += len(text)
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": proto.finish_reason(item)}

    if call.stream:
        return openai_stream(choices, call, choice, base)
    finals = await unless_disconnected(request, choices.finals())
    return JSONResponse({**base, "choices": [choice(i, item, True) for i, item in enumerate(finals)],
                         "usage": total_usage(call, finals)})


def assistant_turn(front: FrontEnd, call: proto.Call, text: str, reason: str | None) -> tuple[dict, str | None]:
    """The assistant message (reasoning, content and tool calls) of a finished chat choice, and
    its finish reason ("tool_calls" when it called tools and stopped by itself)."""
    calls, reasoning = None, None
    if front.reasoning_parser is not None:
        reasoning, text = split_reasoning(front.reasoning_parser, text)
    if call.tools is not None:
        if call.tools.constrained:
            calls = constrained_calls(text)
            content = None if calls else text
        else:
            content, calls = parsed_calls(front.tool_call_parser, text, call.tools)
    else:
        content = text
    message = {"role": "assistant", "content": content or (None if calls else content)}
    if front.reasoning_parser is not None:
        message["reasoning_content"] = reasoning or None
    if calls:
        message["tool_calls"] = calls
        if reason == "stop":
            reason = "tool_calls"
    return message, reason


async def chat_completions(request: Request) -> Response:
    front: FrontEnd = request.app.state.front
    call = await parsed(request, proto.parse_chat)
    rid = f"chatcmpl-{uuid.uuid4().hex}"
    base = {"id": rid, "created": int(time.time()), "model": front.model_name}
    choices = Choices(front, call, rid)

    def logprobs_of(item: dict) -> dict | None:
        if call.logprobs is None:
            return None
        return proto.chat_logprob_fields((item.get("logprobs") or {}).get("output", []), token_text(front))

    if call.stream:
        held = [""] * len(choices.streams)  # with tools: the text, answered whole at the end
        splitters = [StreamSplitter(front.reasoning_parser) for _ in choices.streams] \
            if front.reasoning_parser is not None else None

        def chunk(index: int, item: dict, first: bool) -> dict:
            delta: dict[str, Any] = {"role": "assistant"} if first else {}
            reason = proto.finish_reason(item)
            if call.tools is None and splitters is not None:
                thought, said = splitters[index].feed(item["text"] or "", item["finished"])
                delta["content"] = said
                if thought:
                    delta["reasoning_content"] = thought
            elif call.tools is None:
                delta["content"] = item["text"] or ""
            else:
                held[index] += item["text"] or ""
                if item["finished"]:
                    message, reason = assistant_turn(front, call, held[index], reason)
                    delta["content"] = message["content"]
                    if message.get("reasoning_content"):
                        delta["reasoning_content"] = message["reasoning_content"]
                    if message.get("tool_calls"):
                        delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(message["tool_calls"])]
            return {"index": index, "delta": delta, "logprobs": logprobs_of(item), "finish_reason": reason}
        return openai_stream(choices, call, chunk, {**base, "object": "chat.completion.chunk"})
    finals = await unless_disconnected(request, choices.finals())
    out = []
    for i, item in enumerate(finals):
        message, reason = assistant_turn(front, call, item["text"] or "", proto.finish_reason(item))
        out.append({"index": i, "message": message, "logprobs": logprobs_of(item), "finish_reason": reason})
    return JSONResponse({**base, "object": "chat.completion", "choices": out, "usage": total_usage(call, finals)})


def model_card(front: FrontEnd) -> dict:
    return {"id": front.model_name, "object": "model", "created": 0, "owned_by": "accord",
            "max_model_len": front.context_length}


async def models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [model_card(request.app.state.front)]})


async def model(request: Request) -> Response:
    front = request.app.state.front
    proto.check_model(front, {"model": request.path_params["model"]})
    return JSONResponse(model_card(front))


async def tokenize(request: Request) -> Response:
    return JSONResponse(await parsed(request, proto.parse_tokenize))


async def detokenize(request: Request) -> Response:
    def parse(front: FrontEnd, body: dict) -> dict:
        ids = body.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise BadRequest("tokens must be a list of integer token ids")
        return {"prompt": front.tokenizer.decode(ids)}
    return JSONResponse(await parsed(request, parse))


async def model_info(request: Request) -> Response:
    front = request.app.state.front
    return JSONResponse({"model_path": front.settings.model_path, "served_model_name": front.model_name,
                         "is_generation": True, "context_length": front.context_length,
                         "vocab_size": front.tokenizer.vocab_size})


def unhealthy(front: FrontEnd) -> Response | None:
    if front.stuck:
        return JSONResponse({"status": "unhealthy", "error": front.stuck}, status_code=503)
    if front.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    if not front.ready:
        return JSONResponse({"status": "starting"}, status_code=503)
    return None


async def health(request: Request) -> Response:
    return unhealthy(request.app.state.front) or JSONResponse({"status": "ok"})


async def health_generate(request: Request) -> Response:
    """Healthy only if a real one-token generation comes back through every process."""
    front: FrontEnd = request.app.state.front
    if (answer := unhealthy(front)) is not None:
        return answer
    seed = front.tokenizer.bos_token_id if front.tokenizer.bos_token_id is not None else 0
    params = SamplingParams(max_new_tokens=1, temperature=0.0, ignore_eos=True)
    try:
        await asyncio.wait_for(final_item(front.submit([seed], params, False, f"health-{uuid.uuid4().hex}")),
                               HEALTH_GENERATE_TIMEOUT_S)
    except (asyncio.TimeoutError, BadRequest) as err:
        return error_response(f"the health generation failed: {err or 'timed out'}", 503)
    return JSONResponse({"status": "ok"})


async def metrics(request: Request) -> Response:
    front = request.app.state.front
    if front.metrics is None:
        raise BadRequest("metrics are off; start the server with --enable-metrics", 404)
    return Response(front.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")


async def flush_cache(request: Request) -> Response:
    await request.app.state.front.flush_cache()
    return JSONResponse({"status": "ok", "message": "cached prefixes not in use are released"})


async def server_info(request: Request) -> Response:
    front = request.app.state.front
    info = api_keys.redacted(front.config.to_dict())
    info["runtime"] = {f"dp{d}": front.runtime[d] for d in sorted(front.runtime)}
    return JSONResponse(info)


# -- the application -------------------------------------------------------------------------------

USER, PUBLIC, ADMIN = "user", "public", "admin"   # who may call a route
ROUTES = [
    ("/generate", "POST", generate, USER),
    ("/v1/completions", "POST", completions, USER),
    ("/v1/chat/completions", "POST", chat_completions, USER),
    ("/v1/models", "GET", models, USER),
    ("/v1/models/{model:path}", "GET", model, USER),
    ("/tokenize", "POST", tokenize, USER),
    ("/detokenize", "POST", detokenize, USER),
    ("/get_model_info", "GET", model_info, USER),
    ("/metrics", "GET", metrics, PUBLIC),
    ("/health", "GET", health, PUBLIC),
    ("/health_generate", "GET", health_generate, PUBLIC),
    ("/server_info", "GET", server_info, ADMIN),
    ("/flush_cache", "POST", flush_cache, ADMIN),
]


def guarded(handler, access: str):
    """The API-key check (constant time; admin routes take --admin-api-key when one is set), and
    a BadRequest answered as an error JSON."""
    async def endpoint(request: Request) -> Response:
        front = request.app.state.front
        admin = access == ADMIN and front.admin_key
        key = front.admin_key if admin else front.api_key
        given = request.headers.get("authorization", "").encode()
        if key and access != PUBLIC and not hmac.compare_digest(given, f"Bearer {key}".encode()):
            return error_response(f"missing or wrong {'admin API key' if admin else 'API key'} "
                                  "(Authorization: Bearer ...)", 401)
        try:
            return await handler(request)
        except BadRequest as err:
            return error_response(str(err), err.status)
    return endpoint


async def http_error(request: Request, exc: HTTPException) -> Response:
    return error_response(exc.detail or "error", exc.status_code)


async def server_error(request: Request, exc: Exception) -> Response:
    return error_response(f"internal server error: {type(exc).__name__}", 500)


def build_app(front: FrontEnd) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app):
        await front.start()
        yield

    app = Starlette(routes=[Route(path, guarded(handler, access), methods=[method])
                            for path, method, handler, access in ROUTES],
                    lifespan=lifespan, exception_handlers={HTTPException: http_error, Exception: server_error})
    app.state.front = front
    return app


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
    """Process entry point. SIGTERM drains; PEER_DIED_SIGNAL fails every request in flight."""
    config = ResolvedConfig.from_dict(config_data)
    settings = EngineSettings.from_config(config)
    grace = drain_grace_s(config.values)
    front = FrontEnd(config, settings, load_model_config(settings.model_path), endpoints,
                     secret("api_key", settings.api_key, os.environ),
                     secret("admin_api_key", config.values.get("admin_api_key"), os.environ))
    server = _Server(uvicorn.Config(build_app(front), host=settings.host, port=settings.port,
                                    log_level="warning", access_log=False, lifespan="on",
                                    timeout_graceful_shutdown=grace + DRAIN_EXIT_S - 1))

    async def main() -> None:
        drains = []
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(
            signal.SIGTERM, lambda: drains or drains.append(asyncio.ensure_future(front.drain(server, grace))))

        def peer_died() -> None:
            front.peer_died()
            server.should_exit = True  # the error answers go out, then uvicorn stops
        loop.add_signal_handler(PEER_DIED_SIGNAL, peer_died)
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
