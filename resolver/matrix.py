"""`accord matrix`: CI matrices of legal configurations, for GPUs the CI owner may not have.

    accord matrix --system llm --facts h100,b200,mi300x --axes attention_backend,kv_cache_dtype \
                  --strategy pairwise --format github

The fact preset is always an axis (the `facts` column). Strategies:
- `all`: every legal combination (brute force, then filtered by the solver);
- `pairwise` / `3-wise`: a greedy covering array over the *legal* t-tuples: a t-tuple of axis values
  is legal when some configuration containing it resolves; each row starts from an uncovered tuple
  and takes, axis by axis, the value covering most uncovered tuples that keeps the row legal.
Every emitted row is verified by a full resolve. Illegal tuples are reported with the rules that
exclude them. Ties are broken by a seeded shuffle, so a seed always gives the same matrix.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import itertools
import json
import random
import shlex
from typing import Any, Iterable, Mapping

from resolver.api import ConflictError, plan_for, resolve
from resolver.catalog import SYSTEMS
from resolver.errors import UsageError
from resolver.explain import minimal_rules
from resolver.report import describe_value, flag_arg

FACTS_AXIS = "facts"
GITHUB_MAX_JOBS = 256
STRATEGIES = {"all": None, "pairwise": 2, "3-wise": 3}


@dataclasses.dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[Any, ...]


@dataclasses.dataclass
class Matrix:
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


class Space:
    """The axes, the fixed flags and the presets' facts; answers "is this partial row legal?"."""

    def __init__(self, system: str, presets: Mapping[str, Mapping[str, Any]], axes: list[Axis],
                 fixed: Mapping[str, Any]):
        self.system = system
        self.plan = plan_for(system)
        self.presets = presets
        self.axes = axes
        self.fixed = dict(fixed)
        self._memo: dict[tuple, bool] = {}

    def user(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.fixed, **{k: v for k, v in row.items() if k != FACTS_AXIS}}

    def legal(self, row: Mapping[str, Any]) -> bool:
        """Some configuration contains this partial row (on its preset, or on any preset if unset)."""
        key = tuple(sorted((k, describe_value(v)) for k, v in row.items()))
        if key not in self._memo:
            presets = [row[FACTS_AXIS]] if FACTS_AXIS in row else list(self.presets)
            self._memo[key] = any(self.plan.satisfiable(self.user(row), self.presets[p]) for p in presets)
        return self._memo[key]

    def excluding_rules(self, row: Mapping[str, Any]) -> list[str]:
        preset = row.get(FACTS_AXIS, next(iter(self.presets)))
        return [r.id for r in minimal_rules(self.plan, self.user(row), self.presets[preset])]


def _tuples(axes: list[Axis], t: int) -> Iterable[tuple[tuple[str, Any], ...]]:
    for group in itertools.combinations(axes, t):
        for values in itertools.product(*(a.values for a in group)):
            yield tuple(zip((a.name for a in group), values))


def _verify(space: Space, row: dict[str, Any]) -> dict[str, Any]:
    """Resolve the row for real; returns the row with its launch arguments."""
    config = resolve(space.system, space.user(row), space.presets[row[FACTS_AXIS]])
    args = " ".join(flag_arg(space.plan.catalog, k, v) for k, v in row.items() if k != FACTS_AXIS)
    return {**row, "args": args, "hash": config.hash[:16]}


def all_rows(space: Space) -> list[dict[str, Any]]:
    rows = []
    for values in itertools.product(*(a.values for a in space.axes)):
        row = dict(zip((a.name for a in space.axes), values))
        if space.legal(row):
            rows.append(_verify(space, row))
    return rows


