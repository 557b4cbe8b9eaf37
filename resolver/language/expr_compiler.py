"""Checking a rule expression and generating its code: the safe subset of Python, enforced.

The parsed tree is walked once. Each node type the language allows has a method here that both
validates it and rewrites it into the generated function's body; a node without one is refused, so
the language is exactly the methods of `Compiler`. On the way the compiler records what the
expression reads (flags, facts, `is_set` checks, derived values, `meta(flag).prop` reads), which the
solver uses to order and check rules. It is separate from `expr_runtime` because a rule is compiled
once, when its text is read (or never, when the plan cache holds its code), while the runtime helpers
are what every evaluation calls.
"""

from __future__ import annotations

import ast
import re
from types import CodeType
from typing import Any, Protocol

from accord.resolver.language.expr_runtime import BIN_OPS, COMPARE_OPS, FUNCTIONS

TOP_LEVEL_FACTS = frozenset({"platform", "cuda", "rocm", "torch", "engine"})


class ExpressionError(ValueError):
    """The expression text is not in the language (syntax, a forbidden node, an unknown function)."""


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


class Named(Protocol):
    """A derived value or named set an expression may read (an `expr.Expr`): what it reads in turn,
    and its value (a named set's value needs no Env)."""
    flags: frozenset[str]
    facts: frozenset[str]
    set_checks: frozenset[str]
    names: frozenset[str]

    def __call__(self, env: Any) -> Any: ...


def dotted_name(node: ast.AST) -> str | None:
    """`gpu.sm` -> 'gpu.sm'; `packages.flash_attn` -> 'packages.flash_attn'; else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


# -- code generation -------------------------------------------------------------------------------
# Operators whose Python meaning is already the language's: written as themselves, not as calls.
_NATIVE_COMPARE = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)


def function_code(body: ast.expr, source: str) -> CodeType:
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


class Compiler:
    """Validates the parsed tree and rewrites it into the generated function's body (a Python tree)."""

    def __init__(self, source: str, names: dict[str, Named], meta: dict[str, tuple[MetaTable, ...]]):
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
