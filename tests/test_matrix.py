"""CI matrices: only legal rows, full pairwise coverage (checked by brute force), determinism,
rows judged with their own model's facts, GitHub Actions output."""

import itertools
import json
import re

import pytest
import yaml

from accord.resolver import api
from accord.resolver.cli import main
from accord.resolver.exploring.matrix import generate
from accord.resolver.exploring.matrix_axes import Axis
from accord.resolver.exploring.matrix_output import render, workflow
from accord.resolver.exploring.testing import matrix_params
from accord.resolver.language.catalog import load_catalog
from accord.resolver.language.ruleset import load_rules
from accord.resolver.solving.solve import Plan
from tests.toy import B200, CPU, H100, toy_plan, write_toy

PRESETS = {"h100": H100, "b200": B200, "cpu": CPU}
AXES = [Axis("attention_backend", ("fa3", "flashinfer", "triton", "torch_native")),
        Axis("kv_cache_dtype", ("auto", "fp8_e4m3", "fp4_e2m1")),
        Axis("page_size", (1, 7, 16))]


@pytest.fixture
def plan(tmp_path, monkeypatch):
    plan = toy_plan(tmp_path)
    monkeypatch.setattr(api, "plan_for", lambda system, strict=False: plan)
    monkeypatch.setattr("accord.resolver.exploring.matrix_axes.plan_for", lambda system, strict=False: plan)
    monkeypatch.setattr("accord.resolver.exploring.matrix_space.plan_for", lambda system, strict=False: plan)
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
    monkeypatch.setattr("accord.resolver.facts.machine.load_facts", lambda name, model_path=None, system="llm": PRESETS[name])
    params = matrix_params("llm", ["h100", "cpu"], ["attention_backend"])
    assert {p.id for p in params} >= {"h100-fa3", "cpu-torch_native"}
    assert all(p.values[0]["args"].startswith("--attention-backend") for p in params)


def test_a_pair_legal_only_with_a_third_value_is_still_covered(tmp_path, monkeypatch):
    # Legality is not monotone: a_backend=x alone is illegal on B200 (the derived d_backend follows
    # it onto a Hopper-only kernel), but with kv_dtype=fp the derived backend changes and x is legal.
    import yaml

    from accord.resolver.language.catalog import load_catalog
    from accord.resolver.language.ruleset import load_rules
    from accord.resolver.solving.solve import Plan

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
    monkeypatch.setattr(api, "plan_for", lambda system, strict=False: plan)
    monkeypatch.setattr("accord.resolver.exploring.matrix_axes.plan_for", lambda system, strict=False: plan)
    monkeypatch.setattr("accord.resolver.exploring.matrix_space.plan_for", lambda system, strict=False: plan)
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
    from accord.resolver.exploring.matrix_axes import FACTS_AXIS
    from accord.resolver.exploring.matrix_rows import covering_rows
    from accord.resolver.exploring.matrix_space import Space

    axes = [Axis(FACTS_AXIS, tuple(PRESETS))] + AXES
    rows, legal, covered = covering_rows(Space("llm", PRESETS, axes, {}), 2, 0, None, respect_rules=False)
    every = {((a.name, x), (b.name, y)) for a, b in itertools.combinations(axes, 2) for x in a.values for y in b.values}
    assert legal == covered == every and all("hash" not in row for row in rows)


# -- models: a model axis, every row judged with its own model's facts ------------------------------

MODEL_FLAG = {"group": "model", "flags": [
    {"name": "model_path", "flags": ["--model-path"], "type": "str", "nullable": True, "default": None}]}
WIDE, NARROW = "/models/wide-64-heads", "/models/narrow-12-heads"
MODELS = {WIDE: {"h100": {**H100, "model.num_attention_heads": 64}, "b200": {**B200, "model.num_attention_heads": 64}},
          NARROW: {"h100": {**H100, "model.num_attention_heads": 12}, "b200": {**B200, "model.num_attention_heads": 12}}}
TP = Axis("tp_size", (1, 2, 3, 4, 6, 8))
PRESETS_BY_MODEL = {"h100": H100, "b200": B200}   # no model path: the presets as they are


