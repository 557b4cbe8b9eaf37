"""`accord launch`: the command it writes for upstream, and the exec path, with a stand-in launcher.

The stand-in is a small script that records the argv and environment it was started with; the tests
start `accord launch` as a process (execvpe replaces it) and read the record back, so what upstream
would receive is checked exactly. Whether upstream *accepts* the written commands and lands on
Accord's values is tests/test_launch_upstream.py (upstream's answers stored as a fixture).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from accord.resolver.commandline.emit import load_spec
from accord.resolver.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
QWEN = str(ROOT / "tests" / "differential" / "fixtures" / "models" / "Qwen" / "Qwen3-8B")


def accord(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accord.resolver.cli", *argv], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


@pytest.fixture
def recorder(tmp_path):
    """A stand-in launcher: writes {"argv", "env"} to record.json and exits 0."""
    script = tmp_path / "fake_sglang.py"
    record = tmp_path / "record.json"
    script.write_text(textwrap.dedent(f"""\
        import json, os, sys
        with open({str(record)!r}, "w") as fh:
            json.dump({{"argv": sys.argv, "env": dict(os.environ)}}, fh)
    """))
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}", record


def dry_json(*argv: str) -> dict:
    done = accord("launch", "--dry-run", "--json", *argv)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_exec_starts_the_launcher_with_the_dry_run_command_and_env(recorder):
    launcher, record = recorder
    argv = ["--facts", "h100", "--model-path", QWEN, "--tp-size", "2", "--context-length", "65536",
            "--fact", "env.allow_longer_context=true"]
    planned = dry_json("--launcher", launcher, *argv)
    done = accord("launch", "--launcher", launcher, *argv, env={"ACCORD_LAUNCH_TEST_MARK": "kept"})
    assert done.returncode == 0, done.stderr
    seen = json.loads(record.read_text())
    # the launcher got exactly the planned words (argv[0] is the script, as python reports it)
    assert [sys.executable, *seen["argv"]] == planned["command"]
    # the longer-context override upstream reads, on top of the caller's environment
    assert planned["env"] == {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert seen["env"]["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] == "1"
    assert seen["env"]["ACCORD_LAUNCH_TEST_MARK"] == "kept"


def test_dry_run_json_holds_command_env_and_values():
    data = dry_json("--facts", "h100", "--model-path", QWEN, "--tp-size", "2", "--enable-dp-attention",
                    "--dp-size", "2")
    assert data["command"][:3] == ["python3", "-m", "sglang.launch_server"]
    words = data["command"]
    assert data["values"]["tp_size"] == 2 and data["values"]["enable_dp_attention"] is True
    # upstream 0.5.23 spells attention DP --attn-dp-size and deprecated --enable-dp-attention
    assert words[words.index("--attn-dp-size") + 1] == "2"
    assert "--enable-dp-attention" not in words and "--dp-size" not in words
    assert data["env"] == {}


def test_no_deprecated_or_removed_upstream_spelling_is_ever_written():
    spec = load_spec("llm")
    retired = {s for spellings in spec.deprecated.values() for s in spellings}
    data = dry_json("--facts", "h100", "--model-path", QWEN, "--disable-cuda-graph", "--enable-dp-attention",
                    "--tp-size", "2", "--dp-size", "2")
    assert not retired & set(data["command"])
    words = data["command"]
    assert words[words.index("--cuda-graph-backend-decode") + 1] == "disabled"


@pytest.mark.parametrize("typed, written", [
    (["--enable-flashinfer-allreduce-fusion", "--tp", "2"], ["--flashinfer-allreduce-fusion-backend", "auto"]),
    (["--disable-fast-image-processor"], ["--image-processor-backend", "pil"]),
    (["--grpc-mode"], ["--smg-grpc-mode"]),
])
def test_an_old_switch_is_written_as_upstreams_replacement(typed, written):
    # each replacement is the one upstream 0.5.23's deprecation message names
    data = dry_json("--facts", "h100", *typed)
    words = data["command"]
    at = words.index(written[0])
    assert words[at:at + len(written)] == written
    assert typed[0] not in words and not data["warnings"]


def _emitted(*argv: str):
    """The upstream launch the emitter writes for a command, resolved through the API (a typed
    word upstream's parser refuses is refused earlier by `accord launch`; see below)."""
    from accord.resolver.api import resolve
    from accord.resolver.commandline.emit import emit
    from accord.resolver.commandline.flagparse import parse_flags
    from accord.resolver.facts.machine import load_facts

    _, parsed = parse_flags(list(argv))
    facts = load_facts("h100", (), model_path=parsed.user.get("model_path"), system=parsed.system)
    return emit(resolve(parsed.system, parsed.user, facts, parsed.sources, warnings=parsed.warnings))


def test_a_value_no_upstream_option_carries_is_named_in_a_warning():
    launch = _emitted("--model-path", QWEN, "--speculative-skip-dp-mlp-sync")
    assert any(w.startswith("--speculative-skip-dp-mlp-sync=true") for w in launch.warnings)


def test_a_value_outside_upstreams_choices_is_named_not_written():
    launch = _emitted("--tp", "2", "--cuda-graph-backend-prefill", "tc_piecewise")
    assert "--cuda-graph-backend-prefill" not in launch.command
    assert any(w.startswith("--cuda-graph-backend-prefill=tc_piecewise (from user)") for w in launch.warnings)


@pytest.mark.parametrize("typed", [["--speculative-skip-dp-mlp-sync"], ["--cuda-graph-backend-prefill", "tc_piecewise"]],
                         ids=["option", "value"])
def test_a_typed_word_upstreams_own_parser_refuses_is_refused_before_launch(typed):
    """Seed words SGLang 0.5.23's parser refuses: `accord launch` says so (exit 2) instead of
    starting a server that would refuse them."""
    done = accord("launch", "--dry-run", "--facts", "h100", "--model-path", QWEN, *typed)
    assert done.returncode == 2
    assert "SGLang 0.5.23" in done.stderr and typed[-1] in done.stderr


def test_dry_run_text_is_the_shell_line_of_the_json_command():
    argv = ["--facts", "h100", "--model-path", QWEN, "--tp-size", "2"]
    data = dry_json(*argv)
    done = accord("launch", "--dry-run", *argv)
    assert done.returncode == 0
    assert shlex.split(done.stdout.strip()) == data["command"]


def test_a_conflict_prints_the_report_exits_3_and_starts_nothing(recorder):
    launcher, record = recorder
    done = accord("launch", "--launcher", launcher, "--facts", "h100", "--tp", "64")
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert not record.exists()


def test_a_missing_launcher_is_exit_127_with_one_line(tmp_path):
    done = accord("launch", "--launcher", str(tmp_path / "no-such-sglang"), "--facts", "h100", "--tp", "2")
    assert done.returncode == 127 and "not found" in done.stderr and "Traceback" not in done.stderr


def test_the_default_launcher_without_sglang_installed_is_exit_127_naming_launcher(tmp_path):
    """`python3 -m sglang.launch_server` with a python3 that lacks SGLang: the documented exit 127
    and one paragraph naming --launcher, not the interpreter's ModuleNotFoundError and exit 1."""
    import importlib.util

    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("SGLang is installed in this interpreter")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python3 = bin_dir / "python3"  # this interpreter (no SGLang) is the python3 the launcher finds
    python3.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    python3.chmod(0o755)
    done = accord("launch", "--facts", "h100", "--tp", "2",
                  env={"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"})
    assert done.returncode == 127, done.stderr
    message = done.stderr.strip()
    assert "--launcher" in message and "sglang" in message
    assert "Traceback" not in message and "ModuleNotFoundError" not in message
    assert "\n\n" not in message and message.startswith("accord launch: ")


def test_json_without_dry_run_is_bad_usage(capsys):
    assert cli_main(["launch", "--json", "--facts", "h100"]) == 2
    assert "--dry-run" in capsys.readouterr().err


def test_emit_config_writes_the_options_upstream_reads_back(tmp_path, capsys):
    path = tmp_path / "sglang.yaml"
    argv = ["--facts", "h100", "--model-path", QWEN, "--tp-size", "2", "--enable-torch-compile"]
    assert cli_main(["launch", "--emit-config", str(path), *argv]) == 0
    printed = shlex.split(capsys.readouterr().out.strip())
    assert printed[:5] == ["python3", "-m", "sglang.launch_server", "--config", str(path)]
    # upstream's config reader refuses negatable switches (BooleanOptionalAction): they stay on the line
    rest = printed[5:]
    negatable = {e["flag"] for e in load_spec("llm").flags.values() if e["form"] == "negatable"}
    assert all(word in negatable or "--" + word[5:] in negatable for word in rest)
    data = yaml.safe_load(path.read_text())
    assert data["tp-size"] == "2" and data["enable-torch-compile"] is True
    assert not list(tmp_path.glob("*.accord-tmp"))
    # the file and the rest of the line hold the same options as the command line (upstream's
    # ConfigArgumentMerger turns `key: value` into `--key value` and `key: true` into a bare switch)
    assert cli_main(["launch", "--dry-run", "--json", *argv]) == 0
    words = json.loads(capsys.readouterr().out)["command"][3:]
    rebuilt = []
    for key, value in data.items():
        rebuilt += [f"--{key}"] + ([] if value is True else [str(v) for v in value] if isinstance(value, list) else [str(value)])
    assert sorted(rebuilt + rest) == sorted(words)


def test_emit_config_into_a_missing_folder_is_bad_usage_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "no-such-dir" / "sglang.yaml"
    assert cli_main(["launch", "--emit-config", str(path), "--facts", "h100", "--tp", "2"]) == 2
    assert "--emit-config" in capsys.readouterr().err and not path.parent.exists()


def test_diffusion_launch_uses_the_serve_entry_and_true_false_switches(tmp_path):
    from tests.differential.diffusion_gen import materialize, model_dir

    materialize(tmp_path)
    model = str(model_dir(tmp_path, "black-forest-labs/FLUX.1-dev"))
    data = dry_json("--facts", "h100", "--model-path", model, "--num-gpus", "2", "--dit-cpu-offload", "false")
    assert data["command"][:4] == ["sglang", "serve", "--model-type", "diffusion"]
    words = data["command"]
    assert words[words.index("--dit-cpu-offload") + 1] == "false"
    assert words[words.index("--num-gpus") + 1] == "2"


def test_diffusion_emit_config_keys_are_upstreams_field_names(tmp_path, capsys):
    from tests.differential.diffusion_gen import materialize, model_dir

    materialize(tmp_path)
    model = str(model_dir(tmp_path, "black-forest-labs/FLUX.1-dev"))
    path = tmp_path / "serve.yaml"
    argv = ["--facts", "h100", "--model-path", model, "--num-gpus", "2", "--cfg-parallel-size", "2"]
    assert cli_main(["launch", "--emit-config", str(path), *argv]) == 0
    assert shlex.split(capsys.readouterr().out.strip()) == ["sglang", "serve", "--model-type", "diffusion",
                                                           "--config", str(path)]
    data = yaml.safe_load(path.read_text())
    # upstream's ServerArgs.load_config_file merges the mapping as keyword arguments: field names, typed
    assert data["num_gpus"] == 2 and data["cfg_parallel_degree"] == 2 and data["model_path"] == model


def test_every_setting_without_an_upstream_option_has_a_reason():
    for system in ("llm", "diffusion"):
        spec = load_spec(system)  # raises when a missing or deprecated setting has no entry
        for name in spec.missing:
            assert spec.no_upstream_flag.get(name) or name in spec.expressed_by, (system, name)
