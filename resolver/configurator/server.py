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
"""

from __future__ import annotations

import argparse
import contextlib
import io
import ipaddress
import json
import sys
import tempfile
import threading
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from accord.resolver.commands.options import CommandParser
from accord.resolver.errors import EXIT_CONFLICT, EXIT_USAGE, UsageError

STATIC_DIR = Path(__file__).resolve().parent / "static"
MAX_BODY = 1 << 20
BODY_KEYS = {"system", "facts", "args"}
# Options the request fields set; in `args` they would be overridden or duplicated silently.
RESERVED = {"--system": "system", "--facts": "facts", "--json": None, "--dry-run": None,
            "-h": None, "--help": None}
_CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
                  ".js": "text/javascript; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml"}

# The CLI prints to sys.stdout/sys.stderr; capturing them swaps process-wide streams, so one CLI
# call runs at a time. Resolving is CPU-bound Python, so the lock costs nothing the GIL did not.
_CLI_LOCK = threading.Lock()


class BadRequest(Exception):
    """A request the API cannot turn into a command line (the body, not the flags, is wrong)."""


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `accord ARGV`, run in this process by the CLI's own main."""
    from accord.resolver.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _CLI_LOCK, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as stop:  # argparse --help and friends
            code = stop.code if isinstance(stop.code, int) else EXIT_USAGE
    return code, out.getvalue(), err.getvalue()


# -- requests -> command lines ---------------------------------------------------------------------

def _request_fields(body: Any) -> tuple[str | None, Any, list[str]]:
    if not isinstance(body, dict):
        raise BadRequest('the request body must be a JSON object such as '
                         '{"system": "llm", "facts": "h100", "args": ["--tp", "8"]}.')
    unknown = sorted(set(body) - BODY_KEYS - {"conflict", "fix"})
    if unknown:
        raise BadRequest(f"unknown request field(s) {unknown}; use {sorted(BODY_KEYS)}.")
    system, facts, args = body.get("system"), body.get("facts", "probe"), body.get("args", [])
    if system is not None and not isinstance(system, str):
        raise BadRequest(f'"system" must be a string such as "llm", not {system!r}.')
    if not isinstance(facts, (str, dict)):
        raise BadRequest('"facts" must be a preset name, "probe", or a facts object '
                         '(e.g. {"preset": "h100", "gpu.count": 4}).')
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise BadRequest('"args" must be a list of strings, the launch command split into words.')
    for word in args:
        option = word.split("=", 1)[0]
        if option in RESERVED:
            field = RESERVED[option]
            where = f'; give it as the "{field}" field' if field else "; the endpoint decides it"
            raise BadRequest(f"{option} cannot appear in \"args\"{where}.")
    return system, facts, args


@contextlib.contextmanager
def _facts_option(facts: str | dict):
    """`--facts VALUE`: a name as is, a facts object through a private temporary JSON file."""
    if isinstance(facts, str):
        yield ["--facts", facts]
        return
    with tempfile.TemporaryDirectory(prefix="accord-ui-") as folder:
        path = Path(folder) / "facts.json"
        path.write_text(json.dumps(facts, sort_keys=True), encoding="utf-8")
        yield ["--facts", str(path)]


def command_for(endpoint: str, system: str | None, args: list[str], facts_option: list[str]) -> list[str]:
    """The `accord` argv an endpoint answers for (the request's args first: `why` wants FLAG... first)."""
    head, extra = {"resolve": (["resolve"], ["--json"]), "dry-run": (["resolve"], ["--dry-run", "--json"]),
                   "why": (["why"], ["--json"]), "proof": (["resolve"], [])}[endpoint]
    system_option = ["--system", system] if system is not None else []
    return [*head, *args, *extra, *system_option, *facts_option]


def answer(endpoint: str, body: Any) -> tuple[int, str, str]:
    """(HTTP status, content type, body text) for one POST endpoint."""
    system, facts, args = _request_fields(body)
    with _facts_option(facts) as facts_option:
        if endpoint == "fix":
            return _fix(body, system, args, facts_option)
        argv = command_for(endpoint, system, args, facts_option)
        answered = _from_outcome(endpoint, argv) if endpoint != "why" else None
        code, out, err = answered if answered is not None else run_cli(argv)
    if endpoint == "proof":
        text = err if code == EXIT_CONFLICT else (out + err)
        return _status(code), "text/plain; charset=utf-8", text
    if code in (0, EXIT_CONFLICT) and out:
        return _status(code), "application/json", out
    return _status(code), "application/json", _error_json(err.strip() or out.strip())


