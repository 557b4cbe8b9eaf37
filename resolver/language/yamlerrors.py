"""The line a person would fix for a YAML syntax error.

A YAML error carries two marks: `problem_mark`, where the parser stood when it gave up, and
`context_mark`, where the construct it was reading began. The parser often notices a mistake only at
the next token, which may be lines later: a key without its colon on line 2 is found stale at the
start of line 3 (or after any blank lines and comments that follow), and a quote never closed is
found at the end of the file. Reporting `problem_mark` then points past the line to fix. Every place
that reports a YAML error with a line (config files, facts files, rule files) asks this module, so
they all name the same line. Marks count from 0; the line returned counts from 1, as editors do.
"""

from __future__ import annotations

import re
from typing import Any

# The problem of a key whose ':' never came (PyYAML and libyaml word it the same way). A plain key
# fits on one line, so the line where it began is the line missing the colon.
_STALE_KEY = "could not find expected ':'"


def problem_line(err: Any, text: str | None = None) -> int | None:
    """1-based line of the mistake in a YAML error (`yaml.MarkedYAMLError`), or None when it has no
    mark. `text` is the document that failed: with it, a mistake noticed only at the end of the
    file is placed on the line where the unfinished construct began (or on the last line with
    content, when nothing says where it began)."""
    problem = getattr(err, "problem_mark", None)
    context = getattr(err, "context_mark", None)
    if problem is None:
        return context.line + 1 if context is not None else None
    found_late = _STALE_KEY in str(getattr(err, "problem", "") or "")
    at_end = text is not None and _at_end(text, problem.line, problem.column)
    if context is not None and context.line < problem.line and (found_late or at_end):
        return context.line + 1
    if at_end:
        return _last_content_line(text, problem.line)
    return problem.line + 1


def _lines(text: str) -> list[str]:
    """The document's lines, split where YAML breaks lines."""
    return re.split(r"\r\n|\r|\n", text)


def _at_end(text: str, line: int, column: int) -> bool:
    """True when nothing but white space follows (line, column): the parser reached the end."""
    lines = _lines(text)
    if line >= len(lines):
        return True
    return not (lines[line][column:].strip() or any(rest.strip() for rest in lines[line + 1:]))


def _last_content_line(text: str, line: int) -> int:
    """1-based number of the last line at or before `line` that holds more than white space."""
    lines = _lines(text)
    for index in range(min(line, len(lines) - 1), -1, -1):
        if lines[index].strip():
            return index + 1
    return 1
