"""The solver's one cache layer: every answer Accord keeps between questions lives here.

The reference algorithm (resolver/solving/core.py) computes every answer from the rules, the set
flags, the facts and the question alone; this layer only remembers those answers. One policy holds
for every store:

- each store is named after the question it answers, and its key is what that answer depends on
  (which flags are set, which facts exist or their values, the question's own arguments): an
  answer never goes stale, so nothing is ever invalidated by hand;
- a store holds at most its limit of answers and is emptied when it fills (bounded memory in a long
  UI session or a `tune` search, with no bookkeeping per entry);
- the solver's stores belong to one compiled rule set (a `Plan`, itself built once per hash of the
  rule files by resolver/language/plancache.py, holds a `SolverCache`), so a different rule set
  never sees another's answers; the few answers that depend on no rule set live in process stores
  (`process_store`), named here once.

The layer can be switched off: with `ACCORD_SOLVER_CACHE=0` in the environment, or inside
`with uncached():`, every lookup computes its answer afresh and keeps nothing. The switch is read
here alone (`Store` and `SolverCache`): no caller asks whether the layer is on, the same code runs
either way and, switched off, simply recomputes (the property test in tests/test_solver_cache.py
compares the two, and benchmarks/bench_cache_layer.py measures what the layer saves). The
incremental algorithms of a `Launch` (answers about its changed and pinned children, from its
own solve; resolver/solving/launch.py and pinning.py) run the same way; tests/test_solver_queries.py holds them,
on and off, to full solves of each neighbour and pinned command (tests/reference_solver.py, the
oracle).

Every store, where its question is asked:

- per rule set (`Plan.cache`), keyed by the set flags and more: `reach` (the plan's dependency
  graph given the set flags, with what its walks found: the decisions each flag and rule depends
  on, the flags a change affects, the rules it touches, what pins reach and link;
  resolver/solving/depgraph.py) and `reach_layout` (the decision groups, same module), `shared`,
  `holds_anyway`, `warnings_to_check`, `constants`, `structure`, `for_facts` (solve.py);
- per process: `config_json_pieces` and `config_key_orders` (resolver/frozen.py: the JSON text of
  one (name, value) and the sorted names of a mapping, from which the config hash is written).

What is kept elsewhere, and why it is not an answer of this layer: compiled data, built once per
rule set rather than per question (the plan itself in resolver/language/plancache.py, the
preferences file read per plan by `ranking.preferences_for`, resolver/explaining/ranking.py); the facts key `Plan` remembers for
the last facts mapping (an identity check, used only while this layer is on); and the working
state of one object's life (an `Env`'s verdicts, a `Launch`'s answers and its `Pinning`'s examples),
dropped with it; the dependency graph itself (resolver/solving/depgraph.py), built once per plan
from the rules alone. Measured and not kept at all: a flag's fastest-first order
(resolver/explaining/ranking.py), cheaper to work out than to look up. Outside the solver, the
loaders of files read once per process (catalogs, presets, `rules/*.yaml` tables, `api.plan_for`)
keep what they read with `functools.lru_cache`, and a few per-plan tables of the dry run and the
commands keep what depends on the rules alone: data, not answers to a question.
"""

from __future__ import annotations

import contextlib
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


def uncached() -> contextlib.AbstractContextManager[None]:
    """Run the block with the cache layer off: every answer is computed from scratch."""
    return switched(False)


def cached() -> contextlib.AbstractContextManager[None]:
    """Run the block with the cache layer on (whatever `ACCORD_SOLVER_CACHE` says)."""
    return switched(True)


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
        if found is _MISSING:
            found = self.keep(key, make())
        return found

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
        """The answer to `question` for `key`, made by `make()` when not kept (always when off);
        `limit` bounds the question's store."""
        if not _state["on"]:
            return make()
        store = self._stores.get(question)
        if store is None:
            store = self._stores[question] = Store(question, limit)
        found = store._answers.get(key, _MISSING)
        if found is _MISSING:
            found = store.keep(key, make())
        return found

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
