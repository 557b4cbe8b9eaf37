"""`accord completion bash|zsh`: scripts generated from the catalogs that really complete in the shells."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from accord.resolver import cli
from accord.resolver.commands.completion import script
from accord.resolver.language.catalog import load_catalog

BASH = shutil.which("bash")
ZSH = shutil.which("zsh")


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_script_lists_every_flag_spelling_of_both_systems(shell):
    text = script(shell)
    for system in ("llm", "diffusion"):
        for flag in load_catalog(system):
            for spelling in () if flag.meta else flag.option_strings:
                assert f" {spelling}" in text or f"({spelling}" in text or f"'{spelling}" in text, spelling


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_script_is_deterministic(shell):
    assert script(shell) == script(shell)


def test_an_unknown_shell_exits_2(capsys):
    assert cli.main(["completion", "fish"]) == 2
    assert capsys.readouterr().err == "accord completion: unknown shell 'fish'; use one of: bash, zsh.\n"


def _bash_complete(*words: str) -> list[str]:
    program = (script("bash") + "\nCOMP_WORDS=(" + " ".join(f"'{w}'" for w in words) + ")\n"
               "COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))\n_accord\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
    out = subprocess.run([BASH, "--norc", "--noprofile"], input=program, capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("words, offered", [
    (("accord", "re"), ["resolve"]),
    (("accord", "resolve", "--tp-s"), ["--tp-size"]),
    (("accord", "resolve", "--cuda-graph-backend-decode", ""), ["full", "breakable", "tc_piecewise", "disabled"]),
    (("accord", "resolve", "--system", "diffusion", "--perf"), ["--performance-mode"]),
    (("accord", "resolve", "--system", "diffusion", "--mode", ""), ["manual", "auto", "speed", "memory"]),
    (("accord", "serve", "--system", "diffusion", "--webui", ""), ["true", "false"]),
    (("accord", "flags", "--group", "exec.mo"), ["exec.moe"]),
    (("accord", "completion", ""), ["bash", "zsh"]),
])
def test_bash_completes_commands_flags_and_enum_values(words, offered):
    assert _bash_complete(*words) == offered


@pytest.mark.skipif(ZSH is None, reason="zsh is not installed")
def test_zsh_completes_enum_values_after_an_enum_flag():
    program = (script("zsh") + "\ncompadd() { [[ $1 == -- ]] && shift; print -r -- \"$@\"; }\n"
               "words=(accord resolve --system diffusion --performance-mode ''); CURRENT=6; _accord\n")
    out = subprocess.run([ZSH, "-f"], input=program, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["manual", "auto", "speed", "memory"]


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("words, offered", [
    (("accord", "resolve", "--facts", "h1"), ["h100"]),
    (("accord", "why", "--facts", "b2"), ["b200"]),
    (("accord", "matrix", "--facts", "h100,b2"), ["h100,b200"]),
    (("accord", "matrix", "--axes", "attention_back"), ["attention_backend"]),
    (("accord", "matrix", "--axes", "kv_cache_dtype,attention_back"), ["kv_cache_dtype,attention_backend"]),
    (("accord", "matrix", "--values", "attention_back"), ["attention_backend="]),
    (("accord", "matrix", "--strategy", ""), ["all", "pairwise", "3-wise"]),
    (("accord", "matrix", "--format", "c"), ["csv"]),
    (("accord", "matrix", "--ax"), ["--axes"]),
    (("accord", "why", "page_si"), ["page_size"]),
    (("accord", "why", "page_size", "tp_si"), ["tp_size"]),
    (("accord", "why", "page_size", "--tp-s"), ["--tp-size"]),
])
def test_bash_completes_presets_matrix_and_why_arguments(words, offered):
    assert _bash_complete(*words) == offered


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("words, offered", [
    (("accord", "resolve", "--help", "para"), ["parallel"]),
    (("accord", "launch", "--help", "al"), ["all"]),
    (("accord", "serve", "-h", "exec.mo"), ["exec.moe"]),
    (("accord", "resolve", "--system", "diffusion", "--help", "al"), ["all"]),
])
def test_bash_completes_the_flag_groups_after_help_of_a_launch_command(words, offered):
    assert _bash_complete(*words) == offered


@pytest.mark.skipif(ZSH is None, reason="zsh is not installed")
def test_zsh_completes_the_flag_groups_after_help():
    program = (script("zsh") + "\ncompadd() { [[ $1 == -- ]] && shift; print -r -- \"$@\"; }\n"
               "words=(accord resolve --help ''); CURRENT=4; _accord\n")
    out = subprocess.run([ZSH, "-f"], input=program, capture_output=True, text=True, check=True)
    offered = out.stdout.split()
    assert "parallel" in offered and offered[-1] == "all"


def test_each_command_offered_help_groups_lists_a_group_with_help_group(capsys):
    """The script offers groups after `--help` only where `--help GROUP` really lists one."""
    from accord.resolver.commands import completion

    for command in completion.HELP_GROUP_COMMANDS:
        words = [command, "page_size"] if command == "why" else [command]  # why's first word is its FLAG
        with pytest.raises(SystemExit) as done:
            cli.main([*words, "--help", "parallel"])
        assert done.value.code == 0 and "\nllm flags: parallel\n" in capsys.readouterr().out, command


def test_matrix_options_and_choices_in_the_script_are_the_matrix_command_s():
    from accord.resolver.commands import completion, matrix

    actions = {a.option_strings[0]: a for a in matrix._parser()._actions if a.option_strings}
    assert set(completion.MATRIX_OPTIONS) - {"--help"} <= set(actions)
    assert tuple(actions["--strategy"].choices) == completion.MATRIX_STRATEGIES
    assert tuple(actions["--format"].choices) == completion.MATRIX_FORMATS