@pytest.fixture
def model_plan(tmp_path, monkeypatch):
    """The toy rules with a --model-path flag (a model axis sets it in every row)."""
    write_toy(tmp_path)
    (tmp_path / "llm" / "flags_model.yaml").write_text(yaml.safe_dump(MODEL_FLAG))
    plan = Plan(load_catalog("llm", tmp_path), load_rules("llm", tmp_path))
    monkeypatch.setattr(api, "plan_for", lambda system, strict=False: plan)
    monkeypatch.setattr("accord.resolver.exploring.matrix_axes.plan_for", lambda system, strict=False: plan)
    monkeypatch.setattr("accord.resolver.exploring.matrix_space.plan_for", lambda system, strict=False: plan)
    return plan


def test_a_model_axis_judges_each_row_with_its_own_model(model_plan):
    presets = {"h100": H100, "b200": B200}
    matrix = generate("llm", presets, [TP, AXES[0]], {}, "pairwise", models=MODELS)
    assert [a.name for a in matrix.axes][:2] == ["facts", "model"]
    for row in matrix.rows:
        facts = MODELS[row["model"]][row["facts"]]
        assert model_plan.satisfiable({"model_path": row["model"], "tp_size": row["tp_size"],
                                       "attention_backend": row["attention_backend"]}, facts)
        assert row["argv"][:2] == ["--model-path", row["model"]]
        assert api.resolve("llm", {"model_path": row["model"], "tp_size": row["tp_size"],
                                   "attention_backend": row["attention_backend"]}, facts).hash[:16] == row["hash"]
    tps = {m: {r["tp_size"] for r in matrix.rows if r["model"] == m} for m in MODELS}
    # upstream: tp divides the heads; pairwise coverage then puts every legal (model, tp) pair in a row
    assert tps == {WIDE: {1, 2, 4, 8}, NARROW: {1, 2, 3, 4, 6}}
    illegal = {json.dumps(i["values"], sort_keys=True) for i in matrix.illegal}
    assert json.dumps({"model": NARROW, "tp_size": 8}, sort_keys=True) in illegal


def test_rows_carry_their_launch_argv_as_a_list(plan):
    matrix = generate("llm", PRESETS, AXES[:2], {"tp_size": 2}, "pairwise")
    for row in matrix.rows:
        assert row["argv"] == ["--tp-size", "2", "--attention-backend", row["attention_backend"],
                               "--kv-cache-dtype", row["kv_cache_dtype"]]
        assert row["args"] == " ".join(row["argv"])


def test_github_rows_have_a_readable_job_name(model_plan):
    matrix = generate("llm", {"h100": H100}, [TP], {}, "pairwise", models=MODELS)
    rows = json.loads(render(matrix, "github"))["include"]
    assert {r["name"] for r in rows} >= {"h100 / wide-64-heads / tp_size=8", "h100 / narrow-12-heads / tp_size=6"}
    assert len({r["name"] for r in rows}) == len(rows)


