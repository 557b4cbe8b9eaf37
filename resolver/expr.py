"""The rule expression language: a small, safe subset of Python, parsed once and compiled to closures.

Rules say things like `enable_dp_attention and tp_size % dp_size != 0` or
`version(cuda) >= version('12.8') and gpu.sm in (100, 120)`. We parse the text with `ast`, accept
only the node types listed below, and turn the tree into nested closures, so evaluating a rule is a
few function calls and never `eval`.

Names: a bare name is a flag of the system; a dotted name (`gpu.sm`) and the bare names in
`TOP_LEVEL_FACTS` are facts. A fact that is absent from the fact set is *unknown*: reading it raises
`UnknownFact`, which the solver turns into "this rule could not be checked" instead of a guess.
`None` (an unset optional flag) is forgiving on purpose: ordering comparisons with None are false and
arithmetic with None gives None, so `chunked_prefill_size > 0` needs no None-guard. Division or
modulo by zero gives None too, so a zero size fails the rule that divides by it instead of crashing.
"""

from __future__ import annotations

import ast
import operator
import re
from typing import Any, Callable, Protocol

TOP_LEVEL_FACTS = frozenset({"platform", "cuda", "rocm", "torch", "engine"})


class UnknownFact(Exception):
    """Raised when an expression reads a fact that the fact set does not know."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


class ExpressionError(ValueError):
    """The expression text is not in the language (syntax, a forbidden node, an unknown function)."""


class Env(Protocol):
    def flag(self, name: str) -> Any: ...
    def fact(self, key: str) -> Any: ...
    def is_set(self, name: str) -> bool: ...
    def user_value(self, name: str) -> Any: ...
    def default(self, name: str) -> Any: ...


Compiled = Callable[[Env], Any]


def version(text: Any) -> tuple[int, ...] | None:
    """'12.8' -> (12, 8); '2.8.0+cu128' -> (2, 8, 0). None stays None (ordering with it is false)."""
    if text is None:
        return None
    parts = []
    for piece in str(text).split("+")[0].split("."):
        digits = re.match(r"\d*", piece).group()
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _pow2_floor(n: Any) -> Any:
    if n is None or n < 1:
        return n
    return 1 << (int(n).bit_length() - 1)


def _capped(items: Any, limit: Any) -> Any:
    """The items below `limit`, then `limit` itself: a list of sizes that ends exactly at its cap."""
    if items is None or limit is None:
        return items
    return [x for x in items if x < limit] + [limit]


def _skip_none(fn):
    def call(*args):
        values = [a for a in (args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args)
                  if a is not None]
        return fn(values) if values else None
    return call


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "version": version,
    "min": _skip_none(min),
    "max": _skip_none(max),
    "len": lambda x: 0 if x is None else len(x),
    "abs": lambda x: None if x is None else abs(x),
    "int": lambda x: None if x is None else int(x),
    "startswith": lambda s, p: isinstance(s, str) and s.startswith(p),
    "contains": lambda s, part: s is not None and part in s,
    "lower": lambda s: s.lower() if isinstance(s, str) else s,
    "pow2_floor": _pow2_floor,
    "range": lambda start, stop, step=1: list(range(int(start), int(stop), int(step))),
    "capped": _capped,
}
SPECIAL_FORMS = ("known", "is_set", "user_value", "user_changed")


def _ordered(op):
    def compare(a, b):
        if a is None or b is None:
            return False
        return op(a, b)
    return compare


def _arith(op):
    def apply(a, b):
        if a is None or b is None:
            return None
        try:
            return op(a, b)
        except ZeroDivisionError:
            return None  # `tp_size % ep_size == 0` with ep_size 0 is false, not a crash
    return apply


COMPARE_OPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
    ast.Lt: _ordered(operator.lt), ast.LtE: _ordered(operator.le),
    ast.Gt: _ordered(operator.gt), ast.GtE: _ordered(operator.ge),
    ast.In: lambda a, b: b is not None and a in b,
    ast.NotIn: lambda a, b: b is None or a not in b,
    ast.Is: operator.is_, ast.IsNot: operator.is_not,
}
BIN_OPS = {
    ast.Add: _arith(operator.add), ast.Sub: _arith(operator.sub), ast.Mult: _arith(operator.mul),
    ast.Div: _arith(operator.truediv), ast.FloorDiv: _arith(operator.floordiv),
    ast.Mod: _arith(operator.mod),
}


class Expr:
    """A parsed expression: its source, the flags and facts it reads, and its compiled closure."""

    __slots__ = ("source", "flags", "facts", "set_checks", "names", "tree", "_fn")

    def __init__(self, source: str, flags: frozenset[str], facts: frozenset[str], fn: Compiled,
                 set_checks: frozenset[str] = frozenset(), names: frozenset[str] = frozenset(),
                 tree: ast.AST | None = None):
        self.source = source
        self.flags = flags          # flags whose values it reads (through derived values too)
        self.facts = facts          # facts it reads (through derived values too)
        self.set_checks = set_checks  # flags it asks `is_set` about (known before solving)
        self.names = names          # derived values and named sets it reads by name
        self.tree = tree            # the validated tree (None for a YAML constant)
        self._fn = fn

    def __call__(self, env: Env) -> Any:
        return self._fn(env)

    def __repr__(self) -> str:
        return f"Expr({self.source!r})"


def parse(source: Any, names: dict[str, Expr] | None = None) -> Expr:
    """Parse an expression. YAML scalars (True, 3, 'fa3') are accepted as constant expressions.

    `names` maps derived values and named sets (rules/<system>/derived.yaml) to their parsed
    expressions. A name found there is read through its expression: the reader inherits the flags
    and facts it depends on, so the solver orders and checks it exactly as if it were written inline.
    """
    if not isinstance(source, str):
        value = source
        return Expr(repr(source), frozenset(), frozenset(), lambda env: value)
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as err:
        raise ExpressionError(f"cannot parse expression {source!r}: {err.msg}") from None
    compiler = _Compiler(source, names or {})
    fn = compiler.compile(tree.body)
    return Expr(source, frozenset(compiler.flags), frozenset(compiler.facts), fn,
                frozenset(compiler.set_checks), frozenset(compiler.names_read), tree.body)


def constant(name: str, value: Any) -> Expr:
    """A named constant (a named set) as an expression: reads nothing, always gives `value`."""
    return Expr(name, frozenset(), frozenset(), lambda env: value)


def dotted_name(node: ast.AST) -> str | None:
    """`gpu.sm` -> 'gpu.sm'; `packages.flash_attn` -> 'packages.flash_attn'; else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class _Compiler:
    def __init__(self, source: str, names: dict[str, Expr]):
        self.source = source
        self.names = names
        self.flags: set[str] = set()
        self.facts: set[str] = set()
        self.set_checks: set[str] = set()
        self.names_read: set[str] = set()

    def fail(self, what: str) -> ExpressionError:
        return ExpressionError(f"{what} is not allowed in rule expressions (in {self.source!r})")

    def compile(self, node: ast.AST) -> Compiled:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise self.fail(f"`{type(node).__name__}`")
        return method(node)

    def _Constant(self, node: ast.Constant) -> Compiled:
        value = node.value
        return lambda env: value

    def _name(self, name: str) -> Compiled:
        if any(part.startswith("_") for part in name.split(".")):
            raise self.fail(f"the private name `{name}`")
        named = self.names.get(name)
        if named is not None:
            self.names_read.add(name)
            self.names_read.update(named.names)
            self.flags.update(named.flags)
            self.facts.update(named.facts)
            self.set_checks.update(named.set_checks)
            return named._fn
        if "." in name or name in TOP_LEVEL_FACTS:
            self.facts.add(name)
            return lambda env: env.fact(name)
        self.flags.add(name)
        return lambda env: env.flag(name)

    def _Name(self, node: ast.Name) -> Compiled:
        if node.id in ("True", "False", "None"):
            value = {"True": True, "False": False, "None": None}[node.id]
            return lambda env: value
        return self._name(node.id)

    def _Attribute(self, node: ast.Attribute) -> Compiled:
        name = dotted_name(node)
        if name is None:
            raise self.fail("attribute access on an expression")
        return self._name(name)

    def _sequence(self, node) -> Compiled:
        items = [self.compile(elt) for elt in node.elts]
        # A list literal is a list (a default value may be a list flag's value); others are tuples.
        make = list if isinstance(node, ast.List) else tuple
        return lambda env: make(item(env) for item in items)

    _List = _Tuple = _Set = _sequence

    def _BoolOp(self, node: ast.BoolOp) -> Compiled:
        parts = [self.compile(v) for v in node.values]
        if isinstance(node.op, ast.And):
            if len(parts) == 2:
                a, b = parts
                return lambda env: bool(a(env)) and bool(b(env))
            return lambda env: all(bool(p(env)) for p in parts)
        if len(parts) == 2:
            a, b = parts
            return lambda env: bool(a(env)) or bool(b(env))
        return lambda env: any(bool(p(env)) for p in parts)

    def _UnaryOp(self, node: ast.UnaryOp) -> Compiled:
        operand = self.compile(node.operand)
        if isinstance(node.op, ast.Not):
            return lambda env: not operand(env)
        if isinstance(node.op, ast.USub):
            return lambda env: None if (v := operand(env)) is None else -v
        raise self.fail(f"unary `{type(node.op).__name__}`")

    def _BinOp(self, node: ast.BinOp) -> Compiled:
        op = BIN_OPS.get(type(node.op))
        if op is None:
            raise self.fail(f"operator `{type(node.op).__name__}`")
        left, right = self.compile(node.left), self.compile(node.right)
        return lambda env: op(left(env), right(env))

    def _Compare(self, node: ast.Compare) -> Compiled:
        ops = []
        for op in node.ops:
            fn = COMPARE_OPS.get(type(op))
            if fn is None:
                raise self.fail(f"comparison `{type(op).__name__}`")
            ops.append(fn)
        operands = [self.compile(node.left)] + [self.compile(c) for c in node.comparators]
        if len(ops) == 1:  # the common case, without the chain loop
            fn, left_fn, right_fn = ops[0], operands[0], operands[1]
            return lambda env: fn(left_fn(env), right_fn(env))

        def compare(env):
            left = operands[0](env)
            for fn, right_fn in zip(ops, operands[1:]):
                right = right_fn(env)
                if not fn(left, right):
                    return False
                left = right
            return True
        return compare

    def _IfExp(self, node: ast.IfExp) -> Compiled:
        test, body, orelse = self.compile(node.test), self.compile(node.body), self.compile(node.orelse)
        return lambda env: body(env) if test(env) else orelse(env)

    def _Call(self, node: ast.Call) -> Compiled:
        if not isinstance(node.func, ast.Name) or node.keywords:
            raise self.fail("this kind of call")
        name = node.func.id
        if name in SPECIAL_FORMS:
            return self._special(name, node)
        fn = FUNCTIONS.get(name)
        if fn is None:
            raise ExpressionError(
                f"unknown function {name}() in {self.source!r}; "
                f"available: {', '.join(sorted(FUNCTIONS) + list(SPECIAL_FORMS))}")
        args = [self.compile(a) for a in node.args]
        return lambda env: fn(*(a(env) for a in args))

    def _special(self, name: str, node: ast.Call) -> Compiled:
        target = dotted_name(node.args[0]) if len(node.args) == 1 else None
        if target is None:
            raise ExpressionError(f"{name}() takes one flag or fact name (in {self.source!r})")
        if name == "user_changed":
            return self._user_changed(target)
        if name in ("is_set", "user_value"):
            # What the user typed is fixed before solving: not a read of a resolved value, so no
            # dependency (a default may read the user's list of the flag it is derived from).
            if "." in target or target in TOP_LEVEL_FACTS:
                raise ExpressionError(f"{name}() takes a flag name, not {target!r} (in {self.source!r})")
            self.set_checks.add(target)
            if name == "is_set":
                return lambda env: env.is_set(target)
            return lambda env: env.user_value(target)
        read = self._name(target)

        def known(env):
            try:
                return read(env) is not None
            except UnknownFact:
                return False
        return known

    def _user_changed(self, target: str) -> Compiled:
        """`user_changed(x)`: the user gave flag x, or any flag of the named set x, a value other than
        its catalog default. Like is_set, it asks what the user typed, so it adds no dependency."""
        named = self.names.get(target)
        if named is not None:
            if named.flags or named.facts or named.set_checks:
                raise ExpressionError(f"user_changed() takes a flag or a named set of flags, not the "
                                      f"derived value {target!r} (in {self.source!r})")
            self.names_read.add(target)
            flags = tuple(named(None))
        elif "." in target or target in TOP_LEVEL_FACTS:
            raise ExpressionError(f"user_changed() takes a flag name, not {target!r} (in {self.source!r})")
        else:
            flags = (target,)
        self.set_checks.update(flags)
        return lambda env: any(env.is_set(f) and env.user_value(f) != env.default(f) for f in flags)
