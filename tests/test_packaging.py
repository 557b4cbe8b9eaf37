"""Accord installs as one namespace, `accord`, and takes no generic top-level name from anyone.

Why: the four code folders used to install as top-level `resolver`, `rules`, `engine` and `kernels`.
Hugging Face's `kernels` distribution (which transformers imports) has the same name as ours, so
run from the repository root our folder shadowed it and `import transformers` failed. Now the
folders map to `accord.*`, and have no `__init__.py` of their own: run from the root they are at
most empty namespace portions, which any installed package of the same name beats.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("resolver", "rules", "engine", "kernels")


def _config() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_folder_with_python_code_is_a_listed_package():
    listed = set(_config()["packages"])
    folders = {p.parent for f in FOLDERS for p in (REPO / f).rglob("*.py") if "__pycache__" not in p.parts}
    wanted = {".".join(["accord", *folder.relative_to(REPO).parts]) for folder in folders}
    assert wanted - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - wanted == set(), "listed packages without Python code"


def test_each_folder_maps_into_the_accord_namespace():
    assert _config()["package-dir"] == {f"accord.{f}": f for f in FOLDERS}


@pytest.mark.parametrize("folder", FOLDERS)
def test_top_level_folders_are_not_regular_packages(folder):
    assert not (REPO / folder / "__init__.py").exists()


def _python(code: str, cwd: Path, extra_path: Path | None = None) -> str:
    env_path = [str(extra_path)] if extra_path else []
    done = subprocess.run([sys.executable, "-c", f"import sys; sys.path[1:1] = {env_path!r}\n{code}"],
                          cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_bare_names_are_not_accords_outside_the_repository(tmp_path):
    code = ("import importlib.util as u\n"
            f"for name in {FOLDERS!r}:\n"
            "    spec = u.find_spec(name)\n"
            "    print(name, spec.origin if spec else None)")
    ours = tuple(str(REPO / folder) for folder in FOLDERS)
    for line in _python(code, tmp_path).splitlines():
        name, origin = line.split(" ", 1)
        assert not origin.startswith(ours), f"{name} resolves to Accord's folder: {origin}"
    assert _python("import accord.resolver.api, accord.rules.paths; print('ok')", tmp_path) == "ok"


def test_an_installed_kernels_package_wins_over_the_folder_at_the_repository_root(tmp_path):
    other = tmp_path / "site" / "kernels"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("WHO = 'someone else'\n")
    out = _python("import kernels; print(kernels.WHO); import accord.kernels.rmsnorm as r; print(r.__name__)",
                  REPO, tmp_path / "site")
    assert out.splitlines() == ["someone else", "accord.kernels.rmsnorm"]
