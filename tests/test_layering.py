"""The architecture as the imports state it: no cycles, commands on top, the engine on a narrow contract.

Why each rule:
- No import cycle between Accord's modules. A cycle makes import order matter (a half-initialised
  module), and it means two modules are one design split in two places (explain and fixes used to
  import each other).
- Libraries under resolver/ never import the command layer (resolver/commands/, the configurator).
  A library that imports a command drags argparse front ends and their printing into every API
  caller; commands sit on top of libraries, never the other way round.
- The engine imports from the resolver only the frozen-config contract and its errors. It starts
  from a resolved config and never re-decides; model files it shares with the resolver come from
  rules/models/, beside the data they describe.
- The resolver and the rules never import the engine or the kernels (they pull in torch and zmq),
  except `accord serve`, which starts the engine after resolving.

The checks read the source (imports anywhere in a module, including ones inside functions), so they
fail as soon as such an import is written.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("resolver", "rules", "engine", "kernels")
COMMAND_LAYER = ("accord.resolver.cli", "accord.resolver.commands", "accord.resolver.configurator")
ENGINE_CONTRACT = ("accord.resolver.frozen", "accord.resolver.errors")
ENGINE_STARTERS = ("accord.resolver.commands.serve",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["accord", *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for folder in FOLDERS for p in sorted((REPO / folder).rglob("*.py"))}


def _runtime_nodes(tree: ast.AST):
    """Every node except those under `if TYPE_CHECKING:` (imports for annotations never run)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def import_graph() -> nx.DiGraph:
    """Module -> the Accord modules it imports (a `from package import module` names the module)."""
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for target in _imports(path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph.add_edge(name, target)
    return graph


def test_no_import_cycles():
    cycles = sorted(sorted(c) for c in nx.simple_cycles(import_graph()))
    assert cycles == [], f"import cycles: {cycles}"


def test_libraries_do_not_import_commands():
    graph = import_graph()
    offenders = {m: sorted(t for t in graph.successors(m) if _within(t, COMMAND_LAYER))
                 for m in graph if m.startswith("accord.resolver.") and not _within(m, COMMAND_LAYER)}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_engine_imports_only_the_frozen_config_and_errors_from_the_resolver():
    graph = import_graph()
    offenders = {m: sorted(t for t in graph.successors(m)
                           if t.startswith("accord.resolver") and not _within(t, ENGINE_CONTRACT))
                 for m in graph if m.startswith(("accord.engine", "accord.kernels"))}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_resolver_and_rules_reach_the_engine_only_through_serve():
    graph = import_graph()
    offenders = {m: sorted(t for t in graph.successors(m) if t.startswith(("accord.engine", "accord.kernels")))
                 for m in graph if m.startswith(("accord.resolver", "accord.rules")) and m not in ENGINE_STARTERS}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_the_graph_sees_an_import_inside_a_function(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from accord.resolver.commands.resolve import main\n")
    assert "accord.resolver.commands.resolve" in _imports(sample)


def test_a_cycle_would_be_found():
    graph = import_graph()
    graph.add_edge("accord.resolver.language.expr", "accord.resolver.explaining.fixes")
    assert list(nx.simple_cycles(graph))
