"""Explaining an unsatisfiable launch: minimal conflicts, and the values their proofs read.

A conflict is *minimal*: the user values and hard rules it names are together unsatisfiable, and
dropping any one of them makes the rest satisfiable. We find it with QuickXplain
(resolver/solving/quickxplain.py), and every check is cheap because facts and user values are
constants. The rules of a conflict are a launch's own question (`Launch.minimal_rules`,
resolver/solving/launch.py), answered from what the nearby commands' solves found; the fewest
user values are found here.

Fixes (fixes.py) build on these cores; diagnose.py puts the two together into the conflicts a
report shows.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any, Iterable, Mapping

from accord.resolver.explaining.report import describe_value
from accord.resolver.language.expr import Expr
from accord.resolver.language.expr_compiler import dotted_name, meta_read
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.ruletypes import Derived, Rule
from accord.resolver.solving.quickxplain import quickxplain
from accord.resolver.solving.solve import Env, Plan


def minimal_flags(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                  rules: list[Rule] | None = None) -> list[str]:
    """A minimal set of user values that is unsatisfiable under `rules` (in catalog order)."""
    names = sorted(user, key=plan.order.get)
    core = quickxplain(names, lambda subset: not plan.satisfiable({k: user[k] for k in subset}, facts, rules))
    return sorted(core, key=plan.order.get)


@dataclasses.dataclass(frozen=True)
class DerivedReading:
    """A derived value in an explanation: its name, its value here, and the values of the names its
    own definition reads (facts, flags, other derived values), so a reader can check it by hand."""

    name: str
    value: Any
    reads: tuple[tuple[str, Any], ...]
    when: str | None = None          # the condition of the case that decided, when there are several

    def line(self) -> str:
        """`sm100 = false because gpu.sm = 90, platform = cuda`."""
        text = f"{self.name} = {describe_value(self.value)}"
        if self.when:
            text += f" (when {self.when})"
        if self.reads:
            text += " because " + ", ".join(f"{k} = {describe_value(v)}" for k, v in self.reads)
        return text

    def to_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "when": self.when, "reads": dict(self.reads)}


def _own_names(item: Derived) -> list[str]:
    """The names a derived value's own cases write (not those read through other names)."""
    exprs = [e for case in item.cases for e in case if e is not None and e.tree is not None]
    readable = set().union(*(e.flags | e.facts | e.names for e in exprs)) if exprs else set()
    found: set[str] = set()
    for expr in exprs:
        for node in ast.walk(expr.tree):
            name = dotted_name(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
            if name in readable:
                found.add(name)
    return sorted(found)


def _derived_by_name(plan: Plan) -> dict[str, Derived]:
    """The rule set's derived values by name (kept by its cache layer: a dry run asks ~100 times)."""
    return plan.cache.lookup("derived_by_name", (), lambda: {d.id: d for d in plan.ruleset.derived}, 1)


def _names_read(plan: Plan, item: Derived) -> list[str]:
    """`_own_names` less the named sets (constants), kept per rule set and derived value."""
    def make() -> list[str]:
        sets = {s.id for s in plan.ruleset.sets}
        return [n for n in _own_names(item) if n not in sets]
    return plan.cache.lookup("derived_names", item.id, make, 4096)


def _read(env: Env, plan: Plan, name: str, derived: Mapping[str, Derived]) -> Any:
    try:
        if name in derived:
            return derived[name].expr(env)
        if "." in name or name not in plan.catalog:
            return env.fact(name)
        return env.flag(name)
    except UnknownFact as missing:
        return f"unknown (needs {missing.key})"


def _meta_reading(plan: Plan, env: Env, name: str, derived: Mapping[str, Derived]) -> DerivedReading:
    """`meta(kernel).vendor = acme because kernel = k1`: a choice-metadata
    read, with the flag value it looked up."""
    flag, prop = meta_read(name)
    value = _read(env, plan, flag, derived)
    return DerivedReading(name, plan.catalog[flag].meta_property(prop).of(value), ((flag, value),))


def derived_readings(plan: Plan, exprs: Iterable[Expr | None], env: Env) -> list[DerivedReading]:
    """The derived values and choice-metadata reads (`meta(flag).prop`) that `exprs` make, directly
    or through each other, in name order, each with its value in `env`. Named sets are constants and
    are left out. Dry-run and the conflict reports call this too, so every explanation shows the
    same names with the same values."""
    derived = _derived_by_name(plan)
    names = sorted({n for e in exprs if e is not None for n in e.names if n in derived or meta_read(n)})
    readings = []
    for name in names:
        if name not in derived:
            readings.append(_meta_reading(plan, env, name, derived))
            continue
        item = derived[name]
        try:
            case = item.deciding_case(env)
        except UnknownFact:
            case = None
        when = item.cases[case][1] if case is not None and len(item.cases) > 1 else None
        readings.append(DerivedReading(name, _read(env, plan, name, derived),
                                       tuple((n, _read(env, plan, n, derived)) for n in _names_read(plan, item)),
                                       " ".join(when.source.split()) if when is not None else None))
    return readings


def mentioned_values(plan: Plan, name: str) -> set[Any]:
    """Constants the rules and derived values compare flag `name` with, offer it or assign it.

    `name == 'a'`, `name in ('a', 'b')`, `name in some_named_set` and `'a' in name` all name
    a value of `name`, in a rule or in a derived value a rule reads, so naming a fragment in
    derived.yaml hides no value from a dry run; `meta(name).prop` names every value the choice
    metadata describes. Read from the parsed trees, never the source text.
    """
    sets = {s.id: s.values for s in plan.ruleset.sets}
    found: set[Any] = set()
    exprs: list[Expr] = []
    for rule in plan.ruleset:
        if rule.flag == name:
            found.update(c.value for c in rule.values)
            if rule.value is not None:
                found.update(_constant_of(rule.value))
        found.update(v for flag, expr in rule.fix if flag == name for v in _constant_of(expr))
        exprs += [e for e in (rule.when, rule.require) if e is not None]
    exprs += [e for d in plan.ruleset.derived for case in d.cases for e in case if e is not None]
    for expr in exprs:
        if expr.tree is not None and name in expr.flags:
            found.update(_compared(expr.tree, name, sets))
        if any(meta_read(n) and meta_read(n)[0] == name for n in expr.names):
            # `meta(name).prop` asks about every value its choice metadata describes
            found.update(choice for prop in plan.catalog[name].choice_meta for choice, _ in prop.values)
    return {v for v in found if isinstance(v, (str, int, float, tuple)) and not isinstance(v, bool)}


def _constant_of(expr: Expr) -> list[Any]:
    """The value of a constant expression (`'fa'`, a YAML scalar), or nothing if it computes one."""
    try:
        value = ast.literal_eval(expr.tree) if expr.tree is not None else expr(None)
    except (ValueError, TypeError, SyntaxError):
        return []
    if isinstance(value, list):
        value = tuple(value)  # a list constant (a list flag's value), kept hashable
    return [value] if isinstance(value, (str, int, float, tuple)) else []


def _compared(tree: ast.AST, name: str, sets: Mapping[str, tuple]) -> list[Any]:
    """`name == 'a'`, `name in ('a', 'b')`, `name in a_named_set`, `'a' in name` and
    `'a' in (name, other)` each name a value of `name`."""
    def is_name(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id == name

    def elements(node: ast.AST) -> list[ast.AST]:
        return list(node.elts) if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else []

    values: list[Any] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:]):
            if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                continue
            for mine, other in ((left, right), (right, left)):
                if is_name(mine) and isinstance(other, ast.Name) and other.id in sets:
                    values += list(sets[other.id])
                elif is_name(mine):
                    values += [item.value for item in elements(other) or [other] if isinstance(item, ast.Constant)]
                elif isinstance(other, ast.Constant) and any(is_name(item) for item in elements(mine)):
                    values.append(other.value)
    return values
