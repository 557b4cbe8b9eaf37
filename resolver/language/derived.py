"""Derived values and named sets: the names rules read besides flags and facts (`rules/<system>/derived.yaml`).

A derived value is a hidden variable in the Kconfig sense (the first `value` whose `when` holds),
a named set a constant list of values. Both are parsed before any rule, because rule expressions
refer to them by name; a later name may read only earlier ones. Kept apart from rule loading
(`ruleset`) because the two files have different shapes and because the plan cache (`ruledata`)
rebuilds a derived value's single expression (`combine`) without reading YAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import RULES_DIR
from accord.resolver.language.expr import Expr, constant, parse
from accord.resolver.language.expr_compiler import ExpressionError
from accord.resolver.language.ruletypes import Derived, NamedSet
from accord.resolver.language.yamlcache import read_yaml_files

DERIVED_FILE = "derived.yaml"
DERIVED_TYPES = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,),
                 "list": (list, tuple)}


def parse_at(text: Any, where: str, names: dict[str, Expr] | None = None, meta: dict | None = None) -> Expr:
    """Parse one expression of a rule file; a malformed one is a UsageError that says `where` it is."""
    try:
        return parse(text, names, meta)
    except ExpressionError as err:
        raise UsageError(f"{where}: {err}") from None


def combine(name: str, cases: tuple[tuple[Expr, Expr | None], ...], reads: tuple | None = None) -> Expr:
    """One expression for a derived value: the first case whose condition holds, else None.
    `reads` (flags, facts, set checks, names) is what the plan cache stored of an earlier combine.

    The value is kept in the environment's `named_values` when it has one (the solver's `Env`): a
    derived value is read by many rules and by other derived values (the memory budget reads the
    per-GPU weight size in several cases), and without the memo each read evaluates its whole
    chain again. An environment gives every flag one value for its lifetime, so the memo is never
    stale; an unknown fact is not kept, and is met again by the next read."""
    pairs = [(value._fn, when._fn if when is not None else None) for value, when in cases]

    def evaluate(env):
        memo = getattr(env, "named_values", None)
        if memo is not None and name in memo:
            return memo[name]
        result = None
        for value, when in pairs:
            if when is None or when(env):
                result = value(env)
                break
        if memo is not None:
            memo[name] = result
        return result
    if reads is None:
        parts = [e for value, when in cases for e in (value, when) if e is not None]
        reads = tuple(frozenset().union(*(getattr(e, key) for e in parts))
                      for key in ("flags", "facts", "set_checks", "names"))
    flags, facts, set_checks, names = reads
    return Expr(name, flags, facts, evaluate, set_checks, names)


def _derived_from_yaml(entry: dict, names: dict[str, Expr], path: Path, meta: dict) -> Derived:
    did = entry.get("id")
    where = f"{path.name}: derived value {did!r}"
    if not did or not isinstance(did, str):
        raise UsageError(f"{path}: a derived value has no string 'id'; give each one a unique name.")
    unknown = sorted(set(entry) - {"id", "type", "values", "reason", "notes"})
    if unknown:
        raise UsageError(f"{where} has unknown keys {unknown}; allowed: id, type, values, reason, notes.")
    if entry.get("type") not in DERIVED_TYPES:
        raise UsageError(f"{where} has type {entry.get('type')!r}; use one of {', '.join(DERIVED_TYPES)}.")
    if not entry.get("reason"):
        raise UsageError(f"{where} has no 'reason': say in one line what it means.")
    raw = entry.get("values")
    if not isinstance(raw, list) or not raw or not all(isinstance(c, dict) and "value" in c for c in raw):
        raise UsageError(f"{where}: 'values' must be a list of {{value: ..., when: ...}} pairs.")
    if any("when" not in c for c in raw[:-1]) or any(set(c) - {"value", "when"} for c in raw):
        raise UsageError(f"{where}: every pair but the last needs a 'when' (the last may be the "
                         f"fallback), and a pair has only 'value' and 'when'.")
    cases = tuple((parse_at(c["value"], where, names, meta),
                   parse_at(c["when"], where, names, meta) if "when" in c else None) for c in raw)
    return Derived(id=did, type=entry["type"], cases=cases, reason=str(entry["reason"]),
                   notes=str(entry.get("notes") or ""), expr=combine(did, cases))


def load_derived(system: str, root: Path = RULES_DIR,
                 meta: dict | None = None) -> tuple[tuple[Derived, ...], tuple[NamedSet, ...]]:
    """Named sets and derived values of a system, in file order (a name reads only earlier names).
    `meta` is the catalog's choice metadata (`Catalog.choice_metadata`), which `meta(flag).p` reads."""
    path = root / system / DERIVED_FILE
    if not path.exists():
        return (), ()
    documents = read_yaml_files([path])[0]
    doc = documents[0] if documents else {}
    names: dict[str, Expr] = {}
    sets: list[NamedSet] = []
    derived: list[Derived] = []
    for entry in doc.get("sets") or ():
        sid, values = entry.get("id"), entry.get("values")
        if not sid or not isinstance(values, list) or not entry.get("reason"):
            raise UsageError(f"{path.name}: named set {sid!r} needs an 'id', a 'values' list and a 'reason'.")
        if sid in names:
            raise UsageError(f"{path.name}: the name {sid!r} is defined twice.")
        sets.append(NamedSet(sid, tuple(values), str(entry["reason"])))
        names[sid] = constant(sid, tuple(values))
    for entry in doc.get("derived") or ():
        item = _derived_from_yaml(entry, names, path, meta or {})
        if item.id in names:
            raise UsageError(f"{path.name}: the name {item.id!r} is defined twice.")
        derived.append(item)
        names[item.id] = item.expr
    return tuple(derived), tuple(sets)
