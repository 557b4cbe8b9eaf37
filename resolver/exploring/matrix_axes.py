"""The axes of an `accord matrix` and how a row's values are compared.

An axis is a flag (or a context: the fact preset, the model) and the values the matrix tries for
it. This module reads them from the command line (`--axes`, `--values`), with the catalog's
choices, the dry run's candidates or the values the rules name when no values are given, and
spells a row's values comparably (list values are not hashable). It is separate because parsing
what to vary has nothing to do with the search over it (`matrix_space`, `matrix_rows`).
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Mapping, Sequence

from accord.resolver.api import plan_for
from accord.resolver.commandline.flagvalues import BadValue, convert_text, usage_error
from accord.resolver.errors import UsageError
from accord.resolver.explaining.report import describe_value
from accord.resolver.exploring.dryrun import CANDIDATE_TYPES, candidate_values, mentioned_values

FACTS_AXIS = "facts"
MODEL_AXIS = "model"
CONTEXT_AXES = (FACTS_AXIS, MODEL_AXIS)   # they pick the facts a row is judged with; not flags
MODEL_FLAG = "model_path"


@dataclasses.dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[Any, ...]


def row_items(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A row's (axis, value) pairs with each value spelled as text, so lists compare and hash."""
    return [(k, describe_value(v)) for k, v in row.items()]


def row_key(row: Mapping[str, Any]) -> tuple:
    """A row as a hashable key, whatever order its axes were set in."""
    return tuple(sorted(row_items(row)))


def parse_axes(system: str, axes_text: str, values: list[str],
               facts: Sequence[Mapping[str, Any]] = ()) -> list[Axis]:
    """`--axes a,b` (flag names or spellings) with `--values a=v1,v2` overriding an axis' values.

    An axis without explicit values takes its catalog choices; an integer or list flag its
    candidate set over every fact set of the matrix (`accord.resolver.exploring.dryrun.candidate_values`: the
    solver then keeps, per row, only the legal ones); an open string flag the values the rules
    name (as the dry run does).
    """
    plan = plan_for(system)
    explicit: dict[str, list[str]] = {}
    for item in values:
        name, sep, rest = item.partition("=")
        if not sep or not rest:
            raise UsageError(f"--values {item!r}: write FLAG=v1,v2,... (e.g. --values tp_size=1,2,4,8).")
        explicit[_flag_name(plan, name, "--values")] = rest.split(",")
    axes: list[Axis] = []
    for raw in [a for a in axes_text.split(",") if a.strip()]:
        name = _flag_name(plan, raw.strip(), "--axes")
        flag = plan.catalog[name]
        if name in explicit:
            axis_values = [_typed(flag, v) for v in explicit.pop(name)]
        elif flag.finite_domain is not None:
            axis_values = [v for v in flag.finite_domain if v is not None]
        elif flag.type in CANDIDATE_TYPES:
            axis_values = candidate_values(plan, name, facts)
        else:
            axis_values = sorted(mentioned_values(plan, name), key=str)
        if not axis_values:
            raise UsageError(f"--axes {raw}: {name} ({flag.type}) has no finite set of values; list the "
                             f"ones to try with --values {name}=v1,v2,...")
        if name in [a.name for a in axes]:
            raise UsageError(f"--axes names {name} twice; list each flag once.")
        unique = {describe_value(v): v for v in axis_values}  # list values are not hashable
        axes.append(Axis(name, tuple(unique.values())))
    if explicit:
        raise UsageError(f"--values gives values for {', '.join(sorted(explicit))}, which --axes does not "
                         "list; add it to --axes or drop the --values.")
    if not axes:
        raise UsageError("--axes needs at least one flag, e.g. --axes attention_backend,kv_cache_dtype.")
    return axes


def _flag_name(plan, raw: str, option: str) -> str:
    """A flag name from a name or an option spelling (`kv-cache-dtype`, `--kv-cache-dtype`)."""
    name = raw.strip().lstrip("-").replace("-", "_")
    if name in plan.catalog:
        return name
    hint = difflib.get_close_matches(name, list(plan.catalog.flags), n=1)
    raise UsageError(f"{option} names unknown {plan.catalog.system} flag {raw!r}"
                     + (f"; did you mean {hint[0]}?" if hint else f"; see `accord flags --system {plan.catalog.system}`."))


def _typed(flag, text: str) -> Any:
    """A `--values` word as the flag's type, checked the way the launch parser checks it."""
    try:
        value, _ = convert_text(flag, text)
    except BadValue as err:
        raise usage_error(flag.primary, text, err, prefix="--values: ") from None
    return value
