"""Fixes an operator would apply (resolver/explaining/fixes.py), on the toy rules: flags added from a rule's
hint or from the finite domain of an unset flag the rule reads, placeholders to fill in, ranking,
and the combined fix of several conflicts."""

import json

import pytest
import yaml

from accord.resolver import api
from accord.resolver.cli import main
from accord.resolver.explaining.diagnose import combined_fix, find_conflicts
from accord.resolver.explaining.fixes import Fix, combine
from accord.resolver.language.catalog import load_catalog
from accord.resolver.language.ruleset import load_rules
from accord.resolver.solving.solve import Plan
from tests.toy import B200, CATALOG, H100, RULES, TWO_CONFLICTS, toy_plan, write_toy


@pytest.fixture
def plan(tmp_path, monkeypatch):
    plan = toy_plan(tmp_path)
    monkeypatch.setattr(api, "plan_for", lambda system: plan)
    return plan


@pytest.fixture
def hinted(tmp_path, monkeypatch):
    """The toy rules with a multi-node hint on the world-size rule: --nnodes plus an address."""
    write_toy(tmp_path)
    catalog = {**CATALOG, "flags": CATALOG["flags"] + [
        {"name": "dist_init_addr", "flags": ["--dist-init-addr"], "type": "str", "nullable": True, "default": None}]}
    rules = yaml.safe_load(yaml.safe_dump(RULES))
    world = next(r for r in rules["rules"] if r["id"] == "par.world_size.fits")
    world["fix"] = {"nnodes": "(tp_size * (1 if enable_dp_attention else dp_size) + gpu.count - 1) // gpu.count",
                    "dist_init_addr": {"value": "'HOST:PORT'", "fill_in": "the address of node 0"}}
    rules["rules"].append({"id": "par.addr.multinode", "kind": "require", "when": "nnodes > 1",
                           "require": "dist_init_addr is not None", "reason": "nodes meet at one address."})
    (tmp_path / "llm" / "flags.yaml").write_text(yaml.safe_dump(catalog))
    (tmp_path / "llm" / "toy.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    plan = Plan(load_catalog("llm", tmp_path), load_rules("llm", tmp_path))
    monkeypatch.setattr(api, "plan_for", lambda system: plan)
    return plan


def _fixes(plan, user, facts):
    (conflict,) = find_conflicts(plan, user, facts)
    return conflict.fixes


def test_an_unset_flag_the_rule_reads_can_be_the_fix(plan):
    # dp 2 x tp 8 = 16 ranks on 8 GPUs; with DP attention the world is tp alone: 8.
    fixes = _fixes(plan, {"tp_size": 8, "dp_size": 2}, H100)
    assert Fix(changes=(("enable_dp_attention", True),)) in fixes
    for fix in fixes:
        assert plan.satisfiable(fix.apply({"tp_size": 8, "dp_size": 2}), H100)


def test_adding_a_flag_ranks_before_changing_a_typed_one(plan):
    # Same size (one flag), but the added flag keeps both typed values: the user's parallel degree.
    assert _fixes(plan, {"tp_size": 8, "dp_size": 2}, H100)[0] == Fix(changes=(("enable_dp_attention", True),))


def test_a_hint_may_add_flags_and_a_placeholder_to_fill_in(hinted):
    fixes = _fixes(hinted, {"tp_size": 16}, H100)
    hint = next(f for f in fixes if f.rule == "par.world_size.fits")
    assert dict(hint.changes) == {"nnodes": 2, "dist_init_addr": "HOST:PORT"}
    assert hint.fill_in == (("dist_init_addr", "the address of node 0"),)
    assert hinted.satisfiable(hint.apply({"tp_size": 16}), H100)


def test_fewest_changes_rank_first_so_relax_keeps_a_launchable_command(hinted):
    fixes = _fixes(hinted, {"tp_size": 16}, H100)
    # Fewest changes first, but at most two sizes of one flag before another way out.
    single = [f for f in fixes if f.size() == 1 and dict(f.changes).keys() == {"tp_size"}]
    assert fixes[0].size() == 1 and list(fixes[:2]) == single[:2]
    assert any(f.size() == 2 for f in fixes[:4])
    config = api.resolve("llm", {"tp_size": 16}, H100, relax=True)
    assert config.values["tp_size"] == 8 and config.values["nnodes"] == 1  # not tp 1, and no placeholder


def test_the_report_says_what_to_fill_in(hinted):
    with pytest.raises(api.ConflictError) as err:
        api.resolve("llm", {"tp_size": 16}, H100)
    report = err.value.to_dict()
    entry = next(f for f in report["conflicts"][0]["fix_details"] if f["fill_in"])
    assert entry["fill_in"] == [{"flag": "dist_init_addr", "spelling": "--dist-init-addr",
                                 "value": "HOST:PORT", "what": "the address of node 0"}]
    assert entry["command"] == ["--tp-size", "16", "--dist-init-addr", "HOST:PORT", "--nnodes", "2"]
    from accord.resolver.explaining.proof import render_conflict
    assert "  fill in   replace HOST:PORT in --dist-init-addr: the address of node 0" in render_conflict(err.value)


def test_the_combined_fix_resolves_every_conflict_at_once(plan):
    conflicts = find_conflicts(plan, TWO_CONFLICTS, B200)
    parts = combined_fix(plan, TWO_CONFLICTS, B200, conflicts)
    assert [conflict for _, conflict in parts] == conflicts
    assert plan.satisfiable(combine([fix for fix, _ in parts]).apply(TWO_CONFLICTS), B200)


def test_combine_refuses_two_fixes_that_disagree():
    assert combine([Fix(changes=(("tp_size", 2),)), Fix(changes=(("tp_size", 4),))]) is None
    assert combine([Fix(changes=(("tp_size", 2),)), Fix(changes=(), drops=("tp_size",))]) is None
    both = combine([Fix(changes=(("tp_size", 2),)), Fix(changes=(), drops=("dp_size",))])
    assert both.apply({"tp_size": 8, "dp_size": 3}) == {"tp_size": 2}


def test_relax_json_lists_every_change(plan, capsys, monkeypatch):
    monkeypatch.setattr("accord.resolver.commands.resolve.load_facts", lambda *a, **k: B200)
    assert main(["resolve", "--json", "--relax", *("--tp-size 8 --dp-size 3 --enable-dp-attention "
                                                    "--attention-backend fa3").split()]) == 0
    data = json.loads(capsys.readouterr().out)
    relaxed = {c["flag"]: c for c in data["relaxed"]}
    assert set(relaxed) == {"dp_size", "attention_backend"}
    assert relaxed["dp_size"] == {"flag": "dp_size", "from": 3, "to": 8, "rule": "par.dp_attention.divides"}
    assert relaxed["attention_backend"]["from"] == "fa3" and relaxed["attention_backend"]["rule"] == "attn.fa3.hopper"
    assert data["values"]["attention_backend"] == relaxed["attention_backend"]["to"]


def test_conflict_json_carries_fix_all_as_changes_and_argv(plan, capsys, monkeypatch):
    monkeypatch.setattr("accord.resolver.commands.resolve.load_facts", lambda *a, **k: B200)
    argv = "--tp-size 8 --dp-size 3 --enable-dp-attention --attention-backend fa3".split()
    assert main(["resolve", "--json", *argv]) == 3
    fix_all = json.loads(capsys.readouterr().out)["fix_all"]
    assert {c["flag"] for c in fix_all["changes"]} == {"dp_size", "attention_backend"}
    assert fix_all["command"][:6] == ["--tp-size", "8", "--dp-size", "8", "--enable-dp-attention", "--attention-backend"]
    assert main(["resolve", *fix_all["command"]]) == 0
