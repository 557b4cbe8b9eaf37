"""Libraries under resolver/ never import the command layer (resolver/commands/, resolver/cli.py).

Why: a library that imports a command drags argparse front ends and their printing into every API
caller, and makes import cycles (dry-run and `accord resolve` used to import each other). Commands
sit on top of libraries, never the other way round. The check reads the source (imports anywhere in
a module, including ones inside functions), so it fails as soon as such an import is written.
"""

from __future__ import annotations

import ast
from pathlib import Path

import resolver
from resolver.cli import COMMANDS

ROOT = Path(resolver.__file__).parent
# The command layer: the `accord` entry point, the commands package, and every module `accord`
# dispatches a subcommand to (a few, such as `accord flags`, still live at the top level).
COMMAND_MODULES = ("resolver.commands", "resolver.cli", *sorted({m for m, _ in COMMANDS.values()}))


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _is_command(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in COMMAND_MODULES)


def test_libraries_do_not_import_commands():
    offenders = {}
    for path in sorted(ROOT.glob("*.py")):
        if _is_command(f"resolver.{path.stem}"):
            continue
        bad = sorted(n for n in _imports(path) if _is_command(n))
        if bad:
            offenders[path.name] = bad
    assert offenders == {}, f"library modules import the command layer: {offenders}"


def test_the_check_sees_a_command_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from resolver.commands.resolve import print_conflict\n")
    assert any(_is_command(n) for n in _imports(sample))
