"""CI matrices: only legal rows, full pairwise coverage (checked by brute force), determinism."""

import itertools
import json

import pytest

from resolver import api
from resolver.matrix import Axis, generate, render
from resolver.testing import matrix_params
from tests.toy import B200, CPU, H100, toy_plan

PRESETS = {"h100": H100, "b200": B200, "cpu": CPU}
AXES = [Axis("attention_backend", ("fa3", "flashinfer", "triton", "torch_native")),
        Axis("kv_cache_dtype", ("auto", "fp8_e4m3", "fp4_e2m1")),
        Axis("page_size", (1, 7, 16))]


@pytest.fixture
def plan(tmp_path, monkeypatch):
    plan = toy_plan(tmp_path)
    monkeypatch.setattr(api, "plan_for", lambda system: plan)
    monkeypatch.setattr("resolver.matrix.plan_for", lambda system: plan)
    return plan


def _legal(plan, row):
    facts = PRESETS[row["facts"]]
    return plan.satisfiable({k: v for k, v in row.items() if k in {a.name for a in AXES}}, facts)


def test_all_strategy_is_exactly_the_legal_product(plan):
    matrix = generate("llm", PRESETS, AXES, {}, "all")
    brute = [dict(zip(["facts"] + [a.name for a in AXES], combo))
             for combo in itertools.product(PRESETS, *(a.values for a in AXES))]
    legal = [row for row in brute if _legal(plan, row)]
    assert [{k: r[k] for k in legal[0]} for r in matrix.rows] == legal


def test_pairwise_rows_are_legal_and_cover_every_legal_pair(plan):
    matrix = generate("llm", PRESETS, AXES, {}, "pairwise", seed=3)
    assert all(_legal(plan, row) for row in matrix.rows)
    names = ["facts"] + [a.name for a in AXES]
    values = {"facts": list(PRESETS), **{a.name: a.values for a in AXES}}
    brute_rows = [dict(zip(names, c)) for c in itertools.product(*(values[n] for n in names))]
    legal_rows = [r for r in brute_rows if _legal(plan, r)]
    legal_pairs = {((a, r[a]), (b, r[b])) for r in legal_rows for a, b in itertools.combinations(names, 2)}
    covered = {((a, r[a]), (b, r[b])) for r in matrix.rows for a, b in itertools.combinations(names, 2)}
    assert legal_pairs <= covered
    assert matrix.coverage() == {"legal": len(legal_pairs), "covered": len(legal_pairs), "percent": 100.0}
    assert len(matrix.rows) < len(legal_rows)


def test_illegal_pairs_name_the_rule_that_excludes_them(plan):
    matrix = generate("llm", PRESETS, AXES, {}, "pairwise")
    by_values = {json.dumps(i["values"], sort_keys=True): i["rules"] for i in matrix.illegal}
    assert by_values[json.dumps({"facts": "b200", "attention_backend": "fa3"}, sort_keys=True)] == ["attn.fa3.hopper"]
    assert by_values[json.dumps({"attention_backend": "flashinfer", "page_size": 7}, sort_keys=True)] == [
        "attn.flashinfer.page"]


def test_fixed_flags_apply_to_every_row(plan):
    matrix = generate("llm", PRESETS, AXES[:1], {"page_size": 7}, "pairwise")
    assert all(row["attention_backend"] != "flashinfer" for row in matrix.rows)


def test_same_seed_same_matrix_and_formats_are_stable(plan):
    first = render(generate("llm", PRESETS, AXES, {}, "pairwise", seed=7), "github")
    second = render(generate("llm", PRESETS, AXES, {}, "pairwise", seed=7), "github")
    assert first == second
    assert set(json.loads(first)) == {"include"}
    csv_text = render(generate("llm", PRESETS, AXES, {}, "3-wise", seed=1), "csv")
    assert csv_text.splitlines()[0] == "facts,attention_backend,kv_cache_dtype,page_size,args"


