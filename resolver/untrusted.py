"""Reading files Accord did not write: bounded in size and nesting, failing with exit 2.

Config files, facts files and model configs (from a folder, the Hugging Face cache or the hub) are
all input someone else controls. The parsers are recursive, so a deeply nested document ends in a
RecursionError traceback, and PyYAML builds a whole document in memory before anything can look at
it (a 6.6 MB YAML file took 14 s and 1 GB to reach its error on line 2). Every such file is read
through here: its size is checked before it is parsed and its nesting after, and each failure is a
UsageError that names the file, what is wrong and the limit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accord.resolver.errors import UsageError

# A launch's flags or a machine's facts: a few kilobytes. A model's JSON files: config.json is tens
# of kilobytes, a large checkpoint's safetensors index about 10 MB.
SETTINGS_FILE_LIMIT = 1 << 20
MODEL_FILE_LIMIT = 32 << 20
# Deeper than any config any model family writes (they nest 3 to 5 levels) and far below the point
# where the parsers recurse out of stack.
MAX_DEPTH = 64


def read_limited_text(path: Path | str, limit: int, what: str) -> str:
    """The UTF-8 text of a file no larger than `limit` bytes; `what` names it in errors."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > limit:
            raise UsageError(f"{what} {path} is {size:,} bytes, more than the {limit:,} such a file may have; "
                             f"check that it is the file you meant.")
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise UsageError(f"cannot read {what} {path}: {err.strerror or err}.") from None
    except UnicodeDecodeError:
        raise UsageError(f"cannot read {what} {path}: it is not UTF-8 text.") from None


def nesting_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deeply lists and mappings nest in a parsed document, counted up to `limit + 1`.

    Walks without recursion and visits each object once, so a YAML document that repeats one
    anchor everywhere (an alias bomb) costs its size in objects, not its expanded size."""
    deepest, seen, stack = 0, set(), [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list)) or id(node) in seen:
            continue
        seen.add(id(node))
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children)
    return deepest


def too_deep(where: str) -> UsageError:
    """The error for a document nested deeper than MAX_DEPTH (found by a parser's RecursionError or
    by `nesting_depth`), naming `where` it is."""
    return UsageError(f"{where} nests lists and mappings more than {MAX_DEPTH} levels deep; no config "
                      f"Accord reads is shaped like that, so check that it is the file you meant.")


def check_depth(value: Any, where: str) -> Any:
    """`value` when it nests at most MAX_DEPTH levels, else `too_deep(where)`."""
    if nesting_depth(value) > MAX_DEPTH:
        raise too_deep(where)
    return value


def parse_json(text: str, where: str, **options: Any) -> Any:
    """json.loads that reports a document too deep to parse as bad input, not a traceback."""
    try:
        return check_depth(json.loads(text, **options), where)
    except RecursionError:
        raise too_deep(where) from None


def read_json_object(path: Path, limit: int, fix: str) -> dict[str, Any]:
    """A JSON file that must hold an object (a model's config files); `fix` says what to do instead."""
    text = read_limited_text(path, limit, "model file")
    try:
        data = parse_json(text, str(path))
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}, line {err.lineno}: not valid JSON ({err.msg}); {fix}.") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object of model settings, found a {type(data).__name__}; {fix}.")
    return data
