"""What a compiled rule expression calls while it runs, and the contract of the Env it reads.

The code `expr_compiler` generates is a `lambda env: ...` over the helpers in `HELPERS` and nothing
else (no builtins). Each helper gives one construct the language's meaning where Python's differs:
None-forgiving ordering and arithmetic, functions that pass None through, `known()` that catches an
unknown fact. They live apart from the compiler because they are all that evaluation needs: an
expression loaded from the plan cache is linked to them without compiling anything.

`UnknownFact` is here too: an Env raises it for a fact the fact set lacks, the helpers of `known()`
catch it, and the solver turns it into "this rule could not be checked" instead of a guess.
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from typing import Any, Callable, Protocol


class UnknownFact(Exception):
    """Raised when an expression reads a fact that the fact set does not know."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


class Env(Protocol):
    def flag(self, name: str) -> Any: ...
    def fact(self, key: str) -> Any: ...
    def is_set(self, name: str) -> bool: ...
    def user_value(self, name: str) -> Any: ...
    def default(self, name: str) -> Any: ...


Compiled = Callable[[Env], Any]


# The functions a rule may call, by the name it calls them.

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


# Ordering and arithmetic: None-forgiving (ordering with None is false, arithmetic with None or a
# division by zero gives None).

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
            return None  # `size % parts == 0` with parts 0 is false, not a crash
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


# What the generated code calls by name (see HELPERS): negation, `known()` and `user_changed()`.

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


HELPERS: dict[str, Any] = {
    "__builtins__": {},
    "_neg": _neg, "_known_fact": _known_fact, "_known_flag": _known_flag, "_known_named": _known_named,
    "_user_changed": _user_changed,
    **{f"_f_{name}": fn for name, fn in FUNCTIONS.items()},
    **{f"_op_{op.__name__}": fn for op, fn in {**COMPARE_OPS, **BIN_OPS}.items()},
}
