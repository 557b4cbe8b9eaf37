"""The rows of an `accord matrix`: every legal row, or a greedy t-wise covering array of them.

A combination of axis values is *legal* when some legal row (one value per axis, resolved on its
preset and model) contains it. `all_rows` lists every legal row; `covering_rows` builds a greedy
covering array: each row starts from an uncovered legal t-tuple and takes, axis by axis, the value
covering the most uncovered t-tuples (then the preference ranking's fastest, then a seeded shuffle,
so a seed always gives the same matrix), backtracking when no value keeps the row completable.
Every legal t-tuple ends up in some row, and every emitted row is verified by a full resolve.
`minimal_illegal` finds the smallest combinations no legal row holds, for the report. Which rows
are legal is `matrix_space`'s question; this module only picks among them.
"""

from __future__ import annotations

import itertools
import random
import shlex
from typing import Any, Iterable, Iterator, Mapping

from accord.resolver.api import resolve
from accord.resolver.explaining.ranking import speed_rank
from accord.resolver.explaining.report import describe_value, flag_arg
from accord.resolver.exploring.matrix_axes import Axis, row_items
from accord.resolver.exploring.matrix_space import Space
from accord.resolver.solving.solve import Env


def _tuples(axes: list[Axis], t: int) -> Iterable[tuple]:
    """Every combination of t axis values: ((axis name, value), ...) in axis order."""
    for group in itertools.combinations(axes, t):
        for values in itertools.product(*(a.values for a in group)):
            yield tuple(zip((a.name for a in group), values))


def _tuples_of(row: Mapping[str, Any], t: int, axes: list[Axis], must: str | None = None) -> Iterator[tuple]:
    """The t-tuples a (partial) row covers, in the same axis order as `_tuples`."""
    names = [a.name for a in axes if a.name in row]
    for group in itertools.combinations(names, t):
        if must is None or must in group:
            yield tuple((n, row[n]) for n in group)


def _verify(space: Space, row: dict[str, Any]) -> dict[str, Any]:
    """Resolve the row for real, with its own context's facts; returns the row with its launch
    arguments (fixed flags and model path included) as a list (`argv`) and as one shell-quoted
    string (`args`), and the first 16 hex digits of its config hash."""
    user = space.user(row)
    config = resolve(space.system, user, space.facts(row), strict=space.strict)
    argv = [word for name, value in user.items() for word in launch_words(space.plan.catalog, name, value)]
    return {**row, "argv": argv, "args": shlex.join(argv), "hash": config.hash[:16]}


def launch_words(catalog, name: str, value: Any) -> list[str]:
    """The argv words that set `name` to `value` (none for an unset value or an unnegatable false)."""
    text = flag_arg(catalog, name, value)
    return [] if text.startswith("(omit ") else shlex.split(text)


def all_rows(space: Space, max_rows: int | None = None) -> list[dict[str, Any]]:
    """Every legal row, in the order of the axes' product."""
    found = itertools.islice(space.completions({}, space.axes), max_rows)
    index = {a.name: {describe_value(v): i for i, v in enumerate(a.values)} for a in space.axes}
    ordered = sorted(found, key=lambda row: [index[n][describe_value(v)] for n, v in row.items()])
    return [_verify(space, row) for row in ordered]


def covering_rows(space: Space, t: int, seed: int, max_rows: int | None,
                  respect_rules: bool = True) -> tuple[list[dict[str, Any]], set, set]:
    """Greedy t-wise covering array over the legal t-tuples (over all of them if not respect_rules:
    the unconstrained baseline a constrained matrix is compared with).

    Returns the rows (verified by a resolve when the rules are respected), the legal t-tuples and
    the covered ones. A start tuple without a legal completion is proved illegal by the search.
    """
    if not respect_rules and space.respect_rules:
        space = Space(space.system, space.presets, space.axes, space.fixed, respect_rules=False,
                      models=space.models)
    rng = random.Random(seed)
    every = list(_tuples(space.axes, t))
    order = {tp: i for i, tp in enumerate(every)}
    items = {tp: frozenset(row_items(dict(tp))) for tp in every}
    uncovered = set(every)
    legal: set = set()
    rows: list[dict[str, Any]] = []

    def rank(row: Mapping[str, Any], axis: Axis) -> list[Any]:
        # Most new coverage first; among equals, the preference ranking's fastest backend
        # (resolver/explaining/ranking.py), then the seeded shuffle.
        env = Env(space.plan, {}, space.facts(row), {}) if space.has_context(row) else None
        scored = []
        for value in axis.values:
            trial = {**row, axis.name: value}
            gain = sum(1 for tp in _tuples_of(trial, t, space.axes, axis.name) if tp in uncovered)
            speed = speed_rank(space.plan, axis.name, value, env) if env is not None else 0
            scored.append((-gain, speed, rng.random(), value))
        return [value for *_, value in sorted(scored, key=lambda s: s[:3])]

    learned = 0
    while uncovered and (max_rows is None or len(rows) < max_rows):
        start = min(uncovered, key=order.__getitem__)
        axis_order = list(space.axes)
        rng.shuffle(axis_order)
        row = next(space.completions(dict(start), axis_order, rank), None)
        for nogood in space.nogoods[learned:]:  # tuples holding a nogood are illegal: stop chasing them
            if len(nogood) <= t:  # a larger nogood is in no t-tuple
                uncovered -= {tp for tp in uncovered if nogood <= items[tp]}
        learned = len(space.nogoods)
        if row is None:
            uncovered.discard(start)  # no legal row holds it: illegal
            continue
        new = set(_tuples_of(row, t, space.axes))
        legal |= new
        uncovered -= new
        rows.append(_verify(space, row) if space.respect_rules else row)
    covered = set(legal)
    legal |= {tp for tp in uncovered if space.completable(tp)}  # left open by --max-rows
    return rows, legal, covered


def minimal_illegal(space: Space, t: int, rows: list[dict[str, Any]], complete: bool) -> list[tuple]:
    """Combinations of up to t values that no legal row holds and that hold no smaller such one.

    With full coverage every legal combination of up to t values appears in some row, so absence
    from the rows proves illegality; otherwise each absent one is searched for.
    """
    present = {tp for row in rows for size in range(1, t + 1) for tp in _tuples_of(row, size, space.axes)}
    found: list[tuple] = []
    known: set[frozenset] = set()
    for size in range(1, t + 1):
        for tp in _tuples(space.axes, size):
            if tp in present or any(frozenset(p) in known for k in range(1, size)
                                    for p in itertools.combinations(tp, k)):
                continue
            if complete or not space.completable(tp):
                found.append(tp)
                known.add(frozenset(tp))
    return found