def covering_rows(space: Space, t: int, seed: int, max_rows: int | None,
                  respect_rules: bool = True) -> tuple[list[dict[str, Any]], list, set, list]:
    """Greedy t-wise covering array over the legal t-tuples (or all tuples if not respect_rules).

    Returns the rows, the legal tuples, the covered ones and the illegal ones.
    """
    rng = random.Random(seed)
    every = list(_tuples(space.axes, t))
    verdict = {tp: not respect_rules or space.legal(dict(tp)) for tp in every}
    legal = [tp for tp in every if verdict[tp]]
    illegal = [tp for tp in every if not verdict[tp]]
    uncovered = set(legal)
    order = {tp: i for i, tp in enumerate(legal)}
    rows: list[dict[str, Any]] = []
    while uncovered and (max_rows is None or len(rows) < max_rows):
        start = min(uncovered, key=order.__getitem__)
        row = dict(start)
        rest = [a for a in space.axes if a.name not in row]
        rng.shuffle(rest)
        for axis in rest:
            gains = []
            for value in axis.values:
                trial = {**row, axis.name: value}
                gain = sum(1 for tp in _tuples_of(trial, t, space.axes, axis.name) if tp in uncovered)
                gains.append((-gain, rng.random(), value))
            for _, _, value in sorted(gains, key=lambda g: (g[0], g[1])):
                trial = {**row, axis.name: value}
                if not respect_rules or space.legal(trial):
                    row = trial
                    break
            else:
                break
        if len(row) < len(space.axes):
            uncovered.discard(start)  # legal alone but no legal completion found: skip it
            continue
        row = {a.name: row[a.name] for a in space.axes}
        uncovered -= set(_tuples_of(row, t, space.axes))
        rows.append(_verify(space, row) if respect_rules else row)
    return rows, legal, set(legal) - uncovered, illegal


def _tuples_of(row: Mapping[str, Any], t: int, axes: list[Axis], must: str | None = None):
    """The t-tuples a (partial) row covers, in the same axis order as `_tuples`."""
    names = [a.name for a in axes if a.name in row]
    for group in itertools.combinations(names, t):
        if must is None or must in group:
            yield tuple((n, row[n]) for n in group)


def _ordered_tuple(tp, axes: list[Axis]) -> tuple:
    index = {a.name: i for i, a in enumerate(axes)}
    return tuple(sorted(tp, key=lambda kv: index[kv[0]]))


def generate(system: str, presets: Mapping[str, Mapping[str, Any]], axes: list[Axis],
             fixed: Mapping[str, Any], strategy: str = "pairwise", max_rows: int | None = None,
             seed: int = 0) -> Matrix:
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}.")
    full_axes = [Axis(FACTS_AXIS, tuple(presets))] + list(axes)
    space = Space(system, presets, full_axes, fixed)
    t = STRATEGIES[strategy]
    if t is None:
        rows = all_rows(space)
        return Matrix(system, strategy, full_axes, rows[:max_rows] if max_rows else rows)
    t = min(t, len(full_axes))
    rows, legal, covered, illegal = covering_rows(space, t, seed, max_rows)
    illegal_report = [{"values": dict(_ordered_tuple(tp, full_axes)), "rules": space.excluding_rules(dict(tp))}
                      for tp in illegal]
    return Matrix(system, strategy, full_axes, rows, len(legal), len(covered), illegal_report)


# -- output -------------------------------------------------------------------------------

def render(matrix: Matrix, fmt: str) -> str:
    names = [a.name for a in matrix.axes]
    if fmt == "github":
        if len(matrix.rows) <= GITHUB_MAX_JOBS:
            return json.dumps({"include": matrix.rows}, sort_keys=True)
        shards = [matrix.rows[i:i + GITHUB_MAX_JOBS] for i in range(0, len(matrix.rows), GITHUB_MAX_JOBS)]
        return "\n".join(json.dumps({"shard": i, "of": len(shards), "include": rows}, sort_keys=True)
                         for i, rows in enumerate(shards))
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names + ["args"])
        for row in matrix.rows:
            writer.writerow([describe_value(row[n]) for n in names] + [row.get("args", "")])
        return out.getvalue().rstrip("\n")
    data = {"system": matrix.system, "strategy": matrix.strategy,
            "axes": {a.name: list(a.values) for a in matrix.axes}, "rows": matrix.rows}
    if matrix.strategy != "all":
        data["coverage"] = matrix.coverage()
        data["illegal"] = matrix.illegal
    if fmt == "yaml":
        import yaml
        return yaml.safe_dump(data, sort_keys=True).rstrip("\n")
    return json.dumps(data, indent=2, sort_keys=True)


def summary(matrix: Matrix) -> str:
    if matrix.strategy == "all":
        return f"{len(matrix.rows)} legal rows"
    cov = matrix.coverage()
    return (f"{len(matrix.rows)} rows; {matrix.strategy} coverage {cov['covered']}/{cov['legal']} legal tuples "
            f"({cov['percent']}%); {len(matrix.illegal)} illegal tuples excluded")


