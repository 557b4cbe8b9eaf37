"""The solver's one cache layer: every answer the solver keeps between questions lives here.

The reference algorithm (resolver/solving/core.py) computes every answer from the rules, the set
flags, the facts and the question alone; this layer only remembers those answers. One policy holds
for every store:

- a cache belongs to one compiled rule set (a `Plan`, itself built once per hash of the rule files
  by resolver/language/plancache.py), so a different rule set never sees another's answers;
- inside it, each store is named after the question it answers, and its key is what that answer
  depends on (which flags are set, which facts exist or their values, the question's own
  arguments): an answer never goes stale, so nothing is ever invalidated by hand;
- a store holds at most its limit of answers and is emptied when it fills (bounded memory in a long
  UI session or a `tune` search, with no bookkeeping per entry).

The layer can be switched off: with `ACCORD_SOLVER_CACHE=0` in the environment, or inside
`with uncached():`, every lookup computes its answer afresh and keeps nothing, so the reference
runs as written (the property test in tests/test_solver_cache.py compares the two, and
benchmarks/bench_cache_layer.py measures what the layer saves).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Hashable, Iterator

from accord.resolver.solving.memo import remember

SWITCH = "ACCORD_SOLVER_CACHE"
_OFF_WORDS = frozenset({"0", "off", "no", "false"})
_state = {"on": os.environ.get(SWITCH, "1").strip().lower() not in _OFF_WORDS}


def enabled() -> bool:
    """Whether the solver keeps answers between questions (see the module docstring)."""
    return _state["on"]


@contextlib.contextmanager
def uncached() -> Iterator[None]:
    """Run the block with the cache layer off: every answer is computed from scratch."""
    before = _state["on"]
    _state["on"] = False
    try:
        yield
    finally:
        _state["on"] = before


@contextlib.contextmanager
def cached() -> Iterator[None]:
    """Run the block with the cache layer on (whatever `ACCORD_SOLVER_CACHE` says)."""
    before = _state["on"]
    _state["on"] = True
    try:
        yield
    finally:
        _state["on"] = before


class SolverCache:
    """The stores of one compiled rule set, by question name (see the module docstring)."""

    __slots__ = ("_stores",)

    def __init__(self) -> None:
        self._stores: dict[str, dict] = {}

    def lookup(self, question: str, key: Hashable, make: Callable[[], Any], limit: int) -> Any:
        """The answer to `question` for `key`, made by `make()` when not kept (always when off)."""
        if not _state["on"]:
            return make()
        store = self._stores.get(question)
        if store is None:
            store = self._stores[question] = {}
        found = store.get(key, _MISSING)
        if found is _MISSING:
            found = remember(store, key, make(), limit)
        return found

    def forget(self, question: str | None = None) -> None:
        """Drop the answers to one question, or all of them (benchmarks: measure the work)."""
        if question is None:
            self._stores.clear()
        else:
            self._stores.pop(question, None)


_MISSING = object()
