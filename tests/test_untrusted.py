"""Files Accord did not write are bounded: a config, facts or model file that is too large or nested
too deep is an exit 2 naming the file and the limit, never a traceback or minutes of parsing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accord.resolver.errors import UsageError
from accord.resolver.facts.model import model_facts
from accord.resolver.untrusted import MAX_DEPTH, SETTINGS_FILE_LIMIT, nesting_depth

ALIAS_BOMB = "\n".join(
    [f"a0: &a0 [{', '.join(['x'] * 9)}]"]
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]) + "\n"


def _resolve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accord.resolver.cli", "resolve", "--facts", "h100", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name, text, words", [
    ("deep.json", '{"tp_size": ' + "[" * 100_000 + "]" * 100_000 + "}", "levels deep"),
    ("deep.yaml", "tp_size: " + "[" * 5_000 + "]" * 5_000 + "\n", "nesting depth|levels deep"),  # libyaml stops first
    ("huge.yaml", "tp_size: 1\nnotes: [" + ", ".join(["1"] * 400_000) + "]\n", "bytes, more than"),
])
def test_a_config_file_too_deep_or_too_large_is_refused_quickly(tmp_path, name, text, words):
    path = tmp_path / name
    path.write_text(text)
    started = time.monotonic()
    result = _resolve("--config", str(path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert re.search(words, result.stderr) and str(path) in result.stderr
    assert time.monotonic() - started < 60


def test_a_yaml_alias_bomb_costs_its_size_not_its_expansion():
    import yaml

    data = yaml.safe_load(ALIAS_BOMB)  # 9**9 strings once expanded; a few dozen objects as loaded
    assert nesting_depth(data) == 10


def test_a_facts_file_nested_too_deep_is_refused(tmp_path):
    path = tmp_path / "facts.json"
    path.write_text('{"gpu": ' + '{"a": ' * 50_000 + "1" + "}" * 50_000 + "}")
    result = _resolve("--facts", str(path))
    assert result.returncode == 2 and "levels deep" in result.stderr and "Traceback" not in result.stderr


def test_a_model_config_nested_too_deep_is_a_usage_error(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["X"], "a": ' + "[" * 50_000 + "]" * 50_000 + "}")
    with pytest.raises(UsageError, match="levels deep"):
        model_facts(str(tmp_path))


def test_a_model_config_within_limits_is_read(tmp_path):
    nested = {"quantization_config": {"quant_method": "fp8", "config_groups": {"g": {"weights": {"num_bits": 8}}}}}
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], **nested}))
    assert model_facts(str(tmp_path))["model.quant_method"] == "fp8"


def test_the_limits_leave_room_for_real_files():
    """A launch config is a few kilobytes and no model family nests its config 10 levels deep."""
    assert SETTINGS_FILE_LIMIT >= 64 * 1024 and MAX_DEPTH >= 16
    assert Path(__file__).stat().st_size < SETTINGS_FILE_LIMIT
