"""Turning one flag value, as typed on the command line or written in a config file, into data.

Both the argparse actions and the `--config` loader go through here, so a value means the same
thing wherever it comes from and a bad one gets the same message: which flag, which value, and
what would have been legal. Nothing here knows argparse.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import Flag

# The seed's human-readable integers: lower-case suffixes count in thousands and allow a fraction
# ("25.6k" is 25600), upper-case suffixes count in powers of 1024 and do not ("1K" is 1024).
_DECIMAL_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY_SUFFIX = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kmgtKMGT])")
# No float setting of either server means anything near this; beyond it products overflow.
_LARGEST_FLOAT_SETTING = 1e15


class BadValue(ValueError):
    """A value that does not fit a flag; `expected` says what would have (e.g. "an integer")."""

    def __init__(self, expected: str, hint: str = ""):
        super().__init__(expected)
        self.expected = expected
        self.hint = hint


def parse_human_int(text: str) -> int:
    """Read "32768", "32k" (32000), "32K" (32768) or "1.5m" (1500000) as an integer."""
    text = text.strip()
    match = _HUMAN_INT.fullmatch(text)
    if not match:
        return int(text)
    number, suffix = match.groups()
    if suffix in _BINARY_SUFFIX:
        if "." in number:
            hint = f"A fraction needs a decimal suffix: did you mean {number}{suffix.lower()}?"
            raise BadValue(_expected_int(True), hint)
        return int(number) * _BINARY_SUFFIX[suffix]
    import decimal  # a decimal suffix only ("1.5m"); most launches never write one

    return int(decimal.Decimal(number) * _DECIMAL_SUFFIX[suffix])


def _expected_int(human: bool) -> str:
    if human:
        return "an integer, optionally with a suffix k/m/g/t (x1000) or K/M/G/T (x1024), e.g. 32k"
    return "an integer"


def describe_expected(flag: Flag) -> str:
    """What a flag accepts, in words, for error messages and `accord flags`."""
    kind = _element_kind(flag)
    if flag.choices:
        return "one of: " + ", ".join(str(c) for c in flag.choices)
    return {
        "int": _expected_int(flag.human_int),
        "float": "a number",
        "bool": "true or false",
        "json": "JSON text",
        "json_or_str": "a string or a JSON object",
    }.get(kind, "a string")


def _element_kind(flag: Flag) -> str:
    if flag.type == "list":
        return flag.element or "str"
    return flag.type


def _choice_type(flag: Flag) -> type:
    """Choice lists of integers (e.g. --log-requests-level 0..3) compare as integers."""
    if flag.choices and all(isinstance(c, int) and not isinstance(c, bool) for c in flag.choices):
        return int
    return str


def convert_text(flag: Flag, text: str, extra_choices: tuple[str, ...] = ()) -> tuple[Any, list[str]]:
    """One command-line word for `flag` (one element, for list flags) -> (value, warnings).

    `extra_choices` are values the user declared with `--extend-choices` for a list that plugins
    may extend; nothing else outside a choice list is accepted. An empty value is refused unless it
    is the flag's own default (a text flag that is empty until set, such as a root path).
    """
    kind = _element_kind(flag)
    if not text.strip() and kind not in ("bool", "json", "json_or_str") and text != flag.default:
        raise BadValue(f"a non-empty value ({describe_expected(flag)})",
                       "Give a value, or leave the flag out to keep its default.")
    try:
        if kind == "int":
            return (parse_human_int(text) if flag.human_int else int(text)), []
        if kind == "float":
            return _finite(float(text)), []
        if kind == "bool":
            return _parse_bool(text), []
        if kind == "json":
            return json.loads(text), []
        if kind == "json_or_str":
            return (json.loads(text) if text.lstrip().startswith("{") else text), []
        alias = dict(flag.value_aliases).get(text)
        if alias is not None:  # another name of the same value: stored under its canonical name, said so
            return alias, [f"{flag.primary} {text} is another name for {alias}; it resolves as {alias}."]
        if kind == "enum" or flag.choices:
            return _check_choice(flag, _choice_type(flag)(text), extra_choices)
        if flag.format == "json":
            json.loads(text)
        return text, []
    except BadValue:
        raise
    except json.JSONDecodeError as err:
        raise BadValue(f"JSON text ({err.msg} at column {err.colno})") from None
    except ValueError:
        raise BadValue(describe_expected(flag), _close_choice(flag, text)) from None


def convert_data(flag: Flag, value: Any, extra_choices: tuple[str, ...] = ()) -> tuple[Any, list[str]]:
    """A value read from a YAML/JSON config file -> (typed value, warnings).

    Text goes through the command-line conversion (so "32k" and "8" work); numbers, booleans,
    lists and mappings must already have the flag's type.
    """
    if value is None:
        if flag.nullable:
            return None, []
        raise BadValue(describe_expected(flag), "This flag has no 'unset' value; remove the key instead.")
    if flag.type == "list":
        items = value if isinstance(value, list) else [value]
        converted, warnings = [], []
        for item in items:
            one, notes = _convert_scalar_data(flag, item, extra_choices)
            converted.append(one)
            warnings.extend(notes)
        return converted, warnings
    if flag.type == "json":
        return convert_text(flag, value) if isinstance(value, str) else (value, [])
    if isinstance(value, dict) and takes_mapping(flag):
        return _component_map(flag, value), []
    return _convert_scalar_data(flag, value, extra_choices)


def takes_mapping(flag: Flag) -> bool:
    """JSON flags, and text flags whose seed default is a parsed map (diffusion's per-component
    settings, `{}` until given): a config file may write either as a nested mapping."""
    return flag.type == "json" or (flag.type == "str" and isinstance(flag.default, dict))


def _component_map(flag: Flag, value: dict) -> dict:
    """A map-valued text flag read as data: a flat mapping of names to text values."""
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise BadValue(f"a mapping of names to text values (e.g. {{text_encoder: torch_sdpa}}) for {flag.primary}")
    return dict(value)


def _convert_scalar_data(flag: Flag, value: Any, extra_choices: tuple[str, ...] = ()) -> tuple[Any, list[str]]:
    kind = _element_kind(flag)
    if isinstance(value, str):
        return convert_text(flag, value, extra_choices)
    if isinstance(value, (dict, list)) and kind != "json_or_str":
        raise BadValue(describe_expected(flag))
    if kind == "bool":
        if isinstance(value, bool):
            return value, []
        raise BadValue(describe_expected(flag))
    if isinstance(value, bool):
        raise BadValue(describe_expected(flag))
    if kind == "int" and isinstance(value, int):
        return value, []
    if kind == "float" and isinstance(value, (int, float)):
        return _finite(float(value)), []
    if kind in ("str", "json_or_str"):
        return (value if isinstance(value, dict) else str(value)), []
    if kind == "enum" or flag.choices:
        return _check_choice(flag, value, extra_choices)
    raise BadValue(describe_expected(flag))


def _finite(value: float) -> float:
    """NaN and infinities are never a meaningful setting (and 1e308 overflows every product)."""
    if not math.isfinite(value) or abs(value) > _LARGEST_FLOAT_SETTING:
        raise BadValue(f"a finite number of reasonable size (at most {_LARGEST_FLOAT_SETTING:g})")
    return value


def _parse_bool(text: str) -> bool:
    """The seed's StoreBoolean words: true or false, in any case."""
    word = text.strip().lower()
    if word not in ("true", "false"):
        raise BadValue("true or false")
    return word == "true"


