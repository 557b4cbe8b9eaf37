"""The `accord ui` JSON API: every answer is, byte for byte, what the `accord` CLI prints for the
same input (the CLI runs here as a separate process, so nothing is shared but the code), bad input
is a 4xx carrying the CLI's own message, and the server stays on the core install (no torch).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from accord.resolver.configurator.server import running
from accord.resolver.facts.model import BUILTIN_MODELS

ROOT = Path(__file__).resolve().parent.parent
MODEL = str(BUILTIN_MODELS["llm"])


def cli(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "accord.resolver.cli", *argv], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)


def fetch(url: str, data: bytes | None = None, headers: dict | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers["Content-Type"], response.read().decode("utf-8")
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode("utf-8")


@pytest.fixture(scope="module")
def api():
    with running() as base:
        def call(endpoint: str, body=None, raw: bytes | None = None):
            data = raw if raw is not None else json.dumps(body).encode("utf-8")
            return fetch(f"{base}/api/{endpoint}", data, {"Content-Type": "application/json"})
        call.base = base
        yield call


# -- byte-identical to the CLI ---------------------------------------------------------------------

@pytest.mark.parametrize("endpoint, head, tail, args, status", [
    ("resolve", ["resolve"], ["--json"], ["--model-path", MODEL, "--tp", "2"], 200),
    ("resolve", ["resolve"], ["--json"], ["--model-path", MODEL, "--kv-cache-dtype", "nvfp4"], 409),
    ("dry-run", ["resolve"], ["--dry-run", "--json"], ["--model-path", MODEL, "--tp", "4"], 200),
    ("dry-run", ["resolve"], ["--dry-run", "--json"], ["--flag", "attention_backend", "--kv-cache-dtype", "fp8_e5m2"], 200),
    ("dry-run", ["resolve"], ["--dry-run", "--json"], ["--kv-cache-dtype", "nvfp4"], 409),
    ("why", ["why"], ["--json"], ["attention_backend", "cuda_graph_max_bs_decode", "--tp", "8"], 200),
    ("why", ["why"], ["--json"], ["attention_backend", "--kv-cache-dtype", "nvfp4"], 409),
])
def test_answers_are_the_cli_json_byte_for_byte(api, endpoint, head, tail, args, status):
    got_status, content_type, body = api(endpoint, {"system": "llm", "facts": "h100", "args": args})
    expected = cli(*head, *args, *tail, "--system", "llm", "--facts", "h100")
    assert expected.returncode == {200: 0, 409: 3}[status]
    assert (got_status, content_type) == (status, "application/json")
    assert body == expected.stdout


@pytest.mark.parametrize("args, status", [
    (["--model-path", MODEL, "--tp", "8", "--kv-cache-dtype", "nvfp4"], 409),
    (["--model-path", MODEL, "--tp", "2"], 200),
])
def test_the_requests_of_one_change_share_a_solve_and_each_is_the_cli_answer(api, args, status):
    """The page asks for the configuration, then the choices and the proof of the same launch: the
    server solves it once, and every answer (asked twice, from what it kept) is still the CLI's."""
    body = {"system": "llm", "facts": "b200", "args": args}
    cli_args = [*args, "--system", "llm", "--facts", "b200"]
    expected = {"resolve": cli("resolve", *cli_args, "--json").stdout,
                "dry-run": cli("resolve", *cli_args, "--dry-run", "--json").stdout}
    proof = cli("resolve", *cli_args)
    expected["proof"] = proof.stderr if status == 409 else proof.stdout + proof.stderr
    for _ in range(2):
        for endpoint in ("resolve", "dry-run", "proof"):
            got_status, _, text = api(endpoint, body)
            assert (got_status, text) == (status, expected[endpoint]), endpoint


