"""Property tests over the real rule sets and presets: random launches never break the contract.

For any preset and any combination of rule-relevant flags: resolution either succeeds with every
hard rule holding, or fails with conflicts that are minimal and whose fixes all resolve (the
pasteable commands keep every other flag, and the combined fix resolves the whole command). Results
are deterministic and idempotent.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accord.resolver import api
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.commands.resolve import relaxed_changes
from accord.resolver.explaining.conflict_report import flag_argv
from accord.resolver.explaining.diagnose import find_conflicts
from accord.resolver.facts.machine import list_presets, load_preset
from accord.resolver.language.catalog import SYSTEMS
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.solving.solve import Env, check
from tests.checks import assert_conflict_is_minimal
from tests.launch_samples import sampled_flags



def _relevant_flags(system):
    """Flags some rule reads or sets, with a finite or small sampled domain."""
    plan = api.plan_for(system)
    names = set()
    for rule in plan.ruleset:
        names |= rule.reads_flags | ({rule.flag} if rule.flag else set())
    return sampled_flags(plan, names)


def launches(system):
    flags = _relevant_flags(system)
    names = sorted(flags)
    picked = st.lists(st.sampled_from(names), max_size=4, unique=True) if names else st.just([])
    return st.tuples(
        st.sampled_from(list_presets()),
        picked.flatmap(lambda chosen: st.fixed_dictionaries({n: st.sampled_from(flags[n]) for n in chosen})),
    )


def _holds(rule, env):
    try:
        return check(rule, env)
    except UnknownFact:
        return True


def _property(system, preset, user):
    plan = api.plan_for(system)
    facts = load_preset(preset)
    try:
        config = api.resolve(system, user, facts)
    except api.ConflictError as err:
        for conflict in err.conflicts:
            assert_conflict_is_minimal(plan, user, facts, conflict)
            others = {n for c in err.conflicts if c is not conflict for n in c.flags}
            base = {k: v for k, v in user.items() if k not in others}
            for fix in conflict.fixes:
                assert plan.satisfiable(fix.apply(base), facts), (conflict, fix)
        assert [c.flags for c in find_conflicts(plan, user, facts)] == [c.flags for c in err.conflicts]
        _check_report(system, plan, user, facts, err)
        return
    env = Env(plan, user, facts, dict(config.values))
    broken = [r.id for r in plan.hard_rules if not _holds(r, env)]
    assert not broken
    assert {k: config.values[k] for k in user} == user
    assert api.resolve(system, user, facts).to_json() == config.to_json()
    assert api.resolve(system, dict(config.values), facts).values == config.values


def _check_report(system, plan, user, facts, err):
    """Every printed command is the user's command with only that fix applied (add-flag fixes
    included); the combined fix resolves the whole command; --relax applies a verified fix."""
    report = err.to_dict()

    def typed(values):  # what a command line can say (a switch's False, a null: nothing to type)
        return {k: v for k, v in values.items() if flag_argv(plan.catalog, k, v)}
    for conflict, entry in zip(err.conflicts, report["conflicts"]):
        for fix, shown in zip(conflict.fixes, entry["fix_details"]):
            _, parsed = parse_flags(shown["command"], system=system)
            assert parsed.user == typed(fix.apply(user)), (fix, shown["command"])
        for chain in entry["chains"]:
            if chain["then"] is not None:
                _, parsed = parse_flags(chain["then"]["command"], system=system)
                assert plan.satisfiable(parsed.user, facts), chain
    if report["fix_all"] is not None:
        _, parsed = parse_flags(report["fix_all"]["command"], system=system)
        assert plan.satisfiable(parsed.user, facts), report["fix_all"]
        relaxed = api.resolve(system, user, facts, relax=True)
        changed = {c["flag"] for c in relaxed_changes(relaxed)}
        assert {k: relaxed.values[k] for k in user if k not in changed and k in relaxed.values} == \
            {k: v for k, v in user.items() if k not in changed and k in relaxed.values}


@pytest.mark.parametrize("system", SYSTEMS)
def test_random_launches_keep_the_contract(system):
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(launches(system))
    def run(launch):
        preset, user = launch
        _property(system, preset, user)

    run()
