"""Launch-time conflict reports for people: the proof text and whether to color it.

The report itself (what each conflict is, its verified fixes, the combined fix) is one structure
built by resolver/explaining/conflict_report.py; this module only decides how the CLI shows it.
"""

from __future__ import annotations

import os
from typing import IO

from accord.resolver.explaining.conflict_report import render


def wants_color(stream: IO) -> bool:
    """Color for a terminal, unless NO_COLOR is set or the terminal is dumb."""
    return (hasattr(stream, "isatty") and stream.isatty() and not os.environ.get("NO_COLOR")
            and os.environ.get("TERM") != "dumb")


def render_conflict(err, color: bool = False, width: int | None = None) -> str:
    """Every conflict of a ConflictError as a proof with its verified fixes (the same structure
    `--json` prints), wrapped to `width` (default: the terminal's)."""
    return render(err.to_dict(), width=width, color=color)
