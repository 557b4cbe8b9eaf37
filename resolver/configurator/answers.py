"""The configurator's JSON API: a request body becomes an `accord` command line, and its answer the
HTTP status, content type and text that command prints.

The API computes nothing itself: every answer is the CLI's output for the same input (a shared
outcome's, see `outcomes`, or the whole CLI run in process, see `captured_cli`). This module checks
the request fields, builds the argv each endpoint stands for, and maps exit codes to HTTP statuses;
the HTTP plumbing (routes, static files, Host checks) is `server`'s.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from accord.resolver.configurator.captured_cli import CLI_LOCK, run_cli
from accord.resolver.configurator.outcomes import from_outcome, outcome_for
from accord.resolver.errors import EXIT_CONFLICT, EXIT_USAGE, UsageError

BODY_KEYS = {"system", "facts", "args"}
# Options the request fields set; in `args` they would be overridden or duplicated silently.
RESERVED = {"--system": "system", "--facts": "facts", "--json": None, "--dry-run": None,
            "-h": None, "--help": None}


class BadRequest(Exception):
    """A request the API cannot turn into a command line (the body, not the flags, is wrong)."""


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
        answered = from_outcome(endpoint, argv) if endpoint != "why" else None
        code, out, err = answered if answered is not None else run_cli(argv)
    if endpoint == "proof":
        text = err if code == EXIT_CONFLICT else (out + err)
        return _status(code), "text/plain; charset=utf-8", text
    if code in (0, EXIT_CONFLICT) and out:
        return _status(code), "application/json", out
    return _status(code), "application/json", error_json(err.strip() or out.strip())



# -- statuses, errors and one-click fixes -----------------------------------------------------------

def _status(code: int) -> int:
    return {0: 200, EXIT_CONFLICT: 409, EXIT_USAGE: 400}.get(code, 500)


def error_json(message: str, kind: str = "usage") -> str:
    """The body of an answer that is not the CLI's JSON: `{"error": KIND, "message": ...}`."""
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
        with CLI_LOCK:
            _, _, _, outcome = outcome_for(argv)
    except UsageError as err:
        return 400, "application/json", error_json(f"accord resolve: {err}")
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
    """The models the picker offers, by system: the bundled model folders (what the engine serves
    without --model-path), then every built-in model card by hub id (its facts need no download)."""
    from accord.resolver.facts.model import BUILTIN_MODELS
    from accord.resolver.facts.model_sources import card_systems

    models = [{"system": system, "name": path.name, "path": str(path)} for system, path in BUILTIN_MODELS.items()]
    models += [{"system": system, "name": repo, "path": repo} for repo, system in card_systems().items()]
    return json.dumps({"models": models}, indent=2, sort_keys=True) + "\n"


def flags_answer(query: str) -> tuple[int, str, str]:
    system = (parse_qs(query).get("system") or ["llm"])[-1]
    code, out, err = run_cli(["flags", "--system", system, "--json"])
    if code == 0:
        return 200, "application/json", out
    return _status(code), "application/json", error_json(err.strip())
