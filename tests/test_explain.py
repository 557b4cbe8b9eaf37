"""Conflicts: minimal, independent ones reported together, fixes verified, --relax reports changes."""

import json
from pathlib import Path

import pytest
import yaml

from accord.resolver import api
from accord.resolver.explaining.diagnose import find_conflicts
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


# --- derived values in explanations -----------------------------------------------------------

DERIVED = """
derived:
  - id: blackwell
    type: bool
    values: [{value: "platform == 'cuda' and gpu.sm in (100, 103)"}]
    reason: a datacenter Blackwell GPU
  - id: fp4_kv_capable
    type: bool
    values:
      - {value: false, when: "not blackwell"}
      - {value: "version(cuda) >= version('12.8')"}
    reason: the GPU and toolkit have FP4 KV kernels
"""
FP4_RULE = """
prefix: x.
rules:
  - {id: x.fp4.kernels, kind: require, when: "kv_cache_dtype == 'fp4_e2m1'", require: fp4_kv_capable,
     reason: FP4 KV kernels exist for Blackwell with CUDA 12.8 or newer.}
"""


@pytest.fixture
def derived_plan(tmp_path, monkeypatch):
    import yaml

    from accord.resolver.language.catalog import load_catalog
    from accord.resolver.language.ruleset import load_rules
    from accord.resolver.solving.solve import Plan
    from tests.toy import RULES, write_toy

    write_toy(tmp_path)
    # The toy's own FP4 rule is written inline; this one reads derived values instead.
    toy = dict(RULES, rules=[r for r in RULES["rules"] if r["id"] != "kv.fp4.blackwell"])
    (tmp_path / "llm" / "toy.yaml").write_text(yaml.safe_dump(toy, sort_keys=False))
    (tmp_path / "llm" / "derived.yaml").write_text(DERIVED)
    (tmp_path / "llm" / "x.yaml").write_text(FP4_RULE)
    plan = Plan(load_catalog("llm", tmp_path), load_rules("llm", tmp_path))
    monkeypatch.setattr(api, "plan_for", lambda system: plan)
    return plan


def _readings(plan, facts, user=None):
    from accord.resolver.explaining.explain import derived_readings
    from accord.resolver.solving.solve import Env

    rule = plan.ruleset.by_id()["x.fp4.kernels"]
    return [r.line() for r in derived_readings(plan, rule.expressions(), Env(plan, user or {}, facts, {}))]


def test_an_explanation_names_each_derived_value_with_its_value_and_what_it_read(derived_plan):
    assert _readings(derived_plan, H100) == [
        "blackwell = false because gpu.sm = 90, platform = cuda",
        "fp4_kv_capable = false (when not blackwell) because blackwell = false, cuda = 12.8"]
    assert _readings(derived_plan, {**B200, "cuda": "12.6"})[1] == (
        "fp4_kv_capable = false because blackwell = true, cuda = 12.6")


def test_a_derived_value_over_an_unknown_fact_says_which_fact_it_needs(derived_plan):
    facts = {k: v for k, v in H100.items() if k != "gpu.sm"}
    assert _readings(derived_plan, facts)[0] == (
        "blackwell = unknown (needs gpu.sm) because gpu.sm = unknown (needs gpu.sm), platform = cuda")


def test_a_conflict_report_shows_the_derived_values_its_rule_read(derived_plan):
    from accord.resolver.explaining.proof import render_conflict

    with pytest.raises(api.ConflictError) as err:
        api.resolve("llm", {"kv_cache_dtype": "fp4_e2m1"}, H100)
    text = render_conflict(err.value)
    assert "  rule      x.fp4.kernels requires `fp4_kv_capable`" in text
    assert "  derived   blackwell = false because gpu.sm = 90, platform = cuda" in text