def test_workflow_runs_the_command_once_per_row_in_shards_of_at_most_256(plan):
    wide = [Axis("tp_size", tuple(range(1, 11))), Axis("dp_size", tuple(range(1, 9))),
            Axis("kv_cache_dtype", ("auto", "fp8_e4m3"))]
    matrix = generate("llm", {"h100": {**H100, "gpu.count": 4096}, "b200": {**B200, "gpu.count": 4096}},
                      wide, {}, "all")
    text, jobs = workflow(matrix, "pytest tests/gpu", "gpu-runner", ["accord", "matrix", "--facts", "h100,b200"])
    data = yaml.safe_load(text)
    assert jobs == len(data["jobs"]) == -(-len(matrix.rows) // 256) > 1
    included = [row for job in data["jobs"].values() for row in job["strategy"]["matrix"]["include"]]
    assert all(len(job["strategy"]["matrix"]["include"]) <= 256 for job in data["jobs"].values())
    assert [r["hash"] for r in included] == [r["hash"] for r in matrix.rows]
    job = next(iter(data["jobs"].values()))
    assert job["runs-on"] == "gpu-runner" and job["name"] == "${{ matrix.name }}"
    step = job["steps"][-1]
    assert step["run"] == "pytest tests/gpu" and step["env"]["ACCORD_ARGS"] == "${{ matrix.args }}"
    assert text.startswith("# Generated by Accord") and "accord matrix --facts h100,b200" in text


def test_emit_workflow_writes_the_file_and_prints_no_matrix(plan, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("accord.resolver.facts.machine.load_facts", lambda spec, model_path=None, system="llm": PRESETS[spec])
    target = tmp_path / "accord.yml"
    code = main(["matrix", "--facts", "h100,b200", "--axes", "attention_backend", "--emit-workflow", str(target),
                 "--run", "python -m mytests $ACCORD_ARGS"])
    out, err = capsys.readouterr()
    assert code == 0 and out == "" and f"wrote {target}" in err
    data = yaml.safe_load(target.read_text())
    (job,) = data["jobs"].values()
    assert job["steps"][-1]["run"] == "python -m mytests $ACCORD_ARGS"
    assert {r["attention_backend"] for r in job["strategy"]["matrix"]["include"]} == {"fa3", "flashinfer", "triton",
                                                                                     "torch_native"}
    code = main(["matrix", "--facts", "h100", "--axes", "attention_backend", "--run", "x"])
    assert code == 2 and "--emit-workflow" in capsys.readouterr().err
    code = main(["matrix", "--facts", "h100", "--axes", "attention_backend", "--emit-workflow",
                 str(tmp_path / "missing" / "a.yml"), "--run", "x"])
    assert code == 2 and not (tmp_path / "missing").exists()


# -- the real rules with real model configs ------------------------------------------------------------

DEEPSEEK_V3 = {   # deepseek-ai/DeepSeek-V3 config.json, the fields the model facts read
    "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_attention_heads": 128,
    "num_key_value_heads": 128, "num_hidden_layers": 61, "n_routed_experts": 256,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "max_position_embeddings": 163840, "vocab_size": 129280, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
LLAMA_70B = {     # meta-llama/Llama-3.1-70B-Instruct config.json, the same fields
    "architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "num_attention_heads": 64,
    "num_key_value_heads": 8, "num_hidden_layers": 80, "max_position_embeddings": 131072,
    "vocab_size": 128256, "torch_dtype": "bfloat16"}


def _model(root, name, config):
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def _matrix(capsys, *argv):
    code = main(["matrix", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out), err


@pytest.mark.parametrize("where", ["after --fix", "before --fix"])
def test_deepseek_matrix_includes_its_blackwell_mla_backend(tmp_path, capsys, where):
    """Issue 17: upstream's default attention backend for DeepSeek (MLA) on Blackwell is trtllm_mla, so
    a DeepSeek CI matrix on b200 must hold it; on Hopper (SM90) upstream rejects it."""
    deepseek = _model(tmp_path, "DeepSeek-V3", DEEPSEEK_V3)
    model = ["--model-path", deepseek]
    argv = ["--facts", "h100,b200", "--axes", "attention_backend", "--values",
            "attention_backend=trtllm_mla,flashinfer,triton"]
    data, _ = _matrix(capsys, *(argv + ["--fix", *model] if where == "after --fix" else model + argv))
    pairs = {(r["facts"], r["attention_backend"]) for r in data["rows"]}
    assert ("b200", "trtllm_mla") in pairs and ("h100", "trtllm_mla") not in pairs
    assert all(r["argv"][:2] == model for r in data["rows"])


def test_two_model_matrix_every_row_resolves_with_its_own_model(tmp_path, capsys):
    from accord.resolver.facts.machine import load_facts

    deepseek, llama = _model(tmp_path, "DeepSeek-V3", DEEPSEEK_V3), _model(tmp_path, "Llama-3.1-70B", LLAMA_70B)
    data, err = _matrix(capsys, "--facts", "h100,b200", "--model-path", f"{deepseek},{llama}", "--axes",
                        "attention_backend,tp_size", "--values", "attention_backend=trtllm_mla,flashinfer,fa3")
    assert "100.0%" in err and data["axes"]["model"] == [deepseek, llama]
    rows = data["rows"]
    assert {r["model"] for r in rows} == {deepseek, llama}
    for row in rows:
        user = {"model_path": row["model"], "attention_backend": row["attention_backend"], "tp_size": row["tp_size"]}
        config = api.resolve("llm", user, load_facts(row["facts"], model_path=row["model"]))
        assert config.hash[:16] == row["hash"]
        assert row["argv"] == ["--model-path", row["model"], "--attention-backend", row["attention_backend"],
                               "--tp-size", str(row["tp_size"])]
    # upstream: trtllm_mla serves MLA models only; tp must divide the heads (64 for Llama, 128 for DeepSeek)
    assert {r["model"] for r in rows if r["attention_backend"] == "trtllm_mla"} == {deepseek}
    assert {r["tp_size"] for r in rows} <= {1, 2, 4, 8}
    assert {r["tp_size"] for r in rows if r["model"] == llama} >= {2, 4, 8}


def test_model_path_both_before_and_after_fix_is_a_usage_error(tmp_path, capsys):
    deepseek = _model(tmp_path, "DeepSeek-V3", DEEPSEEK_V3)
    code = main(["matrix", "--facts", "b200", "--model-path", deepseek, "--axes", "attention_backend",
                 "--fix", "--model-path", deepseek])
    err = capsys.readouterr().err
    assert code == 2 and "both before --fix" in err and len(err.strip().splitlines()) == 1


def test_matrix_params_takes_models(model_plan, monkeypatch):
    monkeypatch.setattr("accord.resolver.facts.machine.load_facts",
                        lambda name, model_path=None, system="llm": MODELS.get(model_path, PRESETS_BY_MODEL)[name])
    params = matrix_params("llm", ["h100"], ["tp_size"], values={"tp_size": TP.values}, models=[WIDE, NARROW])
    rows = [p.values[0] for p in params]
    assert {(r["model"], r["tp_size"]) for r in rows} == {(WIDE, v) for v in (1, 2, 4, 8)} | {
        (NARROW, v) for v in (1, 2, 3, 4, 6)}
    assert {p.id for p in params} >= {"h100-wide-64-heads-8", "h100-narrow-12-heads-6"}
    (one,) = {tuple(p.values[0]["argv"][:2]) for p in matrix_params("llm", ["h100"], ["tp_size"],
                                                                    values={"tp_size": (1, 8)}, models=[WIDE])}
    assert one == ("--model-path", WIDE)


PLUGIN_TEST = """
def test_row(accord_row):
    assert accord_row["argv"][:2] == ["--tp-size", "2"]
    print("ROW", accord_row["facts"], accord_row["attention_backend"])
"""


def _pytest(tmp_path, *args):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "PYTHONPATH": os.pathsep.join([str(__import__("pathlib").Path(__file__).parents[1]),
                                          os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "accord.resolver.exploring.pytest_plugin", "-p", "no:cacheprovider",
                           "-q", "-s", "--rootdir", str(tmp_path), *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("fmt", ["json", "github"])
def test_pytest_plugin_runs_a_test_once_per_matrix_row(plan, tmp_path, fmt):
    matrix = generate("llm", PRESETS, AXES[:1], {"tp_size": 2}, "pairwise")
    (tmp_path / "matrix.txt").write_text(render(matrix, fmt))
    (tmp_path / "test_rows.py").write_text(PLUGIN_TEST)
    done = _pytest(tmp_path, "--accord-matrix", "matrix.txt", "test_rows.py")
    assert done.returncode == 0, done.stdout + done.stderr
    ran = sorted(re.findall(r"ROW (\S+) (\S+)", done.stdout))
    assert ran == sorted((r["facts"], r["attention_backend"]) for r in matrix.rows)
    assert f"{len(matrix.rows)} passed" in done.stdout


def test_pytest_plugin_skips_row_tests_without_a_matrix_and_rejects_a_bad_file(tmp_path):
    (tmp_path / "test_rows.py").write_text(PLUGIN_TEST)
    done = _pytest(tmp_path, "test_rows.py")
    assert done.returncode == 0 and "1 skipped" in done.stdout
    (tmp_path / "bad.json").write_text("[1, 2]")
    done = _pytest(tmp_path, "--accord-matrix", "bad.json", "test_rows.py")
    assert done.returncode != 0 and "not the JSON or YAML output of `accord matrix`" in done.stdout + done.stderr
