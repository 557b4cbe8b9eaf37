"""The solver's cache layer changes no answer: random commands, cached and uncached, answer alike.

resolver/solving/cache.py keeps the solver's answers between questions; the reference algorithm
(resolver/solving/core.py) must give the same ones with the layer switched off. Random launches
(tests/test_properties.py's generator: a preset and up to four rule-relevant flags) go through
both paths, and everything a user sees must agree: the resolved values and their origins, or the
conflicts with their explanations, fixes and combined fix, the `--relax` result, and the dry run's
legal values. The cached path runs second, on caches warmed by every earlier example, so a stale
or wrongly keyed answer shows up as a difference.

Two tests, because a whole command's answers (an explanation, the dry run of every flag) take
seconds without the layer: the solver's own answers (`Plan.solve`, `decisions`, `satisfiable`,
`decision_groups`, `holds_anyway`, `warnings_to_check`) on `ACCORD_CACHE_EXAMPLES` launches per
system (default 40), and everything a command prints on `ACCORD_CACHE_COMMANDS` launches per
system (default 8). `ACCORD_CACHE_SEED` draws a different set of launches (default: derandomized,
the same every run), so long runs can be split. A long run:

    ACCORD_CACHE_EXAMPLES=5000 ACCORD_CACHE_COMMANDS=0 pytest -q --timeout=0 tests/test_solver_cache.py
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, seed, settings

from accord.resolver import api
from accord.resolver.api import ConflictError
from accord.resolver.exploring.dryrun import dry_run
from accord.resolver.facts.machine import load_preset
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
    anyway = plan.holds_anyway(user, facts)
    out = {
        "solve": (outcome.values, outcome.origin, [r.id for r in outcome.violated],
                  [(r.id, key) for r, key in outcome.unknown], outcome.satisfiable),
        "decisions": plan.decisions(user, facts),
        "satisfiable": plan.satisfiable(user, facts),
        "decision_groups": [(names, [r.id for r in rules]) for names, rules in plan.decision_groups(user)],
        "holds_anyway": [sorted(r.id for r in plan.hard_rules if id(r) in ids) for ids in anyway],
        "warnings_to_check": [r.id for r in plan.warnings_to_check(user)],
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
