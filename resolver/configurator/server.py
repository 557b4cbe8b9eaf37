"""`accord ui [--port P] [--host H]`: an interactive configurator in the browser, on this machine only.

It serves one page (plain HTML, CSS and a small script from `resolver/configurator/static/`) and a JSON API.
The API does not compute anything itself: every answer is what the `accord` command line prints for
the same input, printed by the CLI's own functions in this process with its output captured, so the
page, a script and a terminal can never disagree, byte for byte. The requests of one change (the
configuration, then its choices or its proof) share one solve of the launch (see `Outcomes`).

    POST /api/resolve   {"system", "facts", "args"}  ->  `accord resolve --json ARGS`
    POST /api/dry-run   {"system", "facts", "args"}  ->  `accord resolve --dry-run --json ARGS`
    POST /api/why       {"system", "facts", "args"}  ->  `accord why --json ARGS` (ARGS: FLAG... first)
    POST /api/proof     {"system", "facts", "args"}  ->  the conflict proof `accord resolve` prints
    POST /api/fix       {..., "conflict": i, "fix": j}  ->  {"set": {flag: value}, "drop": [flag]}
    GET  /api/presets   the simulated machines;  GET /api/models  the bundled models
    GET  /api/flags?system=llm  ->  `accord flags --system llm --json` (the catalog)

`facts` is a preset name, "probe" (this machine) or a facts object (what a facts file holds);
`args` is the launch command as a list of words. Status: 200 resolved, 409 no legal configuration
(the body is the CLI's conflict JSON), 400 bad input (`{"error": "usage", "message"}` with the
message the CLI prints). Only the standard library is used, so it runs on the core install.

This module is the entry point (`main`, the `accord ui` command) and holds the HTTP side: the
routes above, the static files and the Host check. What each POST endpoint answers is in
`answers`; the one solve per launch that answers share is in `outcomes`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from accord.resolver.commands.options import CommandParser
from accord.resolver.configurator.answers import BadRequest, answer, error_json, flags_answer, models_json, presets_json
from accord.resolver.errors import UsageError

STATIC_DIR = Path(__file__).resolve().parent / "static"
MAX_BODY = 1 << 20
_CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
                  ".js": "text/javascript; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml"}


# -- the HTTP server ---------------------------------------------------------------------------------

class Handler(BaseHTTPRequestHandler):
    """Static files under `/` and `/static/`, the API under `/api/`. Nothing else is served."""

    server_version = "accord-ui"
    allowed_hosts: frozenset[str] = frozenset()   # Host headers accepted (loopback binds only)

    def log_message(self, format: str, *args) -> None:  # the CLI's streams are captured; stay quiet
        return

    def _send(self, status: int, content_type: str, text: str | bytes) -> None:
        data = text.encode("utf-8") if isinstance(text, str) else text
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(data)
        except ConnectionError:  # the page went away (reloaded, closed) before its answer came
            self.close_connection = True

    def _host_ok(self) -> bool:
        """Refuse other Host names on a loopback bind, so a web page cannot reach it by DNS rebinding."""
        if self.allowed_hosts and self.headers.get("Host", "") not in self.allowed_hosts:
            self._send(403, "application/json", error_json("unexpected Host header.", "forbidden"))
            return False
        return True

    def do_GET(self) -> None:
        if not self._host_ok():
            return
        url = urlsplit(self.path)
        if url.path == "/api/presets":
            return self._send(200, "application/json", presets_json())
        if url.path == "/api/models":
            return self._send(200, "application/json", models_json())
        if url.path == "/api/flags":
            return self._send(*flags_answer(url.query))
        name = "index.html" if url.path == "/" else url.path.removeprefix("/static/")
        files = {p.name: p for p in STATIC_DIR.iterdir() if p.is_file()}
        if name in files and (url.path == "/" or url.path.startswith("/static/")):
            path = files[name]
            return self._send(200, _CONTENT_TYPES.get(path.suffix, "application/octet-stream"), path.read_bytes())
        self._send(404, "application/json", error_json(f"nothing at {url.path}.", "not found"))

    def do_POST(self) -> None:
        if not self._host_ok():
            return
        endpoint = urlsplit(self.path).path.removeprefix("/api/")
        if endpoint not in ("resolve", "dry-run", "why", "proof", "fix"):
            return self._send(404, "application/json", error_json(f"no API endpoint {self.path}.", "not found"))
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise BadRequest(f"the request body is over {MAX_BODY} bytes.")
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise BadRequest(f"the request body is not JSON ({err}).") from None
            self._send(*answer(endpoint, body))
        except BadRequest as err:
            self._send(400, "application/json", error_json(str(err)))
        except Exception as err:  # a bug: say so in the answer, keep serving
            self._send(500, "application/json", error_json(f"{type(err).__name__}: {err}", "internal"))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_server(host: str, port: int) -> ThreadingHTTPServer:
    """A bound server (port 0 picks a free port); Host checking is on for a loopback address."""
    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as err:
        raise UsageError(f"cannot listen on {host}:{port}: {err.strerror or err}. "
                         f"Pick another port with --port (0 picks a free one).") from None
    server.daemon_threads = True
    bound = server.server_address[1]
    if _is_loopback(host):
        names = {host, "localhost", "127.0.0.1", "[::1]"}
        server.RequestHandlerClass = type("LoopbackHandler", (Handler,), {
            "allowed_hosts": frozenset(f"{name}:{bound}" for name in names)})
    return server


@contextlib.contextmanager
def running(host: str = "127.0.0.1", port: int = 0):
    """A server answering on a background thread (tests, the benchmark); yields its base URL."""
    server = make_server(host, port)
    thread = threading.Thread(target=server.serve_forever, name="accord-ui", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def main(argv: list[str]) -> int:
    parser = CommandParser(prog="accord ui", description="Serve the interactive configurator.")
    parser.add_argument("--port", type=int, default=8765, help="TCP port (default 8765; 0 picks a free one)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only)")
    opts = parser.parse_args(argv)
    if not 0 <= opts.port <= 65535:
        raise UsageError(f"--port {opts.port} is not a TCP port; use 0-65535.")
    server = make_server(opts.host, opts.port)
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    if not _is_loopback(opts.host):
        print(f"accord ui: warning: listening on {opts.host}, so other machines can use it "
              "(and read the model folders it is pointed at).", file=sys.stderr)
    print(f"accord ui: http://{shown}:{port}/  (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
