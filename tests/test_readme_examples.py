"""The `$ accord ...` examples of the README and of its reference pages (docs/*.md) print what they show.

Why: the README and the page of each command are the first things a user runs, and an example that
drifted from the real output (a rule changed, a fix ranked differently) teaches the wrong thing.
Every example block that holds one `$ accord` command is run as written, as a reader would type it:
in an empty folder, offline, with an empty Hugging Face cache (tests/conftest.py), so the models it
names by hub id are read from Accord's built-in cards. Its output must equal the block, or, where the
block elides lines with `...`, contain every line it shows. Blocks with several
commands, an elided command, or a timed measurement (`--measure`, whose figures are this machine's)
are not run; each is named below with the reason.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"```[a-z]*\n(.*?)```", re.S)
LINK = re.compile(r"\]\(([^)#\s]+)\)")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _examples(page: Path) -> list[tuple[str, str]]:
    """(command, expected output) for each block of `page` that starts with one `$ accord` command."""
    found = []
    for block in BLOCK.findall(page.read_text()):
        lines = block.rstrip("\n").split("\n")
        if not lines[0].startswith("$ accord"):
            continue
        command, rest = [lines[0][2:]], lines[1:]
        while command[-1].endswith("\\"):
            command[-1] = command[-1][:-1]
            command.append(rest.pop(0).strip())
        found.append((" ".join(command), "\n".join(rest)))
    return found


def _not_run(command: str, expected: str) -> str | None:
    if "..." in command:
        return "the command itself is elided"
    if any(line.startswith("$ ") for line in expected.split("\n")):
        return "several commands in one block"
    if "--measure" in command:
        return "timed on the machine that ran it"
    return None


EXAMPLES = [(page.relative_to(ROOT).as_posix(), command, expected)
            for page in PAGES for command, expected in _examples(page)]


def test_the_readme_and_its_pages_have_examples_that_run():
    assert sum(1 for _, c, e in EXAMPLES if _not_run(c, e) is None) >= 8


def test_the_readme_links_every_reference_page_and_every_link_resolves():
    """The reference moved out of the README into docs/: each page must stay reachable from it, and
    a page's relative links (to the README, to other pages, to rules/README.md) must not dangle."""
    readme_links = set(LINK.findall((ROOT / "README.md").read_text()))
    assert {f"docs/{page.name}" for page in PAGES[1:]} <= readme_links
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.name} links to a missing {target}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """An empty folder: an example needs nothing of this repository beside the installed command."""
    return tmp_path_factory.mktemp("readme")


def _accord() -> list[str]:
    script = Path(sys.executable).parent / "accord"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "accord.resolver.cli"]


@pytest.mark.parametrize("command, expected", [pytest.param(c, e, id=f"{page}: {c[:70]}")
                                               for page, c, e in EXAMPLES if _not_run(c, e) is None])
def test_a_readme_example_prints_what_it_shows(workdir, command, expected):
    env = {**os.environ, "COLUMNS": "100"}  # the width the README's examples were printed at
    words = shlex.split(command)
    done = subprocess.run([*_accord(), *words[1:]], capture_output=True, text=True, env=env, cwd=workdir,
                          timeout=300)
    real = (done.stdout + done.stderr).rstrip("\n")
    if "..." in expected:
        missing = [line for line in expected.split("\n") if line.strip() and "..." not in line and line not in real]
        assert not missing, f"lines the page shows that `{command}` no longer prints: {missing}"
    else:
        assert real == expected.rstrip("\n"), f"`{command}` prints something else than the page shows"
