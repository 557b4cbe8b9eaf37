"""The rule expression language: a small, safe subset of Python, parsed once and compiled to Python bytecode.

Rules say things like `enable_dp_attention and tp_size % dp_size != 0` or
`version(cuda) >= version('12.8') and gpu.sm in (100, 120)`. We parse the text with `ast`, accept
only the node types listed below, and rewrite the tree into a plain Python function over a few helper
functions (no builtins, no `eval` of the source), so evaluating a rule is one call.

Names: a bare name is a flag of the system; a dotted name (`gpu.sm`) and the bare names in
`TOP_LEVEL_FACTS` are facts. A fact that is absent from the fact set is *unknown*: reading it raises
`UnknownFact`, which the solver turns into "this rule could not be checked" instead of a guess.
`None` (an unset optional flag) is forgiving on purpose: ordering comparisons with None are false and
arithmetic with None gives None, so `chunked_prefill_size > 0` needs no None-guard. Division or
modulo by zero gives None too, so a zero size fails the rule that divides by it instead of crashing.

`meta(flag).prop` reads a property of the flag's current value from the catalog's choice metadata
(`choice_meta:` in the flag's entry), say `meta(kernel).vendor == 'acme'`. The table is
known when the expression is compiled, so the lookup becomes a few constant set-membership tests in
the generated code: it works on a solver decision like any read of the flag, and needs nothing
linked when the code is loaded from the plan cache.

This module is the language's front door: `parse` and the `Expr` it gives. Checking the tree and
generating code is `expr_compiler`; what the generated code calls at evaluation time (the functions,
the None-forgiving operators, `UnknownFact`) is `expr_runtime`.
"""

from __future__ import annotations

import ast
from types import CodeType, FunctionType
from typing import Any

from accord.resolver.language.expr_compiler import Compiler, ExpressionError, MetaTable, function_code
from accord.resolver.language.expr_runtime import HELPERS, Compiled, Env


class Expr:
    """A parsed expression: its source, the flags and facts it reads, and its compiled function.

    `names` holds the derived values and named sets it reads and its choice-metadata reads, the
    latter named `meta(flag).prop` (see `expr_compiler.meta_read`).

    The function is Python bytecode generated from the validated tree (see `expr_compiler.Compiler`), so a rule
    costs one call to evaluate and its code object can be stored in the plan cache with `marshal`.
    `tree` is the validated tree; an expression loaded from the cache parses its source again the
    first time something (lint, dry-run) asks for it.
    """

    __slots__ = ("source", "flags", "facts", "set_checks", "names", "_tree", "_fn", "code", "linked")

    def __init__(self, source: str, flags: frozenset[str], facts: frozenset[str], fn: Compiled,
                 set_checks: frozenset[str] = frozenset(), names: frozenset[str] = frozenset(),
                 tree: ast.AST | None = None, code: CodeType | None = None, linked: tuple[str, ...] = ()):
        self.source = source
        self.flags = flags          # flags whose values it reads (through derived values too)
        self.facts = facts          # facts it reads (through derived values too)
        self.set_checks = set_checks  # flags it asks `is_set` about (known before solving)
        self.names = names          # derived values, named sets and `meta(flag).prop` reads
        self._tree = tree           # the validated tree (None for a YAML constant)
        self._fn = fn
        self.code = code            # the compiled function's code (None: not generated code)
        self.linked = linked        # the names its code calls directly (linked again on loading)

    @property
    def tree(self) -> ast.AST | None:
        if self._tree is _UNPARSED:
            self._tree = ast.parse(self.source.strip(), mode="eval").body
        return self._tree

    def __call__(self, env: Env) -> Any:
        return self._fn(env)

    def __repr__(self) -> str:
        return f"Expr({self.source!r})"

    def to_data(self) -> tuple:
        """Plain data for the plan cache (strings, frozensets, a code object): see `from_data`."""
        if self.code is None:
            return ("constant", self.source, self._fn(None))
        return ("code", self.source, self.flags, self.facts, self.set_checks, self.names, self.linked, self.code)

    @classmethod
    def from_data(cls, data: tuple, names: dict[str, "Expr"]) -> "Expr":
        """The expression `to_data` stored, its code linked to the named values in `names`."""
        if data[0] == "constant":
            value = data[2]
            return cls(data[1], frozenset(), frozenset(), lambda env: value)
        _, source, flags, facts, set_checks, read, linked, code = data
        fn = FunctionType(code, _globals(linked, names))
        return cls(source, flags, facts, fn, set_checks, read, _UNPARSED, code, linked)


_UNPARSED: Any = object()  # a tree not parsed yet (an expression loaded from the plan cache)


def parse(source: Any, names: dict[str, Expr] | None = None,
          meta: dict[str, tuple[MetaTable, ...]] | None = None) -> Expr:
    """Parse an expression. YAML scalars (True, 3, 'fa3') are accepted as constant expressions.

    `names` maps derived values and named sets (rules/<system>/derived.yaml) to their parsed
    expressions. A name found there is read through its expression: the reader inherits the flags
    and facts it depends on, so the solver orders and checks it exactly as if it were written inline.
    `meta` maps flags to the properties of their choices (the catalog's `choice_meta`), which
    `meta(flag).prop` reads; a flag or property not in it is an error naming it.
    """
    if not isinstance(source, str):
        value = source
        return Expr(repr(source), frozenset(), frozenset(), lambda env: value)
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as err:
        raise ExpressionError(f"cannot parse expression {source!r}: {err.msg}") from None
    names = names or {}
    compiler = Compiler(source, names, meta or {})
    body = compiler.compile(tree.body)
    code = function_code(body, source)
    linked = tuple(sorted(compiler.linked))
    fn = FunctionType(code, _globals(linked, names))
    return Expr(source, frozenset(compiler.flags), frozenset(compiler.facts), fn,
                frozenset(compiler.set_checks), frozenset(compiler.names_read), tree.body, code, linked)


def constant(name: str, value: Any) -> Expr:
    """A named constant (a named set) as an expression: reads nothing, always gives `value`."""
    return Expr(name, frozenset(), frozenset(), lambda env: value)


def _globals(linked: tuple[str, ...], names: dict[str, Expr]) -> dict[str, Any]:
    if not linked:
        return HELPERS
    return {**HELPERS, "_named": {name: names[name]._fn for name in linked}}

