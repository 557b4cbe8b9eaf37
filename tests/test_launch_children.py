"""resolver/solving/launch.py: a launch's changed children answer as solving them in full does.

The explanation of a conflict asks about dozens of commands near the user's; `launch.changed(values)`
answers each from the launch's own solve. These tests hold it to its contract with the real rules (the property
does not depend on what the rules say): every answer equals a full solve of that command, and the
fixes ranked lazily are exactly the fixes of verifying and ranking every candidate.
"""

import itertools

import pytest

from accord.resolver.api import plan_for
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.explaining.diagnose import find_conflicts
from accord.resolver.explaining.fixes import MAX_FIXES, PER_FLAG, _proposals, _size_flag, find_fixes
from accord.resolver.explaining.ranking import (
    FixFacts,
    checkpoint_set,
    distance,
    fix_allowed,
    fix_key,
    kv_floor_holds,
    kv_floor_moves,
    pick,
    slowness,
)
from accord.resolver.facts.machine import load_facts
from accord.resolver.solving.launch import Launch, Launches
from accord.resolver.solving.solve import Env
from tests import reference_solver as reference

# Conflicting launches of different kinds: a fact-bound backend, a size over the GPUs, a pair of
# flags that must come together, a value that needs a decision changed.
LAUNCHES = [
    ("b200", ["--tp", "16", "--attention-backend", "fa3", "--kv-cache-dtype", "fp4_e2m1"]),
    ("h100", ["--tp", "8", "--dp", "3", "--enable-dp-attention"]),
    ("h100", ["--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "4"]),
    ("b200", ["--attention-backend", "trtllm_mha", "--speculative-algorithm", "NGRAM"]),
    ("h100", ["--kv-cache-dtype", "fp4_e2m1", "--attention-backend", "triton"]),
]


def _launch(preset, argv):
    _, parsed = parse_flags(argv)
    facts = load_facts(preset, model_path=parsed.user.get("model_path"), system=parsed.system)
    return plan_for(parsed.system), dict(parsed.user), facts


def _conflicts(plan, user, facts):
    """(each conflict's flags and rules, the launch without the other conflicts' flags), as
    find_conflicts judges each conflict's fixes."""
    by_id = plan.ruleset.by_id()
    conflicts = find_conflicts(plan, user, facts)
    for conflict in conflicts:
        others = {name for c in conflicts if c is not conflict for name in c.flags}
        isolated = {k: v for k, v in user.items() if k not in others}
        yield list(conflict.flags), [by_id[rid] for rid in conflict.rules], isolated


@pytest.mark.parametrize("preset, argv", LAUNCHES)
def test_a_neighbour_is_satisfiable_with_the_decisions_of_a_full_solve(preset, argv):
    plan, user, facts = _launch(preset, argv)
    assert not plan.satisfiable(user, facts)
    checked = 0
    for flags, rules, isolated in _conflicts(plan, user, facts):
        launch = Launches(plan, facts).of(isolated)
        for fix in _proposals(plan, isolated, facts, flags, rules):
            values = fix.apply(isolated)
            found = launch.changed(values, fix.flags())
            assert found.decisions == plan.decisions(values, facts), fix
            if found.satisfiable:
                assert found.warnings == reference.warnings(plan, values, facts), fix
                checked += 1
    assert checked, "no satisfiable neighbour: the launch list no longer exercises the decisions"


@pytest.mark.parametrize("preset, argv", LAUNCHES[:3])
def test_a_rule_subset_is_unsatisfiable_exactly_when_the_solver_says_so(preset, argv):
    plan, user, facts = _launch(preset, argv)
    launch = Launch(plan, user, facts)
    rules = plan.hard_rules
    step = max(1, len(rules) // 12)
    subsets = [rules[i:i + step * 3] for i in range(0, len(rules), step)]
    subsets += [rules[::k] for k in (2, 3, 5)] + [list(rules)]
    for subset in subsets:
        assert launch.rules_unsatisfiable(subset) == (not plan.satisfiable(user, facts, subset))


@pytest.mark.parametrize("preset, argv", LAUNCHES)
def test_lazy_ranking_gives_the_fixes_of_ranking_every_verified_candidate(preset, argv):
    plan, user, facts = _launch(preset, argv)
    for flags, rules, isolated in _conflicts(plan, user, facts):
        assert find_fixes(Launch(plan, isolated, facts), flags, rules) == _every_candidate_ranked(
            plan, isolated, facts, flags, rules)


def _every_candidate_ranked(plan, user, facts, flags, rules):
    """The ranking of rules/README.md ("Preferences"), done the slow way: verify every allowed
    candidate with a full solve, then sort by the preference ranking's key."""
    before = reference.warnings(plan, user, facts)
    env = Env(plan, dict(user), facts, {})
    candidates, seen = [], set()
    for fix in _proposals(plan, user, facts, flags, rules):
        if fix.size() == 0 or fix.key() in seen or not fix_allowed(plan, fix.changes, fix.drops, user):
            continue
        seen.add(fix.key())
        candidates.append(fix)
    hinted_flags = {frozenset(f.flags()) for f in candidates if f.rule}
    ranked = []
    for order, fix in enumerate(candidates):
        values = fix.apply(user)
        decided = plan.decisions(values, facts)
        if decided is None:
            continue
        after = Env(plan, values, facts, decided)
        now = [(name, after.flag(name)) for name in sorted(fix.flags())]
        hinted = 0 if fix.rule else 1 if fix.changes and frozenset(fix.flags()) in hinted_flags else 2
        facts_of = FixFacts(size=fix.size(), hinted=hinted, kv_ok=not kv_floor_moves(plan, fix.flags()) or kv_floor_holds(plan, values, facts, decided),
                            added_warnings=len(reference.warnings(plan, values, facts) - before),
                            checkpoint_set=checkpoint_set(plan, fix.changes), slowness=slowness(plan, now, env),
                            typed_touched=sum(1 for name in fix.flags() if name in user),
                            distance=sum(distance(v, user.get(n), n in fix.drops) for n, v in now), order=order)
        ranked.append((fix_key(facts_of), fix))
    ordered = [fix for _, fix in sorted(ranked, key=lambda item: item[0])]
    return pick(ordered, lambda fix: _size_flag(plan, fix), MAX_FIXES, PER_FLAG)


def test_a_launch_keeps_its_own_copy_of_the_command():
    # find_conflicts drops flags from its working copy after asking about it.
    plan, user, facts = _launch(*LAUNCHES[0])
    family = Launches(plan, facts)
    first = family.of(user)
    user.pop("tp_size")
    assert "tp_size" in first.user and family.of(user) is not first


def test_minimal_rules_of_a_family_launch_and_a_lone_launch_agree():
    plan, user, facts = _launch(*LAUNCHES[1])
    family = Launches(plan, facts)
    root = family.of(user)
    assert root.minimal_rules() == Launch(plan, user, facts).minimal_rules()
    for size in (1, 2):
        for subset in itertools.islice(itertools.combinations(sorted(user), size), 4):
            values = {k: user[k] for k in subset}
            if not plan.satisfiable(values, facts):
                assert family.of(values, near=root).minimal_rules() == Launch(plan, values, facts).minimal_rules()


def test_a_child_of_a_child_answers_as_a_full_solve():
    """Children are launches too: a change of a changed launch, and a pin on it, answer as the
    command itself solved in full."""
    plan, user, facts = _launch(*LAUNCHES[1])
    root = Launch(plan, user, facts)
    dropped = {k: v for k, v in user.items() if k != "dp_size"}
    child = root.changed(dropped)
    assert child.decisions == plan.decisions(dropped, facts)
    grandchild = child.changed({**dropped, "tp_size": 4})
    assert grandchild.decisions == plan.decisions({**dropped, "tp_size": 4}, facts)
    assert grandchild.warnings == reference.warnings(plan, {**dropped, "tp_size": 4}, facts)
    pinned = child.pinned({"tp_size": 2})
    assert pinned.satisfiable == plan.satisfiable({**dropped, "tp_size": 2}, facts)


def test_exclusions_are_answers_of_a_pinned_launch_only():
    plan, user, facts = _launch(*LAUNCHES[1])
    with pytest.raises(ValueError, match="pinned"):
        Launch(plan, user, facts).exclusions