# -- command line -------------------------------------------------------------------------

def parse_axes(system: str, axes_text: str, values: list[str]) -> list[Axis]:
    plan = plan_for(system)
    explicit: dict[str, list[str]] = {}
    for item in values:
        name, sep, rest = item.partition("=")
        if not sep:
            raise UsageError(f"--values {item!r}: write FLAG=v1,v2,... (e.g. --values tp_size=1,2,4,8).")
        explicit[name.lstrip("-").replace("-", "_")] = rest.split(",")
    axes = []
    for raw in [a for a in axes_text.split(",") if a]:
        name = raw.lstrip("-").replace("-", "_")
        if name not in plan.catalog:
            import difflib
            hint = difflib.get_close_matches(name, plan.catalog.flags, n=1)
            raise UsageError(f"--axes names unknown {system} flag {raw!r}"
                             + (f"; did you mean {hint[0]}?" if hint else "."))
        flag = plan.catalog[name]
        if name in explicit:
            axis_values = [_typed(flag, v) for v in explicit[name]]
        elif flag.finite_domain is not None:
            axis_values = [v for v in flag.finite_domain if v is not None]
        else:
            raise UsageError(f"axis {name} ({flag.type}) has no finite set of values; give them with "
                             f"--values {name}=v1,v2,...")
        axes.append(Axis(name, tuple(axis_values)))
    if not axes:
        raise UsageError("--axes needs at least one flag, e.g. --axes attention_backend,kv_cache_dtype.")
    return axes


def _typed(flag, text: str) -> Any:
    try:
        if flag.type == "int":
            return int(text)
        if flag.type == "float":
            return float(text)
        if flag.type == "bool":
            return {"true": True, "false": False}[text.lower()]
    except (ValueError, KeyError):
        raise UsageError(f"--values: {text!r} is not a valid {flag.type} for {flag.name}.") from None
    if flag.choices and text not in [str(c) for c in flag.choices] and not flag.extensible:
        raise UsageError(f"--values: {text!r} is not one of {flag.name}'s values {list(flag.choices)}.")
    return text


def main(argv: list[str]) -> int:
    from resolver.facts import load_facts
    from resolver.flagparse import parse_flags

    parser = argparse.ArgumentParser(prog="accord matrix", allow_abbrev=False,
                                     description="Generate a CI matrix of legal configurations.")
    parser.add_argument("--system", choices=SYSTEMS, default="llm")
    parser.add_argument("--facts", required=True, help="comma-separated presets or files: h100,b200,...")
    parser.add_argument("--axes", required=True, help="comma-separated flags to vary")
    parser.add_argument("--values", action="append", default=[], metavar="FLAG=v1,v2",
                        help="values of an axis without a finite domain (repeatable)")
    parser.add_argument("--fix", default="", metavar="'FLAGS'", help="launch flags fixed in every row")
    parser.add_argument("--strategy", choices=list(STRATEGIES), default="pairwise")
    parser.add_argument("--max-rows", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", choices=("github", "json", "yaml", "csv"), default="json")
    try:
        opts = parser.parse_args(argv)
    except SystemExit as exit_:
        if exit_.code:
            raise UsageError("bad `accord matrix` arguments (see above); "
                             "e.g. accord matrix --facts h100,b200 --axes attention_backend") from None
        return 0
    _, fixed = parse_flags(shlex.split(opts.fix), system=opts.system)
    presets = {p: load_facts(p, system=opts.system) for p in opts.facts.split(",") if p}
    axes = parse_axes(opts.system, opts.axes, opts.values)
    try:
        matrix = generate(opts.system, presets, axes, fixed.values, opts.strategy, opts.max_rows, opts.seed)
    except ConflictError as err:
        raise UsageError(f"a generated row failed to resolve: {err}") from None
    print(render(matrix, opts.format))
    import sys
    note = summary(matrix)
    if opts.format == "github" and len(matrix.rows) > GITHUB_MAX_JOBS:
        note += f"; split into {-(-len(matrix.rows) // GITHUB_MAX_JOBS)} shards of <= {GITHUB_MAX_JOBS} jobs"
    print(note, file=sys.stderr)
    return 0
