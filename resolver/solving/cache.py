"""The solver's one cache layer: every answer Accord keeps between questions lives here.

The reference algorithm (resolver/solving/core.py) computes every answer from the rules, the set
flags, the facts and the question alone; this layer only remembers those answers, under one policy:
a store is named after its question and keyed by everything the answer depends on, so an answer
never goes stale and nothing is invalidated by hand; a store holds at most its limit of answers and
is emptied when it fills. The stores of one compiled rule set are `Plan.cache`'s (`reach`, `shared`,
`warnings_to_check`, `constants`, `structure`; explanations' `derived_by_name`, `derived_names`);
answers that depend on no rule set live in process stores (`config_json_pieces`, `config_key_orders`:
the JSON text of resolver/frozen.py's config hash). An object's working state (an `Env`'s values, a
`Launch`'s answers) is not an answer, and lives with its owner.

`ACCORD_SOLVER_CACHE=0`, or `with uncached():`, switches the layer off: every lookup computes its
answer afresh and keeps nothing. The switch is read here alone and the same code runs either way
(tests/test_solver_cache.py and tests/test_solver_queries.py compare the two,
benchmarks/bench_cache_layer.py measures the gain).
"""

from __future__ import annotations

import contextlib
import functools
import os
from types import MappingProxyType
from typing import Any, Callable, Hashable, Iterator, Mapping

SWITCH = "ACCORD_SOLVER_CACHE"
_OFF_WORDS = frozenset({"0", "off", "no", "false"})
_state = {"on": os.environ.get(SWITCH, "1").strip().lower() not in _OFF_WORDS}


def enabled() -> bool:
    """Whether the solver keeps answers between questions (see the module docstring)."""
    return _state["on"]


@contextlib.contextmanager
def switched(on: bool) -> Iterator[None]:
    """Run the block with the cache layer on or off, whatever `ACCORD_SOLVER_CACHE` says."""
    before = _state["on"]
    _state["on"] = on
    try:
        yield
    finally:
        _state["on"] = before


uncached = functools.partial(switched, False)  # every answer computed from scratch
cached = functools.partial(switched, True)


_MISSING = object()
_NOTHING: Mapping = MappingProxyType({})


class Store:
    """The kept answers to one question: at most `limit`, emptied when full (see the module docstring)."""

    __slots__ = ("name", "limit", "_answers")

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self._answers: dict = {}

    def lookup(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The answer for `key`, made by `make()` when not kept (always when the layer is off)."""
        if not _state["on"]:
            return make()
        found = self._answers.get(key, _MISSING)
        return self.keep(key, make()) if found is _MISSING else found

    def view(self) -> Mapping:
        """The kept answers, to read with `.get` in a loop too hot for a call per answer (empty
        while the layer is off); a miss is made by the caller and handed to `keep`."""
        return self._answers if _state["on"] else _NOTHING

    def keep(self, key: Hashable, answer: Any) -> Any:
        """Keep `answer` for `key` (nothing while the layer is off), emptying a full store first;
        returns `answer`."""
        if _state["on"]:
            if len(self._answers) >= self.limit:
                self._answers.clear()
            self._answers[key] = answer
        return answer

    def forget(self) -> None:
        self._answers.clear()

    def __len__(self) -> int:
        return len(self._answers)


class SolverCache:
    """The stores of one compiled rule set, by question name (see the module docstring)."""

    __slots__ = ("_stores",)

    def __init__(self) -> None:
        self._stores: dict[str, Store] = {}

    def lookup(self, question: str, key: Hashable, make: Callable[[], Any], limit: int) -> Any:
        """The answer to `question` for `key` (see `Store.lookup`); `limit` bounds its store."""
        store = self._stores.get(question)
        if store is None:
            if not _state["on"]:
                return make()
            store = self._stores[question] = Store(question, limit)
        return store.lookup(key, make)

    def kept(self, question: str) -> int:
        """How many answers to `question` are kept (tests: a store is used, or left empty)."""
        store = self._stores.get(question)
        return 0 if store is None else len(store)

    def forget(self, question: str | None = None) -> None:
        """Drop the answers to one question, or all of them (benchmarks: measure the work)."""
        if question is None:
            self._stores.clear()
        else:
            self._stores.pop(question, None)


_PROCESS_STORES: dict[str, Store] = {}


def process_store(name: str, limit: int) -> Store:
    """The process-wide store `name`, for answers that depend on no rule set (listed in the module
    docstring); made on first use, the same store after that."""
    store = _PROCESS_STORES.get(name)
    if store is None:
        store = _PROCESS_STORES[name] = Store(name, limit)
    return store


def process_stores() -> dict[str, Store]:
    """Every process-wide store, by name (tests and benchmarks)."""
    return dict(_PROCESS_STORES)
