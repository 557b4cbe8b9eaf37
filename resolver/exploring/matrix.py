"""`accord matrix`: CI matrices of legal configurations, for GPUs the CI owner may not have.

    accord matrix --system llm --facts h100,b200,mi300x --axes FLAG_A,FLAG_B \
                  --strategy pairwise --format github

The fact preset is always an axis (the `facts` column). Several models (`--model-path A,B`) make a
`model` axis: a row's model is its `--model-path`, and its facts are the preset's with that model's
facts on top, so each row is judged, and resolved again, with its own model. A combination of axis
values is *legal* when some legal row (one value per axis, resolved on its preset and model)
contains it. Strategies:
- `all`: every legal row;
- `pairwise` / `3-wise`: a greedy covering array: each row starts from an uncovered legal t-tuple
  and takes, axis by axis, the value covering the most uncovered t-tuples, backtracking when no
  value keeps the row completable. Every legal t-tuple ends up in some row.
Every emitted row is verified by a full resolve. The smallest illegal combinations (a value or a
pair no legal row contains) are reported with the rules that exclude them. Ties are broken by a
seeded random generator, so a seed always gives the same matrix.

This module is the entry point (`generate`, the `Matrix` it returns); the work is in
- `matrix_axes`: the axes and how `--axes` / `--values` name them;
- `matrix_space`: which (partial) rows are legal, settled exclusions and nogoods;
- `matrix_rows`: every legal row, the covering array, the smallest illegal combinations;
- `matrix_output`: the formats (GitHub, CSV, JSON, YAML), the workflow file, the summary.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from accord.resolver.errors import UsageError
from accord.resolver.exploring.matrix_axes import FACTS_AXIS, MODEL_AXIS, Axis
from accord.resolver.exploring.matrix_rows import all_rows, covering_rows, minimal_illegal
from accord.resolver.exploring.matrix_space import Space

STRATEGIES = {"all": None, "pairwise": 2, "3-wise": 3}


@dataclasses.dataclass
class Matrix:
    """A generated matrix: its axes (the context ones first), its rows (each resolved, with its
    `argv`, `args` and config `hash`) and, for a covering strategy, how many legal t-tuples the
    rows cover and the smallest illegal combinations with the rules that exclude them."""

    system: str
    strategy: str
    axes: list[Axis]
    rows: list[dict[str, Any]]
    legal_tuples: int = 0
    covered_tuples: int = 0
    illegal: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def coverage(self) -> dict[str, Any]:
        return {"legal": self.legal_tuples, "covered": self.covered_tuples,
                "percent": round(100.0 * self.covered_tuples / self.legal_tuples, 1) if self.legal_tuples else 100.0}


def generate(system: str, presets: Mapping[str, Mapping[str, Any]], axes: list[Axis],
             fixed: Mapping[str, Any], strategy: str = "pairwise", max_rows: int | None = None,
             seed: int = 0, models: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
             include_known_bad: bool = False) -> Matrix:
    """The matrix over the presets (and, given `models` = {model path: {preset: facts}}, a model
    axis) and the flag axes, with `fixed` flags in every row; known-bad runtime combinations are
    excluded from the rows unless `include_known_bad`."""
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}.")
    full_axes = [Axis(FACTS_AXIS, tuple(presets))] + ([Axis(MODEL_AXIS, tuple(models))] if models else [])
    full_axes += list(axes)
    space = Space(system, presets, full_axes, fixed, models=models, include_known_bad=include_known_bad)
    t = STRATEGIES[strategy]
    if t is None:
        return Matrix(system, strategy, full_axes, all_rows(space, max_rows))
    t = min(t, len(full_axes))
    rows, legal, covered = covering_rows(space, t, seed, max_rows)
    illegal = minimal_illegal(space, t, rows, complete=len(covered) == len(legal))
    report = [{"values": dict(tp), "rules": space.excluding_rules(tp)} for tp in illegal]
    return Matrix(system, strategy, full_axes, rows, len(legal), len(covered), report)
