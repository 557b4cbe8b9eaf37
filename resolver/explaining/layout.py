"""Fitting text output to the terminal: its width, long lists shortened with a count, wrapped columns.

Tables of resolved values and the dry run are read in terminals of any width; a 35-entry list of
CUDA-graph batch sizes or a rule's reason must not push a row to 300 characters. The width is
`COLUMNS` when set, else the terminal's, else 100 (a pipe or a file), so tests and scripts get
the same bytes every time they set `COLUMNS`.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from typing import Any, Sequence

DEFAULT_WIDTH = 100
MIN_VALUE = 16  # the narrowest value column worth keeping beside the names
NARROWEST = 40  # below this no layout is readable; wrap as if the terminal were this wide


def terminal_width() -> int:
    """Columns to fit: `COLUMNS`, else the terminal's width, else DEFAULT_WIDTH."""
    return max(NARROWEST, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def shorten_list(items: Sequence[str], room: int) -> str:
    """`[a, b, c]`, or as many leading items as fit in `room` then `… +N more` (at least one item)."""
    whole = "[" + ", ".join(items) + "]"
    if len(whole) <= room or len(items) <= 1:
        return whole
    for keep in range(len(items) - 1, 0, -1):
        text = "[" + ", ".join(items[:keep]) + f", … +{len(items) - keep} more]"
        if len(text) <= room:
            return text
    return "[" + items[0] + f", … +{len(items) - 1} more]"


def wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` characters (long words are split; never an empty list)."""
    return textwrap.wrap(text, max(1, width), break_on_hyphens=False) or [""]


def wrap_hanging(head: str, text: str, width: int) -> list[str]:
    """`head` then `text` wrapped beside it; continuation lines are indented to where the text starts."""
    lines = wrap(text, width - len(head))
    return [head + lines[0]] + [" " * len(head) + line for line in lines[1:]]


def value_table(rows: Sequence[tuple[str, Any, str, str]], width: int) -> str:
    """Rows of (name, value, value text, note) as aligned `name  value  note` columns in `width`.

    The value column is as wide as most values (four in five), so one long value does not push
    every note off the screen. A row whose value or note does not fit gives its value the whole
    line (a list shortened with a count, other text wrapped) and puts the note under it. When not
    even a short value fits beside the names, each row is stacked instead.
    """
    name_w = max((len(r[0]) for r in rows), default=0)
    room = width - name_w - 2
    if room < MIN_VALUE:
        out: list[str] = []
        for name, value, text, note in rows:
            out.extend(wrap(name, width))
            out.extend(f"    {line}" for line in value_lines(value, text, width - 4))
            out.extend(f"    {line}" for line in wrap(note, width - 4) if line)
        return "\n".join(out)
    lengths = sorted(len(text) for _, _, text, _ in rows) or [0]
    value_w = min(room, max(MIN_VALUE, lengths[(len(lengths) - 1) * 4 // 5]))
    indent = " " * (name_w + 2)
    out = []
    for name, value, text, note in rows:
        line = f"{name:<{name_w}}  {text:<{value_w}}  {note}".rstrip()
        if len(text) <= value_w and len(line) <= width:
            out.append(line)
            continue
        first, *rest = value_lines(value, text, room)
        out.append(f"{name:<{name_w}}  {first}".rstrip())
        out.extend((indent + more).rstrip() for more in rest)
        out.extend(indent + part for part in wrap(note, room) if part)
    return "\n".join(out)


def value_lines(value: Any, text: str, room: int) -> list[str]:
    """A value's text within `room` columns: a list shortened with a count, anything else wrapped."""
    if len(text) <= room:
        return [text]
    if isinstance(value, (list, tuple)):
        return [shorten_list([v if isinstance(v, str) else json.dumps(v, sort_keys=True) for v in value], room)]
    return wrap(text, room)
