"""Parametrize a test suite over an Accord matrix: every row is a legal, resolved configuration.

    from accord.resolver.exploring.testing import matrix_params

    @pytest.mark.parametrize("row", matrix_params("llm", ["h100", "b200"],
                                                  ["attention_backend", "kv_cache_dtype"],
                                                  models=["/models/DeepSeek-V3", "/models/Llama-3.1-70B"]))
    def test_kernel_config(row):
        ...   # row == {"facts": "h100", "model": "...", "attention_backend": "fa3", ...,
              #         "argv": ["--model-path", ...], "args": "...", "hash": "..."}

Or, without code, over a matrix file written by `accord matrix` (the pytest plugin in
`accord.resolver.exploring.pytest_plugin`): `pytest --accord-matrix matrix.json` runs every test that takes an
`accord_row` argument once per row (`matrix_rows` reads the file).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

ROW_EXTRAS = ("argv", "args", "hash", "name")   # what a row carries besides its axis values


def matrix_params(system: str, presets: Sequence[str], axes: Sequence[str],
                  fix: Mapping[str, Any] | None = None, strategy: str = "pairwise", seed: int = 0,
                  values: Mapping[str, Sequence[Any]] | None = None, max_rows: int | None = None,
                  models: Sequence[str] | None = None) -> list:
    """pytest.param objects, one per matrix row, with readable ids (`h100-fa3-auto`).

    `models` are model paths: one is fixed in every row (its facts decide legality), several make
    a `model` axis; a `model_path` in `fix` works like one model.
    """
    import pytest

    from accord.resolver.exploring.matrix import generate
    from accord.resolver.exploring.matrix_axes import MODEL_FLAG, Axis, parse_axes
    from accord.resolver.facts.machine import load_facts

    values = values or {}
    fixed = dict(fix or {})
    models = list(dict.fromkeys(models or ([fixed[MODEL_FLAG]] if fixed.get(MODEL_FLAG) else [])))
    if len(models) == 1:
        fixed[MODEL_FLAG] = models[0]
    single = models[0] if len(models) == 1 else None
    facts = {p: load_facts(p, model_path=single, system=system) for p in presets}
    per_model = ({m: {p: load_facts(p, model_path=m, system=system) for p in presets} for m in models}
                 if len(models) > 1 else None)
    every = list(facts.values()) if per_model is None else [f for by in per_model.values() for f in by.values()]
    axis_list = [Axis(name, tuple(values[name])) if name in values else parse_axes(system, name, [], every)[0]
                 for name in axes]
    matrix = generate(system, facts, axis_list, fixed, strategy, max_rows, seed, models=per_model)
    names = [a.name for a in matrix.axes]
    return [pytest.param(row, id=row_id(row, names)) for row in matrix.rows]


def row_id(row: Mapping[str, Any], names: Sequence[str] | None = None) -> str:
    """`h100-DeepSeek-V3-fa3-auto`: the row's axis values (a model by the last part of its path)."""
    names = names if names is not None else [k for k in row if k not in ROW_EXTRAS]
    words = []
    for name in names:
        value = row[name]
        words.append(Path(value.rstrip("/")).name or value if name == "model" and isinstance(value, str)
                     else json.dumps(value) if isinstance(value, (list, dict)) else str(value))
    return "-".join(words)


def matrix_rows(path: str) -> tuple[list[str], list[dict[str, Any]]]:
    """(axis names, rows) of a matrix file from `accord matrix`: `--format json` or `yaml` (the
    `rows` list with its `axes`), or `--format github` (`{"include": [...]}`, one object per line
    when sharded). Raises UsageError naming what is wrong with the file."""
    from accord.resolver.errors import UsageError

    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"--accord-matrix {path}: cannot read the matrix file ({err}); write it with "
                         f"`accord matrix ... > {file.name}`.") from None
    docs = _documents(text, file.suffix)
    if docs is None:
        raise UsageError(f"--accord-matrix {path}: not the JSON or YAML output of `accord matrix`; write it "
                         "with `accord matrix ... --format json` (or github, yaml).")
    rows: list[dict[str, Any]] = []
    axes: list[str] | None = None
    for doc in docs:
        if isinstance(doc.get("axes"), dict):
            axes = list(doc["axes"])
        rows.extend(doc.get("rows") or doc.get("include") or [])
    if not rows or not all(isinstance(r, dict) for r in rows):
        raise UsageError(f"--accord-matrix {path}: the file holds no matrix rows; regenerate it with "
                         "`accord matrix ... --format json`.")
    return axes or [k for k in rows[0] if k not in ROW_EXTRAS], rows


def _documents(text: str, suffix: str) -> list[dict] | None:
    """The JSON objects of a matrix file (a sharded github file has one per line), or YAML's."""
    try:
        doc = json.loads(text)
        return [doc] if isinstance(doc, dict) else None
    except json.JSONDecodeError:
        pass
    try:
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        if lines and all(isinstance(d, dict) for d in lines):
            return lines
    except json.JSONDecodeError:
        pass
    if suffix in (".yaml", ".yml"):
        import yaml
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            return None
        return [doc] if isinstance(doc, dict) else None
    return None
