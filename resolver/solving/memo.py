"""Bounded memos: a plain dict that is emptied when it fills, so a long session (the configurator,
an explanation's hundreds of solves) keeps its memory bounded without any bookkeeping per entry."""

from __future__ import annotations

from typing import Any


def remember(memo: dict, key: Any, value: Any, limit: int) -> Any:
    """`memo[key] = value`, emptying the memo first when it holds `limit` entries; returns `value`."""
    if len(memo) >= limit:
        memo.clear()
    memo[key] = value
    return value
