"""The solver: user values are constants, preferences are honoured, defaults follow dependencies."""

import pytest

from accord.resolver import api
from tests.toy import B200, CPU, H100, toy_plan


@pytest.fixture
def plan(tmp_path, monkeypatch):
    plan = toy_plan(tmp_path)
    monkeypatch.setattr(api, "plan_for", lambda system: plan)
    return plan


def test_prefer_takes_the_first_legal_candidate_per_machine(plan):
    assert api.resolve("llm", {}, H100).values["attention_backend"] == "fa3"
    assert api.resolve("llm", {}, B200).values["attention_backend"] == "flashinfer"
    assert api.resolve("llm", {}, CPU).values["attention_backend"] == "torch_native"


def test_prefer_skips_a_candidate_that_would_break_a_user_value(plan):
    config = api.resolve("llm", {"page_size": 7}, B200)
    assert config.values["attention_backend"] == "triton"
    assert config.values["page_size"] == 7


def test_default_depends_on_a_decision(plan):
    config = api.resolve("llm", {"page_size": 7}, B200)
    assert config.provenance["page_size"] == {"source": "user", "via": "cli"}
    triton = api.resolve("llm", {"attention_backend": "triton"}, B200)
    assert triton.values["page_size"] == 16
    assert triton.provenance["page_size"] == {"source": "rule", "rule": "page.by_backend"}


def test_default_expression_reads_user_flags_and_facts(plan):
    assert api.resolve("llm", {"tp_size": 8}, H100).values["chunked_prefill_size"] == 16384
    assert api.resolve("llm", {"tp_size": 2}, H100).values["chunked_prefill_size"] == 8192
    assert api.resolve("llm", {}, CPU).values["chunked_prefill_size"] is None


def test_user_values_are_never_changed(plan):
    user = {"tp_size": 4, "attention_backend": "triton", "kv_cache_dtype": "fp8_e4m3"}
    config = api.resolve("llm", user, H100)
    assert {k: config.values[k] for k in user} == user
    assert all(config.provenance[k]["source"] == "user" for k in user)


def test_provenance_names_every_source(plan):
    config = api.resolve("llm", {"tp_size": 2}, H100, sources={"tp_size": "config:a.yaml"})
    assert config.provenance["tp_size"] == {"source": "user", "via": "config:a.yaml"}
    assert config.provenance["attention_backend"] == {"source": "rule", "rule": "attn.backend.order"}
    assert config.provenance["nnodes"] == {"source": "default"}


def test_candidate_conditions_read_facts(plan):
    assert api.resolve("llm", {}, H100).values["sampling_backend"] == "flashinfer"
    no_fi = {k: v for k, v in H100.items() if k != "packages.flashinfer"}
    assert api.resolve("llm", {}, no_fi).values["sampling_backend"] == "pytorch"


