"""Reading a `--config FILE`: a flat mapping of flag -> value, in YAML or JSON, with line numbers.

The loader only reads the file; deciding what each key means is the parser's job. It keeps each
key's line so every later complaint ("unknown key", "bad value") can point at the exact line, and it
rejects what a flat mapping cannot be: a list or scalar at the top level, or a key given twice.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from accord.resolver.errors import UsageError
from accord.resolver.untrusted import SETTINGS_FILE_LIMIT, check_depth, read_limited_text, too_deep


@dataclasses.dataclass(frozen=True)
class ConfigEntry:
    """One `key: value` of a config file and the line it is on (1-based)."""

    key: str
    value: Any
    line: int


def read_config(path: str) -> list[ConfigEntry]:
    """The entries of a YAML (default) or JSON (`.json`) config file, in file order.

    The file is untrusted input (accord.resolver.untrusted): at most SETTINGS_FILE_LIMIT bytes,
    and no value nested deeper than MAX_DEPTH, so a hostile or mistaken file is an exit 2 with its
    reason, not a RecursionError or minutes of parsing."""
    text = read_limited_text(path, SETTINGS_FILE_LIMIT, "config file")
    try:
        entries = _read_json(path, text) if path.endswith(".json") else _read_yaml(path, text)
    except RecursionError:
        raise too_deep(f"config file {path}") from None
    check_depth([entry.value for entry in entries], f"config file {path}")
    return entries


def _read_json(path: str, text: str) -> list[ConfigEntry]:
    def pairs(items: list[tuple[str, Any]]) -> dict:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:
                line = _json_key_line(text, key, 2)
                raise UsageError(f"config file {path}, line {line}: key {key!r} is given twice.")
            seen[key] = value
        return seen

    try:
        data = json.loads(text, object_pairs_hook=pairs) if text.strip() else {}
    except json.JSONDecodeError as err:
        raise UsageError(f"config file {path}, line {err.lineno}: malformed JSON: {err.msg}.") from None
    if not isinstance(data, dict):
        raise UsageError(f"config file {path}, line 1: expected an object of flag: value pairs at the top level.")
    data = typed_values_of_resolved(data)
    return [ConfigEntry(key, value, _json_key_line(text, key, 1)) for key, value in data.items()]


RESOLVED_KEYS = frozenset({"system", "facts", "values", "provenance", "hash"})


def typed_values_of_resolved(data: dict) -> dict:
    """A whole `accord resolve --json` output read as a config file: the values the command set
    (provenance `user`, the auto choice it typed, what `--relax` changed), so resolving it again
    re-decides the rest exactly as before and gives the same hash. Taking every value as typed
    would not: some values upstream derives from others (the per-rank prefill chunk under DP
    attention) mean something else when typed. Any other mapping is returned as it is."""
    if not RESOLVED_KEYS <= set(data) or not isinstance(data.get("values"), dict) \
            or not isinstance(data.get("provenance"), dict):
        return data
    typed = {}
    for name, prov in data["provenance"].items():
        if not isinstance(prov, dict) or name not in data["values"]:
            continue
        if prov.get("source") in ("user", "relax"):
            typed[name] = data["values"][name]
        elif "typed" in prov:
            typed[name] = prov["typed"]
    return typed


def _json_key_line(text: str, key: str, occurrence: int) -> int:
    """Line of the n-th `"key":` in JSON text (json gives no positions for keys)."""
    pattern = re.compile(re.escape(json.dumps(key)) + r"\s*:")
    matches = list(pattern.finditer(text))
    if len(matches) < occurrence:
        return 1
    return text.count("\n", 0, matches[occurrence - 1].start()) + 1


def _loader():
    import yaml  # a --config file only; imported here to keep `accord resolve` quick to start

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_yaml(path: str, text: str) -> list[ConfigEntry]:
    import yaml

    try:
        root = yaml.compose(text, Loader=_loader())
    except yaml.MarkedYAMLError as err:
        from accord.resolver.language.yamlerrors import problem_line  # error path only

        line = problem_line(err, text) or 1
        raise UsageError(f"config file {path}, line {line}: malformed YAML: {err.problem or err.context}.") from None
    except yaml.YAMLError as err:
        raise UsageError(f"config file {path}: malformed YAML: {err}.") from None
    if root is None:
        return []
    if not isinstance(root, yaml.MappingNode):
        raise UsageError(
            f"config file {path}, line {root.start_mark.line + 1}: expected a mapping of flag: value pairs "
            "at the top level."
        )
    entries: list[ConfigEntry] = []
    seen: set[str] = set()
    for key_node, value_node in root.value:
        line = key_node.start_mark.line + 1
        if not isinstance(key_node, yaml.ScalarNode):
            raise UsageError(f"config file {path}, line {line}: a key must be a flag name.")
        key = str(key_node.value)
        if key in seen:
            raise UsageError(f"config file {path}, line {line}: key {key!r} is given twice.")
        seen.add(key)
        entries.append(ConfigEntry(key, _construct(value_node, path), line))
    return entries


def _construct(node: yaml.Node, path: str) -> Any:
    """Build the Python value of one YAML node with the safe constructor.

    Tags that build objects (`!!python/object:...`, custom `!tags`) are refused: a config file holds
    plain data only, and constructing such a tag would run code.
    """
    import yaml

    loader = _loader()("")
    try:
        return loader.construct_document(node)
    except yaml.constructor.ConstructorError as err:
        mark = err.problem_mark or err.context_mark or node.start_mark
        tag = getattr(err.problem_mark, "name", None) and err.problem
        raise UsageError(
            f"config file {path}, line {mark.line + 1}: unsupported YAML tag ({tag or err}); a config file "
            "holds plain values only (strings, numbers, booleans, lists, mappings, null)."
        ) from None
    finally:
        loader.dispose()