def test_why_lists_the_derived_values_in_the_chain(capsys):
    """Real rules: the SM100 test behind the attention backend choice on a Hopper GPU is shown."""
    from accord.resolver.commands import why

    assert why.main(["attention_backend", "--facts", "h100", "--tp", "8"]) == 0
    out = capsys.readouterr().out
    assert "  derived sm100 = false because gpu.sm = 90, platform = cuda" in out
    assert why.main(["attention_backend", "--facts", "h100", "--tp", "8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    derived = {d["name"]: d for d in data["flags"][0]["derived"]}
    assert derived["sm100"] == {"name": "sm100", "value": False, "when": None,
                                "reads": {"gpu.sm": 90, "platform": "cuda"}}


def test_values_compared_inside_derived_values_and_named_sets_are_still_mentioned():
    """Naming a fragment must not hide from a dry run the values the rules compare a flag with."""
    from accord.resolver.explaining.explain import mentioned_values

    plan = api.plan_for("diffusion")
    sets = {s.id: set(s.values) for s in plan.ruleset.sets}
    assert sets["bcg_model_ids"] <= mentioned_values(plan, "model_id")            # `model_id in a_set`
    assert sets["ltx2_two_stage_pipelines"] <= mentioned_values(plan, "pipeline_class_name")
    assert {"dit", "all", "default", "vae"} <= mentioned_values(plan, "layerwise_offload_components")
    assert "sage_attn" in mentioned_values(plan, "attention_backend")            # a derived value's `==`


def test_every_name_the_choice_metadata_describes_is_mentioned_when_a_rule_reads_it(tmp_path):
    """An open str flag has no domain, so a dry run tries the values the rules name: a rule that
    asks `meta(flag).prop` names every value the metadata describes, not only the ones it holds for."""
    from accord.resolver.explaining.explain import mentioned_values
    from accord.resolver.language.catalog import load_catalog
    from accord.resolver.language.ruleset import load_rules
    from accord.resolver.solving.solve import Plan
    from tests.toy import write_meta_toy

    meta = {"properties": {"vendor": {"default": None, "about": "Who builds it."}},
            "choices": {"k1": {"vendor": "acme"}, "k2": {"vendor": "other"}}}
    rule = {"id": "x.acme", "kind": "require", "when": "meta(kernel_name).vendor == 'acme'",
            "require": "platform == 'cuda'", "reason": "Acme kernels are CUDA kernels."}
    write_meta_toy(tmp_path, rules=[rule])
    path = tmp_path / "llm" / "flags.yaml"
    catalog = yaml.safe_load(path.read_text())
    catalog["flags"].append({"name": "kernel_name", "flags": ["--kernel-name"], "type": "str", "nullable": True,
                             "default": None, "choice_meta": meta})
    path.write_text(yaml.safe_dump(catalog))
    plan = Plan(load_catalog("llm", tmp_path), load_rules("llm", tmp_path))
    assert mentioned_values(plan, "kernel_name") == {"k1", "k2"}


def test_mentioned_values_of_the_toy_rules(plan):
    from accord.resolver.explaining.explain import mentioned_values

    assert mentioned_values(plan, "page_size") == {16, 7}        # a default's value, a conflict's `==`
    assert mentioned_values(plan, "attention_backend") == {"fa3", "flashinfer", "triton", "torch_native"}


def test_a_default_coming_back_is_no_conflict_of_its_own(tmp_path, capsys):
    """Mixtral 8x7B on H100s with --tp 3: 32 heads do not split three ways, and separating that
    conflict brings the default tp 1 back, whose weights do not fit one GPU. Defaults are free: the
    tp fixes of the heads conflict are verified against every rule, so they answer the weights too,
    and the report shows one conflict reading the typed 3 (not "tp_size = 1 (unset)")."""
    from accord.resolver.commands import resolve as resolve_cmd

    config = {"architectures": ["MixtralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
              "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
              "num_local_experts": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
              "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    code = resolve_cmd.main(["--facts", "h100", "--model-path", str(tmp_path), "--tp", "3", "--json"])
    assert code == api.EXIT_CONFLICT
    (heads,) = json.loads(capsys.readouterr().out)["conflicts"]
    assert "tp_size" in heads["flags"]
    assert "tp_size = 3" in heads["proof"][0]["reads"]
    assert heads["fixes"][0] in ("--tp-size 4", "--tp-size 2")


def test_relax_answers_a_rewrite_that_uncovers_another_with_that_rules_own_rewrite():
    """Under DP attention upstream rescales a typed --chunked-prefill-size and then a typed
    --schedule-conservativeness; the first conflict's minimal flags hide the second, so --relax
    answers them in rounds, each with its own rule's rewrite, and lands on upstream's values
    (oracle case r4219-0009) instead of undoing --dp-size."""
    from tests.differential.score import accord_answer, load_fixtures

    fixture = load_fixtures([Path(__file__).parent / "differential" / "fixtures" / "llm_oracle_r4219.json"])
    case = next(c for c in fixture["cases"] if c["id"] == "r4219-0009")
    upstream = fixture["oracle"]["r4219-0009"]["resolved"]
    answer = accord_answer(case, relax=True)
    assert answer["status"] == "error" and answer["relaxed"]["status"] == "ok"
    relaxed = answer["relaxed"]["values"]
    assert relaxed["dp_size"] == upstream["attn_dp_size"] == 4  # the typed DP width is kept
    for name in ("chunked_prefill_size", "schedule_conservativeness"):
        assert relaxed[name] == upstream[name], name
