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
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from types import CodeType, FunctionType
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
    if type(text) is str:
        return _version_of_text(text)
    return _version_of_text(str(text))


@functools.lru_cache(maxsize=512)
def _version_of_text(text: str) -> tuple[int, ...]:
    """`version` of a string; cached, since a launch compares the same few versions many times."""
    parts = []
    for piece in text.split("+")[0].split("."):
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
    "round": lambda x, digits=0: None if x is None else round(x, int(digits)),  # Python's (half-even) rounding
    "int": lambda x: None if x is None else int(x),
    "startswith": lambda s, p: isinstance(s, str) and s.startswith(p),
    "contains": lambda s, part: s is not None and part in s,
    "lower": lambda s: s.lower() if isinstance(s, str) else s,
    "pow2_floor": _pow2_floor,
    "range": lambda start, stop, step=1: list(range(int(start), int(stop), int(step))),
    "capped": _capped,
}
SPECIAL_FORMS = ("known", "is_set", "user_value", "user_changed")
META = "meta"  # `meta(flag).property`: a property of the flag's value, from the catalog's choice metadata
_META_NAME = re.compile(r"meta\((\w+)\)\.(\w+)")


def meta_name(flag: str, prop: str) -> str:
    """How a metadata read is named among an expression's `names` and in proofs: `meta(flag).prop`."""
    return f"{META}({flag}).{prop}"


def meta_read(name: str) -> tuple[str, str] | None:
    """`meta(kernel).vendor` -> ('kernel', 'vendor'); any other name -> None."""
    found = _META_NAME.fullmatch(name)
    return (found.group(1), found.group(2)) if found else None