# -- one solve per launch, shared by the requests of one change ------------------------------------

class Outcome:
    """What `accord resolve` computes for one launch: its configuration or its conflict, and the
    JSON texts printed from it so far (the dry run's by the flags it judged)."""

    __slots__ = ("config", "conflict", "texts")

    def __init__(self, config=None, conflict=None):
        self.config, self.conflict, self.texts = config, conflict, {}

    def text(self, key, make) -> str:
        if key not in self.texts:
            self.texts[key] = make()
        return self.texts[key]


class Outcomes:
    """A bounded LRU of outcomes, keyed on the solver's exact inputs.

    A change on the page asks for the configuration, then its choices or its proof: all three come
    from one solve. The key is what the resolver reads (system, typed values and their sources,
    parse warnings, and the facts as loaded for this request, model folder included), so the same
    key gives the same bytes and an edited model or facts file is a new key, never a stale answer.
    The resolver is deterministic and the rules are compiled once per process, so nothing else
    can change an answer while the server runs.
    """

    def __init__(self, size: int = 64):
        self.size = size
        self._entries: OrderedDict[str, Outcome] = OrderedDict()

    def get(self, key: str, compute) -> Outcome:
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        outcome = self._entries[key] = compute()
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return outcome

    def forget(self) -> None:
        """Drop every outcome (the benchmark measures changes computed, not remembered)."""
        self._entries.clear()


OUTCOMES = Outcomes()


def _from_outcome(endpoint: str, argv: list[str]) -> tuple[int, str, str] | None:
    """`accord resolve ...` for the resolve, dry-run and proof endpoints, printed by the CLI's own
    functions from the launch's shared outcome; None where the CLI itself must answer (bad usage,
    `--relax`, `--help`: rare, and their messages are the CLI's alone)."""
    from accord.resolver.errors import AccordError

    out, err = io.StringIO(), io.StringIO()
    with _CLI_LOCK, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = _print_answer(endpoint, argv)
        except (AccordError, SystemExit):
            return None
    return (code, out.getvalue(), err.getvalue()) if code is not None else None


def _print_answer(endpoint: str, argv: list[str]) -> int | None:
    """Print what `accord ARGV` prints (ARGV: `resolve ...`), as `accord.resolver.commands.resolve.main` does."""
    from accord.resolver.api import plan_for
    from accord.resolver.commands import resolve as command
    from accord.resolver.exploring.dryrun import judge, selected_flags

    opts, parsed, facts, outcome = _outcome(argv[1:])
    if opts.relax:
        return None
    if endpoint == "dry-run":
        plan = plan_for(parsed.system)
        names = selected_flags(plan, opts.only, facts)  # a bad --flag is refused first, as by the CLI
    if outcome.conflict is not None and endpoint == "dry-run":
        return None  # the dry run may free a default the conflict is about (dryrun.py): the CLI answers
    if outcome.conflict is not None and opts.json:
        print(outcome.text("conflict", lambda: command.conflict_json(outcome.conflict)))
        return EXIT_CONFLICT
    if outcome.conflict is not None:
        return command.print_conflict(outcome.conflict, False, parsed.warnings)
    if endpoint == "dry-run":
        print(outcome.text(("dry-run", *names), lambda: command.dry_run_json(
            outcome.config, judge(plan, names, parsed.values, facts, outcome.config))))
    elif opts.json:
        print(outcome.text("config", lambda: command.config_json(outcome.config)))
    else:
        command.print_config(outcome.config, opts.all)
    return 0


def _outcome(argv: list[str]):
    """(options, parsed flags, facts, outcome) of `accord resolve ARGV`, solved at most once per key.
    Call with `_CLI_LOCK` held."""
    from accord.resolver.commands.resolve import resolve_command

    opts, parsed, facts = resolve_command(argv, "accord resolve")
    if opts.relax:  # the CLI answers `--relax` itself; nothing to share
        return opts, parsed, facts, None
    key = json.dumps([parsed.system, parsed.values, parsed.sources, parsed.warnings, facts],
                     sort_keys=True, default=repr)
    return opts, parsed, facts, OUTCOMES.get(key, lambda: _solve(parsed, facts))


