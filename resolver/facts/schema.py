"""The fact schema: which facts exist, what type each has, and which combinations are impossible.

Every fact a rule may read is declared in `rules/fact_schema.yaml` (data, so a new fact is one entry
there, not a code change). This module turns that file into `FactSpec`s and answers the questions
every source of facts asks of it: is this key a fact (`fact_spec`), may it hold this value
(`type_problem`), what does the command line text of `--fact KEY=VALUE` mean (`parse_fact`), and
could any real machine have these facts together (`contradictions`). It is separate from where
facts come from (`machine` for presets and facts files, `probe` for this machine) because all of
them, and the model facts' tests, check against the one schema.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Mapping

from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import RULES_DIR
from accord.resolver.language.yamlcache import read_yaml_files

PACKAGE_PREFIX = "packages."

_VERSION = re.compile(r"\d+(\.\d+)*([-+.]?[0-9A-Za-z][0-9A-Za-z.+-]*)?")
_PACKAGE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclasses.dataclass(frozen=True)
class FactSpec:
    """The type of one fact. `type` is str | version | int | number | bool | names (list of str)."""

    type: str
    help: str
    nullable: bool = False
    choices: tuple[str, ...] | None = None
    bounds: tuple[float, float] | None = None  # plausible (low, high) of a numeric fact
    variable: str | None = None  # the environment variable the probe reads it from (env.* facts)


def _load_schema() -> tuple[dict[str, str | None], dict[str, FactSpec]]:
    """(platform -> vendor, fact key -> FactSpec) from `rules/fact_schema.yaml`: the fact schema is
    data, so a new fact is one entry there, not a code change."""
    (data,), = read_yaml_files([RULES_DIR / "fact_schema.yaml"])
    specs = {key: FactSpec(entry["type"], entry["help"], bool(entry.get("nullable", False)),
                           tuple(entry["choices"]) if "choices" in entry else None,
                           tuple(entry["bounds"]) if "bounds" in entry else None, entry.get("variable"))
             for key, entry in data["facts"].items()}
    return dict(data["platforms"]), specs


VENDOR_OF_PLATFORM, FACT_KEYS = _load_schema()
PLATFORMS = tuple(VENDOR_OF_PLATFORM)

_LARGEST_COUNT = 1 << 40  # no layer, head, expert or token count of a real model comes near this
_TYPE_WORDS = {"str": "a string", "version": "a version string such as \"12.8\"",
               "int": "an integer", "number": "a number", "bool": "true or false",
               "names": "a list of names"}
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
_NULL = ("none", "null")


# --- the schema ---------------------------------------------------------------------------------

def fact_spec(key: str) -> FactSpec | None:
    """The spec of a fact key (`packages.<name>` included), or None when no such fact exists."""
    spec = FACT_KEYS.get(key)
    if spec is None and key.startswith(PACKAGE_PREFIX) and _PACKAGE_NAME.fullmatch(key[len(PACKAGE_PREFIX):]):
        spec = FACT_KEYS[PACKAGE_PREFIX + "*"]
    return spec


def spec_or_error(key: str, where: str) -> FactSpec:
    """The spec of a fact key; a UsageError naming the closest fact when there is none."""
    spec = fact_spec(key)
    if spec is not None:
        return spec
    import difflib  # error path only

    close = difflib.get_close_matches(key, [k for k in FACT_KEYS if not k.endswith("*")], n=1)
    hint = f"Did you mean {close[0]!r}? " if close else ""
    raise UsageError(
        f"{where}: unknown fact {key!r}. {hint}Facts are {', '.join(k for k in FACT_KEYS)} "
        f"(packages.<import name> for installed libraries).")


def type_problem(key: str, value: Any) -> str | None:
    """Why `value` cannot be the fact `key` (a sentence fragment), or None when it can."""
    spec = fact_spec(key)
    if spec is None:
        return f"{key} is not a fact"
    if value is None:
        return None if spec.nullable else f"{key} cannot be null"
    checks = {
        "str": lambda v: isinstance(v, str),
        "version": lambda v: isinstance(v, str) and _VERSION.fullmatch(v) is not None,
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
        "bool": lambda v: isinstance(v, bool),
        "names": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    }
    if not checks[spec.type](value):
        hint = ""
        if spec.type == "version" and isinstance(value, (int, float)):
            hint = f" (quote it: {key}: \"{value}\", or YAML reads it as a number)"
        elif key == "gpu.sm" and isinstance(value, float):
            hint = f" (compute capability {value} is written {round(value * 10)})"
        return f"{key} must be {_TYPE_WORDS[spec.type]}, not {value!r}{hint}"
    if spec.choices and value not in spec.choices:
        return f"{key} must be one of {', '.join(spec.choices)}, not {value!r}"
    if spec.type in ("int", "number"):  # too small is an impossibility, told by `contradictions`
        high = spec.bounds[1] if spec.bounds else _LARGEST_COUNT
        if value > high:
            return f"{key} = {value!r} is not a plausible value (at most {high:g})"
    return None


def parse_fact(item: str) -> tuple[str, Any]:
    """`--fact KEY=VALUE` -> (key, typed value). `none`/`null` is a known nothing where allowed."""
    key, sep, text = item.partition("=")
    key, text = key.strip(), text.strip()
    if not sep or not key:
        raise UsageError(f"--fact {item!r}: write KEY=VALUE, e.g. --fact gpu.sm=100 or --fact cuda=none.")
    spec = spec_or_error(key, f"--fact {item}")
    value = _typed(spec, text)
    problem = type_problem(key, value)
    if problem:
        raise UsageError(f"--fact {item}: {problem}.")
    return key, value


def _typed(spec: FactSpec, text: str) -> Any:
    """Turn command-line text into the fact's type; what does not convert stays text and is
    then rejected by `type_problem` with a message that names the expected type."""
    lowered = text.lower()
    if spec.type == "names":
        return [] if lowered in _NULL or not text else [p.strip() for p in text.split(",") if p.strip()]
    if lowered in _NULL:
        return None
    if spec.type == "bool":
        return True if lowered in _TRUE else False if lowered in _FALSE else text
    if spec.type in ("int", "number"):
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)  # for an int fact this keeps 9.0 a float, so the error can say 90
        except ValueError:
            return text
    return text


# --- facts no machine has ------------------------------------------------------------------------

def contradictions(facts: Mapping[str, Any]) -> list[str]:
    """Combinations no real machine has, as sentence fragments (empty when the facts make sense)."""
    problems = []
    for key, value in facts.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            problems.append(f"{key} is {value}, and cannot be negative")
    platform, count = facts.get("platform"), facts.get("gpu.count")
    if platform in VENDOR_OF_PLATFORM and platform not in ("cpu", "mps") and count == 0:
        problems.append(f"platform {platform} needs at least one GPU but gpu.count is 0")
    if platform == "cpu" and isinstance(count, int) and count > 0:
        problems.append(f"platform cpu has no GPUs but gpu.count is {count}")
    if "gpu.vendor" in facts and platform in VENDOR_OF_PLATFORM \
            and facts["gpu.vendor"] != VENDOR_OF_PLATFORM[platform]:
        problems.append(f"gpu.vendor {facts['gpu.vendor']} does not match platform {platform} "
                        f"(expected {VENDOR_OF_PLATFORM[platform] or 'null'})")
    for key, own_platform in (("gpu.sm", "cuda"), ("cuda", "cuda"), ("gpu.gfx", "rocm"), ("rocm", "rocm")):
        if facts.get(key) is not None and platform is not None and platform != own_platform:
            problems.append(f"{key} is {facts[key]} but platform is {platform}, which has none "
                            f"(set {key}=none)")
    if platform == "cuda" and "gpu.sm" in facts and facts["gpu.sm"] is None:
        problems.append("platform cuda needs gpu.sm (the compute capability, e.g. 90)")
    sm = facts.get("gpu.sm")
    if isinstance(sm, int) and not 30 <= sm <= 199:
        problems.append(f"gpu.sm {sm} is not a compute capability written major*10+minor (9.0 is 90)")
    return problems