def _check_choice(flag: Flag, value: Any, extra_choices: tuple[str, ...] = ()) -> tuple[Any, list[str]]:
    """Reject a value outside the choice list, unless the user declared it as a plugin's value.

    The seed parses these flags with fixed `choices`, so a misspelling fails there too. Some lists
    can be extended by plugins Accord cannot see (`extensible` in the catalog); such a value is
    accepted only when the user names it with `--extend-choices FLAG=VALUE`, never by default.
    """
    if value in flag.choices:
        return value, []
    if str(value) in extra_choices:
        return value, [f"{value!r} is not a {flag.primary} value Accord knows; accepted because "
                       f"--extend-choices declares it (rules see it as given)."]
    hint = _close_choice(flag, str(value))
    if flag.extensible:
        hint = (f"{hint} If a plugin adds {value!r}, declare it with --extend-choices "
                f"{flag.name}={value}.").strip()
    raise BadValue(describe_expected(flag), hint)


def _close_choice(flag: Flag, text: str) -> str:
    if not flag.choices:
        return ""
    import difflib  # error path only

    close = difflib.get_close_matches(text, [str(c) for c in flag.choices], n=1, cutoff=0.6)
    return f"Did you mean {close[0]!r}?" if close else ""


def usage_error(name: str, text: Any, err: BadValue, prefix: str = "") -> UsageError:
    """The one-paragraph message for a bad value: the flag, the value, what is legal (and where)."""
    shown = text if isinstance(text, str) else json.dumps(text, default=str)
    message = f"{prefix}invalid value {shown!r} for {name}: expected {err.expected}."
    return UsageError(f"{message} {err.hint}".strip())
