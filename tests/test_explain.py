"""Conflicts: minimal, independent ones reported together, fixes verified, --relax reports changes."""

import pytest

from resolver import api
from resolver.explain import find_conflicts
from tests.checks import assert_conflict_is_minimal
from tests.toy import B200, H100, toy_plan


@pytest.fixture
def plan(tmp_path, monkeypatch):
    plan = toy_plan(tmp_path)
    monkeypatch.setattr(api, "plan_for", lambda system: plan)
    return plan


BAD = {"tp_size": 8, "dp_size": 3, "enable_dp_attention": True, "attention_backend": "fa3",
       "kv_cache_dtype": "auto"}


def test_conflict_is_minimal(plan):
    for conflict in find_conflicts(plan, BAD, B200):
        assert_conflict_is_minimal(plan, BAD, B200, conflict)


def test_blame_stays_on_the_rule_the_launch_breaks(plan):
    # Dropping --tp-size 12 would bring back tp_size=1, which breaks no rule, but dropping
    # --attention-backend fa3 is what fixes the launch: the conflict must be about fa3 on B200.
    (conflict,) = find_conflicts(plan, {"tp_size": 8, "attention_backend": "fa3"}, B200)
    assert conflict.rules == ("attn.fa3.hopper",) and conflict.flags == ("attention_backend",)


def test_independent_conflicts_are_all_reported(plan):
    conflicts = find_conflicts(plan, BAD, B200)
    assert [c.rules for c in conflicts] == [("par.dp_attention.divides",), ("attn.fa3.hopper",)]
    assert conflicts[1].facts == ("gpu.sm",)


def test_every_fix_resolves_and_upstream_fix_comes_first(plan):
    conflicts = find_conflicts(plan, BAD, B200)
    first = conflicts[0].fixes[0]
    assert first.rule == "par.dp_attention.divides" and first.changes == (("dp_size", 8),)
    for conflict in conflicts:
        others = {n for c in conflicts if c is not conflict for n in c.flags}
        base = {k: v for k, v in BAD.items() if k not in others}
        assert conflict.fixes
        for fix in conflict.fixes:
            assert plan.satisfiable(fix.apply(base), B200)


def test_conflict_error_json_has_the_contract_fields(plan):
    with pytest.raises(api.ConflictError) as err:
        api.resolve("llm", BAD, B200)
    data = err.value.to_dict()
    assert data["error"] == "conflict" and err.value.exit_code == 3
    assert {"flags", "rules", "facts", "message", "fixes"} <= set(data["conflicts"][0])
    assert data["conflicts"][0]["fixes"][0] == "--dp-size 8"
    assert "You set --dp-size 3 --enable-dp-attention" in data["conflicts"][0]["message"]


def test_facts_alone_can_conflict(plan):
    with pytest.raises(api.ConflictError) as err:
        api.resolve("llm", {"tp_size": 16}, H100)
    (conflict,) = err.value.conflicts
    assert conflict.flags == ("tp_size",) and conflict.rules == ("par.world_size.fits",)
    assert "gpu.count" in conflict.facts


def test_relax_applies_the_best_fix_and_reports_it(plan):
    config = api.resolve("llm", BAD, B200, relax=True)
    assert config.values["dp_size"] == 8
    assert config.provenance["dp_size"] == {"source": "relax", "rule": "par.dp_attention.divides", "was": 3}
    assert config.values["attention_backend"] != "fa3"
    assert any(w.startswith("[relax]") and "--dp-size 8" in w for w in config.warnings)