class MetaTable(Protocol):
    """One property of a flag's choices (accord.resolver.language.catalog.MetaProperty): its name, the value of a
    choice that does not give it, and (choice, value) pairs."""
    name: str
    default: Any
    values: tuple[tuple[Any, Any], ...]


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
    """A parsed expression: its source, the flags and facts it reads, and its compiled function.

    `names` holds the derived values and named sets it reads and its choice-metadata reads, the
    latter named `meta(flag).prop` (see `meta_read`).

    The function is Python bytecode generated from the validated tree (see `_Compiler`), so a rule
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
    compiler = _Compiler(source, names, meta or {})
    body = compiler.compile(tree.body)
    code = _function_code(body, source)
    linked = tuple(sorted(compiler.linked))
    fn = FunctionType(code, _globals(linked, names))
    return Expr(source, frozenset(compiler.flags), frozenset(compiler.facts), fn,
                frozenset(compiler.set_checks), frozenset(compiler.names_read), tree.body, code, linked)


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


# -- code generation ----------------------------------------------------------------------------------
# The generated code is a `lambda env: ...` over these helpers and nothing else (no builtins). Each
# helper gives one construct the language's meaning where Python's differs: None-forgiving ordering
# and arithmetic, `and`/`or` that give True or False, `known()` that catches an unknown fact.

def _neg(value: Any) -> Any:
    return None if value is None else -value


def _known_fact(env: Env, key: str) -> bool:
    try:
        return env.fact(key) is not None
    except UnknownFact:
        return False


def _known_flag(env: Env, name: str) -> bool:
    try:
        return env.flag(name) is not None
    except UnknownFact:
        return False


def _user_changed(env: Env, flags: tuple[str, ...]) -> bool:
    return any(env.is_set(f) and env.user_value(f) != env.default(f) for f in flags)


def _known_named(env: Env, fn: Compiled) -> bool:
    try:
        return fn(env) is not None
    except UnknownFact:
        return False


_HELPERS: dict[str, Any] = {
    "__builtins__": {},
    "_neg": _neg, "_known_fact": _known_fact, "_known_flag": _known_flag, "_known_named": _known_named,
    "_user_changed": _user_changed,
    **{f"_f_{name}": fn for name, fn in FUNCTIONS.items()},
    **{f"_op_{op.__name__}": fn for op, fn in {**COMPARE_OPS, **BIN_OPS}.items()},
}
# Operators whose Python meaning is already the language's: written as themselves, not as calls.
_NATIVE_COMPARE = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)


def _globals(linked: tuple[str, ...], names: dict[str, Expr]) -> dict[str, Any]:
    if not linked:
        return _HELPERS
    return {**_HELPERS, "_named": {name: names[name]._fn for name in linked}}


def _function_code(body: ast.expr, source: str) -> CodeType:
    """Bytecode of `lambda env: BODY`, compiled by Python itself."""
    args = ast.arguments(posonlyargs=[], args=[ast.arg("env")], kwonlyargs=[], kw_defaults=[], defaults=[])
    tree = ast.fix_missing_locations(ast.Expression(ast.Lambda(args, body)))
    module = compile(tree, "<rule expression>", "eval")
    return next(c for c in module.co_consts if isinstance(c, CodeType))


_NOT_FOLDED = object()


def _foldable(value: Any) -> bool:
    """A value a code object can hold as a constant (so never a list, which is mutable)."""
    if value is None or type(value) in (bool, int, float, str):
        return True
    return type(value) is tuple and all(_foldable(v) for v in value)


def _load(name: str) -> ast.Name:
    return ast.Name(name, ast.Load())


def _call(fn: ast.expr, *args: ast.expr) -> ast.Call:
    return ast.Call(fn, list(args), [])


def _env_call(method: str, arg: str) -> ast.Call:
    return _call(ast.Attribute(_load("env"), method, ast.Load()), ast.Constant(arg))


def _as_bool(test: ast.expr) -> ast.IfExp:
    """`True if TEST else False`: the truth value as a bool, TEST evaluated once."""
    return ast.IfExp(test, ast.Constant(True), ast.Constant(False))


class _Compiler:
    """Validates the parsed tree and rewrites it into the generated function's body (a Python tree)."""

    def __init__(self, source: str, names: dict[str, Expr], meta: dict[str, tuple[MetaTable, ...]]):
        self.source = source
        self.names = names
        self.meta = meta
        self.flags: set[str] = set()
        self.facts: set[str] = set()
        self.set_checks: set[str] = set()
        self.names_read: set[str] = set()
        self.linked: set[str] = set()
        self.temps = 0

    def fail(self, what: str) -> ExpressionError:
        return ExpressionError(f"{what} is not allowed in rule expressions (in {self.source!r})")

    def compile(self, node: ast.AST) -> ast.expr:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise self.fail(f"`{type(node).__name__}`")
        return method(node)

    def _Constant(self, node: ast.Constant) -> ast.expr:
        return ast.Constant(node.value)

    def _read(self, name: str) -> tuple[str, Any]:
        """What a name is: ("named", its expression), ("fact", key) or ("flag", name)."""
        if any(part.startswith("_") for part in name.split(".")):
            raise self.fail(f"the private name `{name}`")
        named = self.names.get(name)
        if named is not None:
            self.names_read.add(name)
            self.names_read.update(named.names)
            self.flags.update(named.flags)
            self.facts.update(named.facts)
            self.set_checks.update(named.set_checks)
            self.linked.add(name)
            return "named", name
        if "." in name or name in TOP_LEVEL_FACTS:
            self.facts.add(name)
            return "fact", name
        self.flags.add(name)
        return "flag", name

    def _named(self, name: str) -> ast.Subscript:
        return ast.Subscript(_load("_named"), ast.Constant(name), ast.Load())

    def _name(self, name: str) -> ast.expr:
        kind, key = self._read(name)
        if kind == "named":
            return _call(self._named(key), _load("env"))
        return _env_call(kind, key)

    def _Name(self, node: ast.Name) -> ast.expr:
        if node.id in ("True", "False", "None"):
            return ast.Constant({"True": True, "False": False, "None": None}[node.id])
        return self._name(node.id)

    def _Attribute(self, node: ast.Attribute) -> ast.expr:
        call = node.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == META:
            return self._meta(call, node.attr)
        name = dotted_name(node)
        if name is None:
            raise self.fail("attribute access on an expression")
        return self._name(name)

    def _meta(self, call: ast.Call, prop: str) -> ast.expr:
        """`meta(flag).prop`: the property of the flag's value, as constant membership tests
        (`V1 if (_t := flag) in {choices with V1} else V2 if _t in {...} else DEFAULT`)."""
        arg = call.args[0] if len(call.args) == 1 and not call.keywords else None
        flag = arg.id if isinstance(arg, ast.Name) else None
        if flag is None or flag in TOP_LEVEL_FACTS or flag in self.names:
            raise ExpressionError(f"{META}() takes one flag name, as in {META}(kernel).vendor "
                                  f"(in {self.source!r})")
        table = self.meta.get(flag)
        if not table:
            having = ", ".join(sorted(self.meta)) or "none"
            raise ExpressionError(f"{META}({flag}): flag {flag!r} has no choice metadata (flags with it: "
                                  f"{having}); declare `choice_meta:` in its catalog entry (in {self.source!r})")
        found = next((p for p in table if p.name == prop), None)
        if found is None:
            raise ExpressionError(f"{META}({flag}).{prop}: flag {flag!r} has no property {prop!r}; its "
                                  f"properties: {', '.join(p.name for p in table)} (in {self.source!r})")
        self.names_read.add(meta_name(flag, prop))
        value = self._name(flag)
        groups: dict[Any, list] = {}
        for choice, given in found.values:
            if given != found.default:
                groups.setdefault(given, []).append(choice)
        if not groups:
            return ast.Constant(found.default)
        self.temps += 1
        temp = f"_t{self.temps}"
        body: ast.expr = ast.Constant(found.default)
        items = list(groups.items())
        for i in range(len(items) - 1, -1, -1):
            given, choices = items[i]
            subject = ast.NamedExpr(ast.Name(temp, ast.Store()), value) if i == 0 else _load(temp)
            test = ast.Compare(subject, [ast.In()], [ast.Constant(frozenset(choices))])
            body = ast.IfExp(test, ast.Constant(given), body)
        return body

    def _List(self, node: ast.List) -> ast.expr:
        # A list literal is a list (a default value may be a list flag's value); others are tuples.
        return ast.List([self.compile(elt) for elt in node.elts], ast.Load())

    def _Tuple(self, node: ast.Tuple | ast.Set) -> ast.expr:
        return ast.Tuple([self.compile(elt) for elt in node.elts], ast.Load())

    _Set = _Tuple

    def _BoolOp(self, node: ast.BoolOp) -> ast.expr:
        op = ast.And() if isinstance(node.op, ast.And) else ast.Or()
        return _as_bool(ast.BoolOp(op, [self.compile(v) for v in node.values]))

    def _UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        operand = self.compile(node.operand)
        if isinstance(node.op, ast.Not):
            return ast.UnaryOp(ast.Not(), operand)
        if isinstance(node.op, ast.USub):
            return _call(_load("_neg"), operand)
        raise self.fail(f"unary `{type(node.op).__name__}`")

    def _BinOp(self, node: ast.BinOp) -> ast.expr:
        if type(node.op) not in BIN_OPS:
            raise self.fail(f"operator `{type(node.op).__name__}`")
        return _call(_load(f"_op_{type(node.op).__name__}"), self.compile(node.left), self.compile(node.right))

    def _compare(self, op: ast.cmpop, left: ast.expr, right: ast.expr) -> ast.expr:
        if isinstance(op, _NATIVE_COMPARE):
            return ast.Compare(left, [type(op)()], [right])
        return _call(_load(f"_op_{type(op).__name__}"), left, right)

    def _Compare(self, node: ast.Compare) -> ast.expr:
        for op in node.ops:
            if type(op) not in COMPARE_OPS:
                raise self.fail(f"comparison `{type(op).__name__}`")
        operands = [self.compile(node.left)] + [self.compile(c) for c in node.comparators]
        if len(node.ops) == 1:  # the common case
            return self._compare(node.ops[0], operands[0], operands[1])
        # A chain `a < b < c`: each operand evaluated once, in order, stopping at the first false link.
        temps = []
        for operand in operands[1:-1]:
            self.temps += 1
            temps.append((f"_t{self.temps}", operand))
        links = []
        left = operands[0]
        for i, op in enumerate(node.ops):
            if i < len(temps):
                name, value = temps[i]
                links.append(self._compare(op, left, ast.NamedExpr(ast.Name(name, ast.Store()), value)))
                left = _load(name)
            else:
                links.append(self._compare(op, left, operands[-1]))
        return _as_bool(ast.BoolOp(ast.And(), links))

    def _IfExp(self, node: ast.IfExp) -> ast.expr:
        return ast.IfExp(self.compile(node.test), self.compile(node.body), self.compile(node.orelse))

    def _Call(self, node: ast.Call) -> ast.expr:
        if not isinstance(node.func, ast.Name) or node.keywords:
            raise self.fail("this kind of call")
        name = node.func.id
        if name == META:
            raise ExpressionError(f"{META}() reads a property of a flag's value: write "
                                  f"{META}(flag).property, as in {META}(kernel).vendor (in {self.source!r})")
        if name in SPECIAL_FORMS:
            return self._special(name, node)
        if name not in FUNCTIONS:
            raise ExpressionError(
                f"unknown function {name}() in {self.source!r}; "
                f"available: {', '.join(sorted(FUNCTIONS) + list(SPECIAL_FORMS))}")
        args = [self.compile(a) for a in node.args]
        if all(isinstance(a, ast.Constant) for a in args):  # `version('12.8')`: computed once, here
            try:
                value = FUNCTIONS[name](*(a.value for a in args))
            except Exception:  # noqa: BLE001 (the same error will then come at evaluation)
                value = _NOT_FOLDED
            if _foldable(value):
                return ast.Constant(value)
        return _call(_load(f"_f_{name}"), *args)

    def _special(self, name: str, node: ast.Call) -> ast.expr:
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
            return _env_call(name, target)
        kind, key = self._read(target)
        if kind == "named":
            return _call(_load("_known_named"), _load("env"), self._named(key))
        return _call(_load(f"_known_{kind}"), _load("env"), ast.Constant(key))

    def _user_changed(self, target: str) -> ast.expr:
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
        return _call(_load("_user_changed"), _load("env"), ast.Constant(tuple(flags)))