def test_same_input_same_bytes(plan):
    first = api.resolve("llm", {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3"}, H100).to_json()
    second = api.resolve("llm", {"kv_cache_dtype": "fp8_e4m3", "tp_size": 8}, dict(reversed(H100.items())))
    assert first == second.to_json()


def test_resolving_a_resolved_config_changes_nothing(plan):
    config = api.resolve("llm", {"tp_size": 8}, B200)
    again = api.resolve("llm", dict(config.values), B200)
    assert again.values == config.values
    assert again.hash == config.hash


def test_unknown_model_fact_is_reported_not_guessed(plan):
    config = api.resolve("llm", {"tp_size": 8}, H100)
    assert any("model.heads.divide" in w and "model.num_attention_heads" in w for w in config.warnings)
    with pytest.raises(api.ConflictError):
        api.resolve("llm", {"tp_size": 8}, {**H100, "model.num_attention_heads": 12})


def test_warn_rules_attach_messages(plan):
    config = api.resolve("llm", {"kv_cache_dtype": "fp8_e4m3"}, H100)
    assert "[kv.fp8.warn] FP8 KV without scales uses 1.0." in config.warnings


def test_unknown_flag_name_is_a_usage_error(plan):
    with pytest.raises(api.UsageError):
        api.resolve("llm", {"tp": 2}, H100)


def test_a_rule_that_holds_on_catalog_defaults_is_still_enforced_once_its_flags_are_set(plan):
    # With nothing set, the DP-attention and FP4 rules read only catalog defaults and always hold;
    # the plan skips them for such launches, never for a launch that sets the flags they read.
    assert api.resolve("llm", {}, H100).values["kv_cache_dtype"] == "auto"
    with pytest.raises(api.ConflictError) as caught:
        api.resolve("llm", {"tp_size": 8, "dp_size": 3, "enable_dp_attention": True}, H100)
    assert caught.value.conflicts[0].rules == ("par.dp_attention.divides",)
    # Set to its default value first, then to an illegal one: what counts is the value, not the set flag.
    assert api.resolve("llm", {"kv_cache_dtype": "auto"}, H100).values["kv_cache_dtype"] == "auto"
    with pytest.raises(api.ConflictError):
        api.resolve("llm", {"kv_cache_dtype": "fp4_e2m1"}, H100)


def test_a_warning_that_cannot_apply_on_catalog_defaults_still_applies_when_its_flag_is_set(plan):
    assert not any("kv.fp8.warn" in w for w in api.resolve("llm", {}, H100).warnings)
    assert not any("kv.fp8.warn" in w for w in api.resolve("llm", {"kv_cache_dtype": "auto"}, H100).warnings)
    assert "[kv.fp8.warn] FP8 KV without scales uses 1.0." in api.resolve(
        "llm", {"kv_cache_dtype": "fp8_e4m3"}, H100).warnings


def test_a_plan_that_met_other_launches_first_decides_as_a_fresh_plan_does(plan, tmp_path):
    # What a plan keeps per set of set flags (folded rules, structure) never changes an answer:
    # each launch solved by a plan that saw no other gives the same values, origins and verdicts.
    launches = [({}, H100), ({"page_size": 7}, B200), ({"attention_backend": "triton"}, B200),
                ({"tp_size": 8, "kv_cache_dtype": "fp8_e4m3"}, H100), ({}, CPU), ({"tp_size": 2}, B200)]
    for i, (user, facts) in enumerate(launches):
        fresh = toy_plan(tmp_path / f"fresh{i}").solve(user, facts)
        shared = plan.solve(user, facts)
        assert (shared.values, shared.origin, shared.satisfiable) == (fresh.values, fresh.origin, fresh.satisfiable)
        assert [(r.id, k) for r, k in shared.unknown] == [(r.id, k) for r, k in fresh.unknown]


def test_a_derived_value_constant_on_catalog_defaults_still_follows_the_flags_once_set(tmp_path):
    # `cuda_graph_max_bs` reads only flags: with none of them set its value is the same for every
    # launch (the plan keeps it per set of set flags); setting one must bring the rule back.
    import copy

    import yaml

    from accord.resolver.language.catalog import load_catalog
    from accord.resolver.language.ruleset import load_rules
    from accord.resolver.solving.solve import Plan
    from tests.toy import CATALOG, RULES

    catalog, rules = copy.deepcopy(CATALOG), copy.deepcopy(RULES)
    catalog["flags"].append({"name": "cuda_graph_max_bs", "flags": ["--cuda-graph-max-bs"], "type": "int",
                             "nullable": True, "default": None})
    rules["rules"].append({"id": "cg.bs.dp", "kind": "default", "flag": "cuda_graph_max_bs",
                           "reason": "DP attention captures per rank", "when": "enable_dp_attention",
                           "value": "tp_size * 32"})
    (tmp_path / "llm").mkdir()
    (tmp_path / "llm" / "flags.yaml").write_text(yaml.safe_dump(catalog))
    (tmp_path / "llm" / "toy.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    plan = Plan(load_catalog("llm", tmp_path), load_rules("llm", tmp_path))
    for _ in range(2):
        plain = plan.solve({}, H100)
        assert (plain.values["cuda_graph_max_bs"], plain.origin["cuda_graph_max_bs"]) == (None, None)
        dp = plan.solve({"enable_dp_attention": True, "tp_size": 4, "dp_size": 2}, H100)
        assert (dp.values["cuda_graph_max_bs"], dp.origin["cuda_graph_max_bs"]) == (128, "cg.bs.dp")
        off = plan.solve({"enable_dp_attention": False, "tp_size": 2}, H100)
        assert off.values["cuda_graph_max_bs"] is None


def test_a_rule_on_choice_metadata_steers_a_decision(tmp_path):
    """`meta(attention_backend).sms` is read while the solver tries candidates: on SM 8.0 the
    preferred flashinfer (built for SM 9.0 and 10.0 only) is skipped for triton."""
    from accord.resolver.language.catalog import load_catalog
    from accord.resolver.language.ruleset import load_rules
    from accord.resolver.solving.solve import Plan
    from tests.toy import A100, write_meta_toy
    write_meta_toy(tmp_path)
    plan = Plan(load_catalog("llm", tmp_path), load_rules("llm", tmp_path))
    on_a100 = plan.solve({}, A100)
    assert on_a100.values["attention_backend"] == "triton"
    assert plan.solve({}, B200).values["attention_backend"] == "flashinfer"
    assert not plan.solve({"attention_backend": "flashinfer"}, A100).satisfiable
