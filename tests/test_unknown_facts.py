"""Unknown facts are never a silent pass, and a placeholder never stands in for the user's model
or machine; a saved configuration keeps the machine it was resolved for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QWEN = str(ROOT / "tests" / "differential" / "fixtures" / "models" / "Qwen" / "Qwen3-8B")


def _accord(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accord.resolver.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, "COLUMNS": "100"})


def test_strict_refuses_rules_it_could_not_check_naming_the_fact_and_how_to_supply_it():
    loose = _accord("resolve", "--facts", "h100", "--model-path", "acme/unknown-model", "--tp-size", "8")
    strict = _accord("resolve", "--facts", "h100", "--model-path", "acme/unknown-model", "--tp-size", "8", "--strict")
    assert loose.returncode == 0 and "not checked" in loose.stderr
    assert strict.returncode == 3
    assert "model.num_attention_heads" in strict.stderr and "--fact" in strict.stderr and "--model-path" in strict.stderr


def test_strict_passes_a_launch_whose_rules_were_all_checked():
    assert _accord("resolve", "--facts", "h100", "--model-path", QWEN, "--tp-size", "2", "--strict").returncode == 0


def test_probe_lists_no_placeholder_model_as_a_fact_of_this_machine():
    facts = json.loads(_accord("probe", "--facts", "h100", "--json").stdout)
    assert not [key for key in facts if key.startswith("model.")]
    with_model = json.loads(_accord("probe", "--facts", "h100", "--model-path", QWEN, "--json").stdout)
    assert with_model["model.architecture"] == "Qwen3ForCausalLM"


def test_a_conflict_without_a_model_never_calls_the_placeholder_the_machine():
    """Without --model-path the built-in tiny DiT is resolved (it has SDPA attention only); a
    report resting on its facts says they are the placeholder's, not the machine's."""
    result = _accord("resolve", "--system", "diffusion", "--facts", "h100", "--json", "--attention-backend", "fa")
    conflicts = json.loads(result.stdout)["conflicts"]
    assert result.returncode == 3 and conflicts
    for conflict in conflicts:
        assert "model." not in conflict["machine"]
        assert "model.pipeline=TinyDiTPipeline" in conflict["model"] and "placeholder" in conflict["model"]


def test_a_saved_configuration_resolves_for_the_machine_it_was_saved_for(tmp_path):
    saved = tmp_path / "saved.json"
    first = _accord("resolve", "--facts", "h100", "--model-path", QWEN, "--tp-size", "2", "--json")
    saved.write_text(first.stdout)
    again = _accord("resolve", "--config", str(saved), "--json")  # no --facts: the saved machine
    assert json.loads(again.stdout)["hash"] == json.loads(first.stdout)["hash"]
    assert any("facts saved in" in w for w in json.loads(again.stdout)["warnings"])
    elsewhere = _accord("resolve", "--config", str(saved), "--facts", "b200")
    assert "replaces the facts saved in" in elsewhere.stderr


def test_a_diffusion_hub_id_without_system_is_read_as_diffusion(tmp_path):
    cache = tmp_path / "hub" / "models--acme--pipeline"
    (cache / "snapshots" / ("a" * 40)).mkdir(parents=True)
    (cache / "snapshots" / ("a" * 40) / "model_index.json").write_text('{"_class_name": "FluxPipeline"}')
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text("a" * 40)
    result = subprocess.run([sys.executable, "-m", "accord.resolver.cli", "resolve", "--facts", "h100",
                             "--model-path", "acme/pipeline", "--json"], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub")})
    assert json.loads(result.stdout)["system"] == "diffusion", result.stderr


def test_the_dry_run_and_matrix_say_first_that_model_rules_were_not_checked():
    dry = _accord("resolve", "--dry-run", "--facts", "h100", "--model-path", "acme/unknown-model")
    assert dry.returncode == 0
    first = dry.stderr.splitlines()[0]  # before the table, on stderr so the table pipes alone
    assert first.startswith("warning: ") and "rules were not checked" in first
    matrix = _accord("matrix", "--facts", "h100", "--model-path", "acme/unknown-model", "--axes", "attention_backend")
    assert matrix.returncode == 0 and matrix.stderr.startswith("warning: --model-path acme/unknown-model")
    assert "not checked" in matrix.stderr.splitlines()[0]
    known = _accord("resolve", "--dry-run", "--facts", "h100", "--model-path", QWEN)
    assert "not checked" not in known.stdout + known.stderr