def _solve(parsed, facts) -> Outcome:
    from accord.resolver.api import ConflictError, resolve

    try:
        return Outcome(config=resolve(parsed.system, parsed.values, facts, parsed.sources,
                                      warnings=parsed.warnings))
    except ConflictError as err:
        return Outcome(conflict=err)


def _status(code: int) -> int:
    return {0: 200, EXIT_CONFLICT: 409, EXIT_USAGE: 400}.get(code, 500)


def _error_json(message: str, kind: str = "usage") -> str:
    return json.dumps({"error": kind, "message": message}, indent=2, sort_keys=True) + "\n"


def _fix(body: dict, system: str | None, args: list[str], facts_option: list[str]) -> tuple[int, str, str]:
    """One verified fix of the request's conflict as changes to make: `{"set": {...}, "drop": [...]}`.

    The fixes are the ones `accord resolve --json` lists, in the same order (conflict i, fix j),
    taken from the same shared outcome the page's conflict came from."""
    i, j = body.get("conflict"), body.get("fix")
    if not (isinstance(i, int) and isinstance(j, int)):
        raise BadRequest('"conflict" and "fix" must be the indexes (from 0) of a conflict and of one of its fixes.')
    argv = [*args, *(["--system", system] if system is not None else []), *facts_option]
    try:
        with _CLI_LOCK:
            _, _, _, outcome = _outcome(argv)
    except UsageError as err:
        return 400, "application/json", _error_json(f"accord resolve: {err}")
    if outcome is None:
        raise BadRequest("a fix is found for the command as typed; drop --relax from \"args\".")
    err = outcome.conflict
    if err is None:
        raise BadRequest("this command resolves; there is no conflict to fix.")
    if not (0 <= i < len(err.conflicts) and 0 <= j < len(err.conflicts[i].fixes)):
        raise BadRequest(f"there is no fix {j} of conflict {i} for this command.")
    fix = err.conflicts[i].fixes[j]
    data = {"set": dict(fix.changes), "drop": list(fix.drops)}
    return 200, "application/json", json.dumps(data, indent=2, sort_keys=True) + "\n"


# -- catalog, presets, models ------------------------------------------------------------------------

def presets_json() -> str:
    """Every preset machine: its name, one-line description and facts (what `--facts NAME` loads)."""
    import yaml

    from accord.resolver.facts.machine import PRESETS_DIR, list_presets, load_preset

    presets = []
    for name in list_presets():
        meta = yaml.safe_load((PRESETS_DIR / f"{name}.yaml").read_text(encoding="utf-8")) or {}
        presets.append({"name": name, "description": meta.get("description", ""), "facts": load_preset(name)})
    return json.dumps({"presets": presets}, indent=2, sort_keys=True) + "\n"


def models_json() -> str:
    """The bundled model folders (what the engine serves without --model-path), by system."""
    from accord.resolver.facts.model import BUILTIN_MODELS

    models = [{"system": system, "name": path.name, "path": str(path)} for system, path in BUILTIN_MODELS.items()]
    return json.dumps({"models": models}, indent=2, sort_keys=True) + "\n"


def flags_answer(query: str) -> tuple[int, str, str]:
    system = (parse_qs(query).get("system") or ["llm"])[-1]
    code, out, err = run_cli(["flags", "--system", system, "--json"])
    if code == 0:
        return 200, "application/json", out
    return _status(code), "application/json", _error_json(err.strip())


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
            self._send(403, "application/json", _error_json("unexpected Host header.", "forbidden"))
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
        self._send(404, "application/json", _error_json(f"nothing at {url.path}.", "not found"))

    def do_POST(self) -> None:
        if not self._host_ok():
            return
        endpoint = urlsplit(self.path).path.removeprefix("/api/")
        if endpoint not in ("resolve", "dry-run", "why", "proof", "fix"):
            return self._send(404, "application/json", _error_json(f"no API endpoint {self.path}.", "not found"))
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
            self._send(400, "application/json", _error_json(str(err)))
        except Exception as err:  # a bug: say so in the answer, keep serving
            self._send(500, "application/json", _error_json(f"{type(err).__name__}: {err}", "internal"))


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