def test_an_edited_model_folder_is_answered_afresh(api, tmp_path):
    """What the server keeps is keyed on the facts read for each request, so editing the model's
    config.json between two identical requests changes the answer (4 heads: tp 8 cannot divide)."""
    config = json.loads((Path(MODEL) / "config.json").read_text(encoding="utf-8"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**config, "num_attention_heads": 4}), encoding="utf-8")
    body = {"facts": "h100", "args": ["--model-path", str(folder), "--tp", "8"]}
    assert api("resolve", body)[0] == 409
    (folder / "config.json").write_text(json.dumps({**config, "num_attention_heads": 8, "num_key_value_heads": 8,
                                                    "head_dim": 16}), encoding="utf-8")
    status, _, text = api("resolve", body)
    expected = cli("resolve", "--model-path", str(folder), "--tp", "8", "--json", "--facts", "h100")
    assert (status, expected.returncode) == (200, 0) and text == expected.stdout


def test_a_facts_object_answers_as_the_same_facts_file_does(api, tmp_path):
    facts = {"preset": "h100", "gpu": {"count": 2}}
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts), encoding="utf-8")
    status, _, body = api("resolve", {"facts": facts, "args": ["--tp", "2"]})
    expected = cli("resolve", "--tp", "2", "--json", "--facts", str(path))
    assert status == 200 and body == expected.stdout
    assert json.loads(body)["facts"]["gpu.count"] == 2


def test_a_diffusion_request_answers_as_the_cli(api):
    args = ["--model-path", str(BUILTIN_MODELS["diffusion"])]
    status, _, body = api("dry-run", {"system": "diffusion", "facts": "b200", "args": args})
    assert status == 200
    assert body == cli("resolve", *args, "--dry-run", "--json", "--system", "diffusion", "--facts", "b200").stdout


@pytest.mark.parametrize("system", ["llm", "diffusion"])
def test_flags_is_the_catalog_the_cli_prints(api, system):
    status, content_type, body = fetch(f"{api.base}/api/flags?system={system}")
    assert (status, content_type) == (200, "application/json")
    assert body == cli("flags", "--system", system, "--json").stdout


def test_presets_list_every_preset_with_its_facts(api):
    presets = json.loads(fetch(f"{api.base}/api/presets")[2])["presets"]
    h100 = next(p for p in presets if p["name"] == "h100")
    probed = json.loads(cli("probe", "--facts", "h100", "--json").stdout)
    assert h100["facts"].items() <= probed.items(), "a preset's facts are what --facts loads"
    assert "H100" in h100["description"]
    assert sorted(p["name"] for p in presets) == [p["name"] for p in presets]


def test_models_name_the_bundled_model_folders(api):
    models = json.loads(fetch(f"{api.base}/api/models")[2])["models"]
    assert {(m["system"], m["path"]) for m in models} >= {(s, str(p)) for s, p in BUILTIN_MODELS.items()}
    # and every built-in model card, by hub id, under its own system
    assert {("llm", "deepseek-ai/DeepSeek-V3"), ("diffusion", "black-forest-labs/FLUX.1-dev")} <= \
        {(m["system"], m["path"]) for m in models}


# -- bad input: 4xx with the CLI's message ---------------------------------------------------------

@pytest.mark.parametrize("endpoint, head, tail, facts, args", [
    ("resolve", ["resolve"], ["--json"], "h100", ["--tpp", "8"]),
    ("resolve", ["resolve"], ["--json"], "h1000", ["--tp", "8"]),
    ("resolve", ["resolve"], ["--json"], "h100", ["--tp", "eight"]),
    ("dry-run", ["resolve"], ["--dry-run", "--json"], "h100", ["--flag", "attention_backendd"]),
    ("why", ["why"], ["--json"], "h100", ["--tp", "8"]),
    ("why", ["why"], ["--json"], "h100", ["attention_backendd"]),
])
def test_bad_input_is_a_400_with_the_message_the_cli_prints(api, endpoint, head, tail, facts, args):
    status, _, body = api(endpoint, {"facts": facts, "args": args})
    expected = cli(*head, *args, *tail, "--facts", facts)
    assert expected.returncode == 2 and expected.stdout == ""
    assert status == 400
    assert json.loads(body) == {"error": "usage", "message": expected.stderr.strip()}


