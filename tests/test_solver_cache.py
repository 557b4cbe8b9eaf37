"""The solver's cache layer changes no answer: random commands, cached and uncached, answer alike.

resolver/solving/cache.py keeps the solver's answers between questions; the reference algorithm
(resolver/solving/core.py) must give the same ones with the layer switched off. Random launches
(tests/test_properties.py's generator: a preset and up to four rule-relevant flags) go through
both paths, and everything a user sees must agree: the resolved values and their origins, or the
conflicts with their explanations, fixes and combined fix, the `--relax` result, the dry run's
legal values, and the config hash (written from the process stores' JSON pieces). The cached path runs second, on caches warmed by every earlier example, so a stale
or wrongly keyed answer shows up as a difference.

Two tests, because a whole command's answers (an explanation, the dry run of every flag) take
seconds without the layer: the solver's own answers (`Plan.solve`, `decisions`, `satisfiable`,
`structure` (its decision groups and the rules it checks), `warnings_to_check`, and the hash of the solved values) on `ACCORD_CACHE_EXAMPLES` launches per
system (default 40), and everything a command prints on `ACCORD_CACHE_COMMANDS` launches per
system (default 8). `ACCORD_CACHE_SEED` draws a different set of launches (default: derandomized,
the same every run), so long runs can be split. A long run:

    ACCORD_CACHE_EXAMPLES=5000 ACCORD_CACHE_COMMANDS=0 pytest -q --timeout=0 tests/test_solver_cache.py
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings

from accord.resolver import api
from accord.resolver.api import ConflictError
from accord.resolver.exploring.dryrun import dry_run
from accord.resolver.facts.machine import load_preset
from accord.resolver.frozen import config_hash
from accord.resolver.language.catalog import SYSTEMS
from accord.resolver.solving import cache
from tests.test_properties import launches

EXAMPLES = int(os.environ.get("ACCORD_CACHE_EXAMPLES", "40"))
COMMANDS = int(os.environ.get("ACCORD_CACHE_COMMANDS", "8"))
SEED = os.environ.get("ACCORD_CACHE_SEED")


def _settings(count: int):
    """Hypothesis settings for `count` examples, derandomized unless `ACCORD_CACHE_SEED` is set."""
    chosen = settings(max_examples=max(count, 1), deadline=None, suppress_health_check=list(HealthCheck),
                      derandomize=SEED is None, database=None)
    return (lambda test: seed(int(SEED))(chosen(test))) if SEED is not None else chosen


def _solver_answers(system: str, preset: str, user: dict) -> str:
    """The solver's answers about this launch, as JSON text (compared byte for byte)."""
    facts = load_preset(preset)
    plan = api.plan_for(system)
    outcome = plan.solve(user, facts)
    structure = plan.structure(user, facts)
    out = {
        "solve": (outcome.values, outcome.origin, [r.id for r in outcome.violated],
                  [(r.id, key) for r, key in outcome.unknown], outcome.satisfiable),
        "decisions": plan.decisions(user, facts),
        "satisfiable": plan.satisfiable(user, facts),
        "structure": ([r.id for r in structure.fixed], [r.id for r in structure.with_decisions],
                      [[(step.decision, [r.id for r in step.closes]) for step in steps] for steps in structure.groups]),
        "warnings_to_check": [r.id for r in plan.warnings_to_check(user)],
        "config_hash": config_hash(system, facts, outcome.values),
    }
    return json.dumps(out, default=repr, sort_keys=True)


def _command_answers(system: str, preset: str, user: dict) -> str:
    """Everything the user can see of this command, as JSON text (compared byte for byte)."""
    facts = load_preset(preset)
    out: dict = {}
    try:
        config = api.resolve(system, user, facts)
        out["resolve"] = config.to_json()
    except ConflictError as err:
        out["conflict"] = err.to_dict()
        try:
            out["relax"] = api.resolve(system, user, facts, relax=True).to_json()
        except ConflictError as relax_err:
            out["relax"] = relax_err.to_dict()
    try:
        _, choices = dry_run(system, user, facts)
        out["dry_run"] = [choice.to_dict() for choice in choices]
    except ConflictError as err:
        out["dry_run"] = err.to_dict()
    return json.dumps(out, default=repr, sort_keys=True)


def _alike(answers, system: str, count: int) -> None:
    """`answers` of `count` random launches agree with the cache layer off and on."""
    if count <= 0:
        return

    @_settings(count)
    @given(launches(system))
    def check(case):
        preset, user = case
        with cache.uncached():
            reference = answers(system, preset, dict(user))
        with cache.cached():
            assert answers(system, preset, dict(user)) == reference, (preset, user)

    check()


