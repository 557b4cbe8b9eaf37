"""Text output fits the terminal: value tables and the dry run keep to COLUMNS, long lists are
shortened with a count, warnings go to stderr, color only on a terminal."""

from __future__ import annotations

import io

import pytest

from accord.resolver import cli
from accord.resolver.explaining import layout
from accord.resolver.explaining.proof import wants_color
from accord.resolver.language.catalog import RULES_DIR

LLAMA = str(RULES_DIR / "models" / "tiny-llama")


def _run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("columns", (80, 60, 40))
def test_resolve_table_fits_columns(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = _run(capsys, "resolve", "--facts", "h100", "--model-path", LLAMA, "--tp", "2",
                        "--served-model-name", "a served model name much longer than any table column " * 2)
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= columns
    assert "+" in out and "more]" in out  # the 35 CUDA-graph batch sizes, shortened with a count
    assert "much longer" in out  # long text wraps, it is not cut


def test_shortened_list_says_how_many_items_it_left_out():
    items = [str(i) for i in range(100)]
    text = layout.shorten_list(items, 30)
    assert len(text) <= 30
    shown = text.strip("[]").split(", ")[:-1]
    assert shown == items[:len(shown)] and text.endswith(f"+{100 - len(shown)} more]")


def test_dry_run_fits_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = _run(capsys, "resolve", "--facts", "h100", "--dry-run", "--flag", "attention_backend")
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "excluded" in out and "attn.vendor.ascend" in out


def test_warnings_go_to_stderr_not_into_the_table(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = _run(capsys, "resolve", "--facts", "h100", "--disable-cuda-graph")
    assert code == 0
    assert "warning" not in out
    assert "--disable-cuda-graph is deprecated" in " ".join(err.split())
    assert max(len(line) for line in err.splitlines()) <= 80


def test_color_only_on_a_terminal(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert wants_color(Tty()) and not wants_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_color(Tty())


def test_conflicts_printed_to_a_pipe_have_no_escape_codes(capsys):
    code, out, err = _run(capsys, "resolve", "--facts", "h100", "--tp-size", "16")
    assert code == 3
    assert "\x1b[" not in out + err