@pytest.mark.parametrize("raw, words", [
    (b"[1, 2]", "JSON object"),
    (b"{not json", "not JSON"),
    (b'{"args": "--tp 8"}', "list of strings"),
    (b'{"facts": 3}', "preset name"),
    (b'{"argv": []}', "unknown request field"),
    (b'{"args": ["--facts", "b200"]}', '"facts" field'),
    (b'{"args": ["--system=diffusion"]}', '"system" field'),
    (b'{"args": ["--json"]}', "--json cannot appear"),
    (b'{"args": ["--help"]}', "--help cannot appear"),
])
def test_a_malformed_request_is_a_400_naming_the_problem(api, raw, words):
    status, _, body = api("resolve", raw=raw)
    assert status == 400
    answer = json.loads(body)
    assert answer["error"] == "usage" and words in answer["message"]


def test_unknown_paths_and_foreign_hosts_are_refused(api):
    assert fetch(f"{api.base}/api/nothing", b"{}")[0] == 404
    assert fetch(f"{api.base}/etc/passwd")[0] == 404
    assert fetch(f"{api.base}/static/../commands/ui.py")[0] == 404
    assert fetch(f"{api.base}/", headers={"Host": "attacker.example"})[0] == 403


# -- fixes -------------------------------------------------------------------------------------------

def test_each_fix_is_the_listed_fix_and_resolves(api):
    args = ["--model-path", MODEL, "--tp", "2", "--kv-cache-dtype", "nvfp4"]
    status, _, body = api("resolve", {"facts": "h100", "args": args})
    assert status == 409
    listed = json.loads(body)["conflicts"][0]["fixes"]
    spelling = {e["name"]: e["flags"][0] for e in json.loads(fetch(f"{api.base}/api/flags")[2])}
    for index, text in enumerate(listed):
        status, _, body = api("fix", {"facts": "h100", "args": args, "conflict": 0, "fix": index})
        assert status == 200
        fix = json.loads(body)
        words = [f"{spelling[name]} {value}" for name, value in fix["set"].items()]
        words += [f"drop {spelling[name]}" for name in fix["drop"]]
        assert "; ".join(words) == text
        fixed = args[:-2] + [w for name, value in fix["set"].items() for w in (spelling[name], str(value))]
        assert api("resolve", {"facts": "h100", "args": fixed})[0] == 200, f"fix {text!r} resolves"


def test_fix_of_a_command_without_conflict_or_out_of_range_is_a_400(api):
    assert api("fix", {"facts": "h100", "args": ["--tp", "8"], "conflict": 0, "fix": 0})[0] == 400
    args = ["--kv-cache-dtype", "nvfp4"]
    assert api("fix", {"facts": "h100", "args": args, "conflict": 0, "fix": 99})[0] == 400
    assert api("fix", {"facts": "h100", "args": args})[0] == 400


def test_proof_is_the_text_the_cli_prints_for_a_conflict(api):
    args = ["--tp", "8", "--kv-cache-dtype", "nvfp4"]
    status, content_type, body = api("proof", {"facts": "h100", "args": args})
    expected = cli("resolve", *args, "--facts", "h100")
    assert (status, content_type) == (409, "text/plain; charset=utf-8")
    assert body == expected.stderr


# -- the page and the command --------------------------------------------------------------------------

@pytest.mark.parametrize("path, content_type", [
    ("/", "text/html; charset=utf-8"),
    ("/static/app.js", "text/javascript; charset=utf-8"),
    ("/static/style.css", "text/css; charset=utf-8"),
])
def test_the_page_is_served_from_package_data_without_a_cdn(api, path, content_type):
    status, got_type, body = fetch(api.base + path)
    assert (status, got_type) == (200, content_type)
    assert "http://" not in body and "https://" not in body, "no external resources"


def test_the_server_never_imports_the_engine_stack():
    code = ("import sys, json, accord.resolver.configurator.server; "
            "from accord.resolver.configurator.answers import answer, presets_json; "
            "answer('resolve', {'facts': 'h100', 'args': ['--tp', '8']}); "
            "answer('dry-run', {'facts': 'h100', 'args': []}); presets_json(); "
            "print(json.dumps(sorted(m for m in ('torch', 'triton', 'zmq', 'numpy') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_ui_command_reports_a_busy_port_and_a_bad_port_as_usage_errors():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = cli("ui", "--port", str(port))
    assert taken.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr
    assert "Traceback" not in taken.stderr
    bad = cli("ui", "--port", "70000")
    assert bad.returncode == 2 and "--port 70000 is not a TCP port" in bad.stderr