def test_github_output_shards_above_256_jobs(plan):
    wide = [Axis("tp_size", tuple(range(1, 11))), Axis("dp_size", tuple(range(1, 9))),
            Axis("kv_cache_dtype", ("auto", "fp8_e4m3"))]
    matrix = generate("llm", {"h100": {**H100, "gpu.count": 4096}, "b200": {**B200, "gpu.count": 4096}},
                      wide, {}, "all")
    assert len(matrix.rows) > 256
    shards = [json.loads(line) for line in render(matrix, "github").splitlines()]
    assert [s["shard"] for s in shards] == list(range(len(shards)))
    assert all(len(s["include"]) <= 256 for s in shards)
    assert sum(len(s["include"]) for s in shards) == len(matrix.rows)


def test_matrix_params_gives_pytest_params(plan, monkeypatch):
    monkeypatch.setattr("resolver.facts.load_facts", lambda name, system="llm": PRESETS[name])
    params = matrix_params("llm", ["h100", "cpu"], ["attention_backend"])
    assert {p.id for p in params} >= {"h100-fa3", "cpu-torch_native"}
    assert all(p.values[0]["args"].startswith("--attention-backend") for p in params)


def test_a_pair_legal_only_with_a_third_value_is_still_covered(tmp_path, monkeypatch):
    # Legality is not monotone: a_backend=x alone is illegal on B200 (the derived d_backend follows
    # it onto a Hopper-only kernel), but with kv_dtype=fp the derived backend changes and x is legal.
    import yaml

    from resolver.catalog import load_catalog
    from resolver.rules import load_rules
    from resolver.solve import Plan

    flags = [{"name": "a_backend", "flags": ["--a-backend"], "type": "enum", "choices": ["w", "x"], "default": "w"},
             {"name": "kv_dtype", "flags": ["--kv-dtype"], "type": "enum", "choices": ["auto", "fp"], "default": "auto"},
             {"name": "d_backend", "flags": ["--d-backend"], "type": "str", "nullable": True, "default": None}]
    rules = [{"id": "d.follows", "kind": "default", "flag": "d_backend", "reason": "r",
              "value": "'other' if kv_dtype == 'fp' else a_backend"},
             {"id": "d.x.hopper", "kind": "require", "when": "d_backend == 'x'", "require": "gpu.sm == 90",
              "reason": "x kernels are Hopper-only."}]
    (tmp_path / "llm").mkdir()
    (tmp_path / "llm" / "flags.yaml").write_text(yaml.safe_dump({"group": "t", "flags": flags}))
    (tmp_path / "llm" / "t.yaml").write_text(yaml.safe_dump({"area": "t", "rules": rules}, sort_keys=False))
    plan = Plan(load_catalog("llm", tmp_path), load_rules("llm", tmp_path))
    monkeypatch.setattr(api, "plan_for", lambda system: plan)
    monkeypatch.setattr("resolver.matrix.plan_for", lambda system: plan)
    axes = [Axis("a_backend", ("w", "x")), Axis("kv_dtype", ("auto", "fp"))]
    matrix = generate("llm", {"b200": B200}, axes, {}, "pairwise")
    rows = {(r["a_backend"], r["kv_dtype"]) for r in matrix.rows}
    assert ("x", "fp") in rows and ("x", "auto") not in rows
    assert matrix.coverage()["percent"] == 100.0
    assert matrix.illegal == [{"values": {"a_backend": "x", "kv_dtype": "auto"}, "rules": ["d.x.hopper"]}]


def test_max_rows_coverage_counts_what_is_left_out(plan):
    full = generate("llm", PRESETS, AXES, {}, "pairwise", seed=2)
    cut = generate("llm", PRESETS, AXES, {}, "pairwise", seed=2, max_rows=3)
    assert len(cut.rows) == 3 and cut.legal_tuples == full.legal_tuples
    assert cut.covered_tuples < cut.legal_tuples


def test_unconstrained_baseline_covers_every_pair(plan):
    from resolver.matrix import FACTS_AXIS, Space, covering_rows

    axes = [Axis(FACTS_AXIS, tuple(PRESETS))] + AXES
    rows, legal, covered = covering_rows(Space("llm", PRESETS, axes, {}), 2, 0, None, respect_rules=False)
    every = {((a.name, x), (b.name, y)) for a, b in itertools.combinations(axes, 2) for x in a.values for y in b.values}
    assert legal == covered == every and all("hash" not in row for row in rows)
