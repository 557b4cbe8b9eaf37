"""The HTTP front end process: an OpenAI-style image API over the scheduler (starlette + uvicorn),
as a route table of plain handlers (as engine/llm/http_server.py has).

- `POST /v1/images/generations`: checked by `request_schema` (400 on anything wrong), queued at
  the scheduler, answered with base64 PNGs plus `metadata`: how the batch ran (CUDA graph or
  eager, and why), whether its shape was in the warmup plan, and any warmup it waited for.
- `GET /health`: 200 once every worker rank has warmed up and reported, 503 before.
- `GET /server_info`: the resolved config (values, provenance, facts, hash), the engine's reading
  of it (layout, warmup plan, placement), the settled ports, the warmup each rank executed and the
  process ids of the group.

It binds the resolved host/port itself (so a failure to bind is an error of this process) and
never imports torch.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import signal
import socket
import time
from typing import Any

import uvicorn
import zmq
import zmq.asyncio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from accord.engine.diffusion.ports import Endpoints
from accord.engine.diffusion.protocol import pack, unpack
from accord.engine.diffusion.request_schema import BadRequest, parse_image_request
from accord.engine.diffusion.settings import EngineSettings
from accord.engine.supervisor import report_ready
from accord.resolver.frozen import ResolvedConfig

STATUS_TIMEOUT_S = 5.0
UVICORN_LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


class SchedulerClient:
    """Request/reply over one DEALER socket; replies are matched to callers by id."""

    def __init__(self, address: str):
        self.address = address
        self.socket: zmq.asyncio.Socket | None = None
        self.pending: dict[str, asyncio.Future] = {}
        self.ids = itertools.count()
        self.reader: asyncio.Task | None = None

    def open(self) -> None:
        self.socket = zmq.asyncio.Context.instance().socket(zmq.DEALER)
        self.socket.connect(self.address)
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader
        if self.socket is not None:
            self.socket.close(linger=0)

    async def call(self, message: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        request_id = str(next(self.ids))
        future = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        try:
            await self.socket.send(pack({**message, "id": request_id}))
            return await asyncio.wait_for(future, timeout)
        finally:
            self.pending.pop(request_id, None)

    async def _read(self) -> None:
        while True:
            reply = unpack(await self.socket.recv())
            future = self.pending.get(reply.get("id"))
            if future is not None and not future.done():
                future.set_result(reply)


def _error(status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
    return JSONResponse({"error": {"message": message, "type": kind, "param": param}}, status_code=status)


# -- the handlers: plain functions reading what they serve from app.state (see build_app) -----------

async def scheduler_status(client: SchedulerClient) -> dict[str, Any] | None:
    """The scheduler's status, or None when it does not answer in time (a hung scheduler must not
    hang /health)."""
    try:
        return await client.call({"op": "status"}, timeout=STATUS_TIMEOUT_S)
    except asyncio.TimeoutError:
        return None


async def health(request: Request):
    """200 only once every worker rank has warmed up, so a load balancer sends no request early."""
    state = await scheduler_status(request.app.state.client)
    if state is None:
        return JSONResponse({"status": "unavailable", "detail": "the scheduler did not answer"}, 503)
    if not state["ready"]:
        return JSONResponse({"status": "starting", "ready_workers": state["ready_workers"],
                             "workers": state["workers"]}, 503)
    return JSONResponse({"status": "ok"})


async def server_info(request: Request):
    """The resolved config beside the engine's reading of it and what the ranks report, in one place."""
    app_state = request.app.state
    state = await scheduler_status(app_state.client)
    if state is None:
        return _error(503, "the scheduler did not answer", kind="server_error")
    settings = app_state.settings
    return JSONResponse({
        "config": app_state.config.to_dict(),
        "engine": settings.describe(),
        "endpoints": app_state.endpoints.to_dict(),
        "ready": state["ready"],
        "warmup": {"plan": settings.plan.describe(), "executed": state["warmup_executed"]},
        "devices": state["devices"],
        "batching": state["batching"],
        "processes": {"supervisor": os.getppid(), "http": os.getpid(), **state["processes"]},
    })


async def generate(request: Request):
    """One image request: refused with a 400 unless `request_schema` accepts it, else queued."""
    model = request.app.state.settings.model
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return _error(400, f"the request body is not valid JSON: {err}.")
    try:
        parsed = parse_image_request(body, model)
    except BadRequest as err:
        return _error(400, str(err), err.param)
    reply = await request.app.state.client.call({
        "op": "generate", "width": parsed.resolution.width, "height": parsed.resolution.height,
        "steps": parsed.steps, "jobs": parsed.jobs()})
    if "error" in reply:
        return _error(500, reply["error"], kind="server_error")
    return JSONResponse({
        "created": int(time.time()),
        "model": model.name,
        "data": [{"b64_json": base64.b64encode(png).decode("ascii")} for png in reply["images"]],
        "metadata": {**reply["info"], "seed": parsed.seed},
    })


# -- the application -------------------------------------------------------------------------------

ROUTES = [
    ("/health", "GET", health),
    ("/server_info", "GET", server_info),
    ("/v1/images/generations", "POST", generate),
]


def build_app(config: ResolvedConfig, settings: EngineSettings, endpoints: Endpoints,
              client: SchedulerClient) -> Starlette:
    """The application over ROUTES; the scheduler client opens with the event loop it serves on."""
    @contextlib.asynccontextmanager
    async def lifespan(app):
        client.open()
        report_ready()
        try:
            yield
        finally:
            await client.close()

    app = Starlette(routes=[Route(path, handler, methods=[method]) for path, method, handler in ROUTES],
                    lifespan=lifespan)
    app.state.config = config
    app.state.settings = settings
    app.state.endpoints = endpoints
    app.state.client = client
    return app


class _Server(uvicorn.Server):
    """uvicorn, minus its Ctrl-C handling: the supervisor owns shutdown; SIGTERM stops gracefully."""

    @contextlib.contextmanager
    def capture_signals(self):
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: setattr(self, "should_exit", True))
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def http_main(config_dict: dict, endpoints_dict: dict) -> None:
    """Entry point of the HTTP front end process."""
    config = ResolvedConfig.from_dict(config_dict)
    settings = EngineSettings.from_config(config)
    endpoints = Endpoints.from_dict(endpoints_dict)
    app = build_app(config, settings, endpoints, SchedulerClient(endpoints.scheduler_connect_address))
    level = str(config.values["log_level"]).lower()
    server = _Server(uvicorn.Config(
        app, log_level=level if level in UVICORN_LOG_LEVELS else "info", access_log=bool(config.values["log_requests"]),
        timeout_graceful_shutdown=1, lifespan="on"))
    server.run(sockets=[_listen(endpoints.host or "127.0.0.1", endpoints.http_port)])
