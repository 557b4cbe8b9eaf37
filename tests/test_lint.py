"""`accord rules --lint`: each class of rule-set mistake is caught, a clean set passes."""

import yaml

from resolver.catalog import load_catalog
from resolver.lint import lint
from resolver.rules import load_rules
from tests.toy import B200, CPU, H100, RULES, write_toy

FACT_KEYS = {"platform", "gpu.sm", "gpu.count", "gpu.mem_gib", "cuda", "model.num_attention_heads"}
PRESETS = {"h100": H100, "b200": B200, "cpu": CPU}


def _lint(tmp_path, extra_rules=(), replace=None):
    write_toy(tmp_path)
    rules = dict(RULES, rules=(replace if replace is not None else RULES["rules"]) + list(extra_rules))
    (tmp_path / "llm" / "toy.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    return lint(load_catalog("llm", tmp_path), load_rules("llm", tmp_path), FACT_KEYS, PRESETS)


def test_the_toy_rule_set_is_clean(tmp_path):
    assert _lint(tmp_path) == []


def test_unknown_flags_and_facts_are_named(tmp_path):
    problems = _lint(tmp_path, [{"id": "x.bad", "kind": "conflict", "when": "tp_sise > 1 and gpu.smm == 90",
                                 "reason": "typo"}])
    assert any("unknown flag 'tp_sise'" in p for p in problems)
    assert any("unknown fact 'gpu.smm'" in p for p in problems)


def test_a_value_outside_the_domain_is_a_rule_that_never_fires(tmp_path):
    problems = _lint(tmp_path, [{"id": "x.never", "kind": "conflict", "when": "attention_backend == 'fa-3'",
                                 "reason": "typo"}])
    assert any("x.never" in p and "'fa-3'" in p and "never fire" in p for p in problems)


def test_prefer_and_default_for_one_flag_is_refused(tmp_path):
    problems = _lint(tmp_path, [{"id": "x.both", "kind": "default", "flag": "attention_backend",
                                 "value": "triton", "reason": "clash"}])
    assert any("both prefer and default" in p for p in problems)


def test_cycles_among_defaults_are_found(tmp_path):
    problems = _lint(tmp_path, [
        {"id": "x.a", "kind": "default", "flag": "tp_size", "value": "dp_size", "reason": "a"},
        {"id": "x.b", "kind": "default", "flag": "dp_size", "value": "tp_size", "reason": "b"}])
    assert any(p.startswith("cycle among defaults") for p in problems)


def test_a_preset_where_the_defaults_are_illegal_is_reported(tmp_path):
    problems = _lint(tmp_path, [{"id": "x.no_cpu", "kind": "require", "require": "platform != 'cpu'",
                                 "reason": "no CPU"}])
    assert problems == ["preset cpu: the catalog defaults have no legal configuration (rules x.no_cpu)"]
