"""`accord COMMAND --help [GROUP]`: a help a person reads, paged by flag group, alike for every launch command.

Why: listing all five hundred launch flags made `accord resolve --help` about 1,400 lines, with the
command's own dozen options lost at the top. The default help shows the command's summary, examples
and own options, then the flag groups and how to list one; `--help GROUP` lists a group with
`accord flags`' table, `--help all` every flag. These tests protect that design for each command.
"""

from __future__ import annotations

import pytest

from accord.resolver.cli import main
from accord.resolver.commandline.flagtable import entries
from accord.resolver.language.catalog import load_catalog

LAUNCH_COMMANDS = ("resolve", "launch", "serve", "tune")


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", LAUNCH_COMMANDS)
def test_the_default_help_is_short_and_ends_with_the_groups_and_how_to_list_one(capsys, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "100")
    out = _help(capsys, command, "--help")
    assert len(out.splitlines()) < 80  # was ~1,400: every flag of the catalog
    assert all(len(line) <= 100 for line in out.splitlines())  # examples too fit the terminal
    assert out.index("examples:") < out.index("options:") < out.index("llm flags by group")
    words = " ".join(out.split())
    assert f"`accord {command} --help GROUP` lists a group" in words
    assert f"`accord {command} --help all` every flag" in words
    assert "parallel (" in out and "--tp-size" not in out  # groups listed, their flags not


def test_why_after_its_flag_has_the_same_help_with_its_own_usage(capsys):
    out = _help(capsys, "why", "page_size", "--help")
    assert out.startswith("usage: accord why FLAG [FLAG ...]")
    assert out.index("examples:") < out.index("options:") < out.index("llm flags by group")


def test_the_group_sizes_add_up_to_the_catalog(capsys):
    out = _help(capsys, "resolve", "--help")
    listing = out[out.index("llm flags by group"):]
    total = len(entries(load_catalog("llm")))
    assert f", {total} in all:" in " ".join(listing.split())


def test_help_group_lists_that_group_with_the_flags_table(capsys):
    group = _help(capsys, "resolve", "--help", "parallel")
    assert group.startswith("usage: accord resolve") and "\nllm flags: parallel\n" in group
    assert "--tp-size, --tensor-parallel-size, --tp (short form)  [int]  (default 1; parallel)" in group
    assert main(["flags", "--group", "parallel"]) == 0  # the same table `accord flags` browses
    assert capsys.readouterr().out.strip() in group
    assert "llm flags: memory" not in group


def test_help_family_lists_each_group_of_the_family(capsys):
    out = _help(capsys, "launch", "--help", "exec")
    titles = [line for line in out.splitlines() if line.startswith("llm flags: ")]
    assert titles and all(t.startswith("llm flags: exec.") for t in titles)


def test_help_all_lists_every_flag_spelling(capsys):
    out = _help(capsys, "serve", "--help", "all")
    for entry in entries(load_catalog("llm")):
        assert entry["flags"][0] in out, entry["name"]


def test_help_follows_the_system_of_the_command_line(capsys):
    out = _help(capsys, "resolve", "--system", "diffusion", "--help")
    assert "diffusion flags by group" in out and "llm flags" not in out


def test_help_on_a_full_launch_command_is_still_the_short_help(capsys):
    out = _help(capsys, "resolve", "--facts", "h100", "--tp", "8", "-h")
    assert "llm flags by group" in out and "--tp-size" not in out


def test_an_unknown_group_is_a_usage_error_naming_the_groups(capsys):
    assert main(["resolve", "--help", "paralel"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("accord resolve: --help paralel: no llm flag group of that name; did you mean parallel?")
    assert "exec.moe" in err and len(err.strip().splitlines()) == 1


def test_the_help_examples_run_as_written(capsys):
    """Each command's examples come from rules/help.yaml; the resolve ones that need no files run."""
    out = _help(capsys, "resolve", "--help")
    examples = [line.strip().split("    (")[0] for line in out.splitlines() if line.startswith("  accord resolve ")]
    runnable = [e for e in examples if "--config" not in e and "--model-path" not in e]
    assert runnable
    for example in runnable:
        assert main(example.split()[1:]) in (0, 3), example  # 3: the example that shows a conflict
        capsys.readouterr()
