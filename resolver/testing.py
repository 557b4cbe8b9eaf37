"""Parametrize a test suite over an Accord matrix: every row is a legal, resolved configuration.

    from resolver.testing import matrix_params

    @pytest.mark.parametrize("row", matrix_params("llm", ["h100", "b200"],
                                                  ["attention_backend", "kv_cache_dtype"]))
    def test_kernel_config(row):
        ...   # row == {"facts": "h100", "attention_backend": "fa3", ..., "args": "...", "hash": "..."}
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def matrix_params(system: str, presets: Sequence[str], axes: Sequence[str],
                  fix: Mapping[str, Any] | None = None, strategy: str = "pairwise", seed: int = 0,
                  values: Mapping[str, Sequence[Any]] | None = None, max_rows: int | None = None) -> list:
    """pytest.param objects, one per matrix row, with readable ids (`h100-fa3-auto`)."""
    import pytest

    from resolver.facts import load_facts
    from resolver.matrix import Axis, generate, parse_axes

    values = values or {}
    axis_list = [Axis(name, tuple(values[name])) if name in values else parse_axes(system, name, [])[0]
                 for name in axes]
    facts = {p: load_facts(p, system=system) for p in presets}
    matrix = generate(system, facts, axis_list, dict(fix or {}), strategy, max_rows, seed)
    names = [a.name for a in matrix.axes]
    return [pytest.param(row, id="-".join(str(row[n]) for n in names)) for row in matrix.rows]
