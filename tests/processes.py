"""Process helpers shared by the tests that check nothing is left running."""

from __future__ import annotations

import os


def children_of(pid: int) -> list[int]:
    """The pids whose parent is `pid` right now (read from /proc; a process gone meanwhile is skipped)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return found