@pytest.mark.parametrize("system", SYSTEMS)
def test_the_solver_answers_alike_with_and_without_the_cache_layer(system):
    _alike(_solver_answers, system, EXAMPLES)


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_command_output_alike_with_and_without_the_cache_layer(system):
    _alike(_command_answers, system, COMMANDS)


def test_uncached_keeps_nothing_and_cached_keeps_answers():
    """Switched off, the layer stores nothing; switched on, the next question finds the answer."""
    store = cache.SolverCache()
    made: list[int] = []
    before = cache.enabled()

    def make() -> int:
        made.append(1)
        return len(made)
    with cache.uncached():
        assert store.lookup("q", "k", make, 4) == 1
        assert store.lookup("q", "k", make, 4) == 2
    with cache.cached():
        assert store.lookup("q", "k", make, 4) == 3
        assert store.lookup("q", "k", make, 4) == 3
    assert cache.enabled() == before  # the switch is restored after each block


def test_a_full_store_is_emptied_not_grown():
    store = cache.SolverCache()
    with cache.cached():
        for key in range(10):
            store.lookup("q", key, lambda: key, 4)
        assert store.lookup("q", 9, lambda: "again", 4) == 9          # the latest answer is kept
        assert store.lookup("q", 0, lambda: "again", 4) == "again"    # an early one was dropped


def test_a_store_switched_off_keeps_nothing_and_its_view_is_empty():
    """A process store (read through `view` in hot loops) follows the same switch and bound."""
    store = cache.Store("q", 4)
    with cache.uncached():
        assert store.keep("k", 1) == 1 and len(store) == 0 and dict(store.view()) == {}
        assert store.lookup("k", lambda: 2) == 2 and len(store) == 0
    with cache.cached():
        for key in range(6):
            store.keep(key, key)
        assert dict(store.view()) == {4: 4, 5: 5}  # emptied when full, then the latest kept
        assert store.lookup(5, lambda: "again") == 5


# -- every store is named in the layer and exercised by the property --------------------------

REPO = Path(__file__).resolve().parents[1]
STORE_NAMING = re.compile(r"""(?:\.lookup|process_store)\(\s*["']([a-z_]+)["']""")


def _stores_in_source() -> dict[str, str]:
    """Every store the resolver asks the cache layer for, by name -> the file that asks."""
    found = {}
    for path in sorted((REPO / "resolver").rglob("*.py")):
        for name in STORE_NAMING.findall(path.read_text()):
            found[name] = str(path.relative_to(REPO))
    return found


def test_every_store_is_listed_in_the_cache_layer():
    """resolver/solving/cache.py is the one place to read about every memo: each store is named there."""
    stores = _stores_in_source()
    assert {"structure", "shared", "config_json_pieces"} <= set(stores)  # the scan finds stores
    unlisted = {name: where for name, where in stores.items() if f"`{name}`" not in cache.__doc__}
    assert not unlisted, f"stores missing from resolver/solving/cache.py's docstring: {unlisted}"


def test_no_memo_outside_the_cache_layer_in_the_solver_or_the_frozen_config():
    """The solver and the config hash keep nothing of their own between questions: no functools
    cache, no private `_memo`, no `remember(` helper (what they keep, they keep in a store)."""
    paths = [*sorted((REPO / "resolver" / "solving").glob("*.py")), REPO / "resolver" / "frozen.py"]
    offenders = [f"{path.relative_to(REPO)}:{n}" for path in paths if path.name != "cache.py"
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r"lru_cache|functools\.cache\b|_memo\b|\bremember\(", line)]
    assert not offenders, offenders


def test_the_compared_commands_reach_every_store_and_uncached_they_keep_nothing():
    """A conflict (explanation, fixes, relax, dry run) and a legal launch use every store, so the
    property tests above compare answers that went through each; switched off, none keeps any."""
    launches = [("b200", {"tp_size": 16, "attention_backend": "fa3", "kv_cache_dtype": "fp4_e2m1"}),
                ("b200", {"tp_size": 2})]
    plan = api.plan_for("llm")
    process = cache.process_stores

    def run_all():
        for preset, user in launches:
            _command_answers("llm", preset, user)
            _solver_answers("llm", preset, user)

    plan.cache.forget()
    for store in process().values():
        store.forget()
    with cache.uncached():
        run_all()
        kept = {name: plan.cache.kept(name) for name in _stores_in_source()}
        kept.update({name: len(store) for name, store in process().items()})
        assert not any(kept.values()), kept
    with cache.cached():
        run_all()
        kept = {name: plan.cache.kept(name) for name in _stores_in_source() if name not in process()}
        kept.update({name: len(store) for name, store in process().items()})
    assert set(kept) == set(_stores_in_source())
    assert all(kept.values()), {name: count for name, count in kept.items() if not count}
