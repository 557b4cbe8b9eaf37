"""The rule graph (networkx): flags, facts and rules as nodes; who reads and who sets what as edges.

It serves lint (cycles among defaults) and export (`accord rules --graph dot|json`). The solver
itself does not need networkx at resolve time: it evaluates defaults lazily, which follows the same
edges, so a cold `accord resolve` never imports it.
"""

from __future__ import annotations

import json

import networkx as nx

from accord.resolver.language.catalog import Catalog
from accord.resolver.language.ruletypes import RuleSet


def flag_node(name: str) -> str:
    return f"flag:{name}"


def fact_node(key: str) -> str:
    return f"fact:{key}"


def rule_node(rid: str) -> str:
    return f"rule:{rid}"


def build_graph(catalog: Catalog, ruleset: RuleSet) -> nx.DiGraph:
    """Edges: flag/fact -> rule that reads it; rule -> flag it sets (default/prefer rules)."""
    graph = nx.DiGraph()
    for flag in catalog:
        graph.add_node(flag_node(flag.name), kind="flag", group=flag.group)
    for rule in ruleset:
        rnode = rule_node(rule.id)
        graph.add_node(rnode, kind="rule", rule_kind=rule.kind, area=rule.area)
        for name in sorted(rule.reads_flags):
            graph.add_edge(flag_node(name), rnode)
        for key in sorted(rule.reads_facts):
            graph.add_node(fact_node(key), kind="fact")
            graph.add_edge(fact_node(key), rnode)
        if rule.flag:
            graph.add_edge(rnode, flag_node(rule.flag))
    return graph


def export(graph: nx.DiGraph, fmt: str) -> str:
    """The graph as Graphviz dot or node-link JSON, with nodes and edges in sorted order."""
    nodes = sorted(graph.nodes)
    edges = sorted(graph.edges)
    if fmt == "json":
        return json.dumps({
            "nodes": [{"id": n, **dict(sorted(graph.nodes[n].items()))} for n in nodes],
            "edges": [{"source": a, "target": b} for a, b in edges],
        }, indent=2, sort_keys=True)
    shapes = {"flag": "box", "fact": "ellipse", "rule": "diamond"}
    lines = ["digraph accord {", "  rankdir=LR;"]
    for n in nodes:
        lines.append(f'  "{n}" [shape={shapes[graph.nodes[n].get("kind", "flag")]}];')
    for a, b in edges:
        lines.append(f'  "{a}" -> "{b}";')
    lines.append("}")
    return "\n".join(lines)
