"""The one preference ranking (resolver/explaining/ranking.py, data in rules/preferences/): the
answers an operator would apply, and every place that picks one answer following it.

Each "follows the ranking" test changes the preference data (upstream's fastest-first orders
reversed) and checks that the answer of that place changes with it: the place asks the shared
ranking rather than an order of its own.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from accord.resolver import api
from accord.resolver.cli import main
from accord.resolver.explaining import ranking as preference
from accord.resolver.explaining.diagnose import find_conflicts
from accord.resolver.explaining.ranking import (
    SpeedOrder,
    check_preferences,
    kv_floor_holds,
    nearer_sizes,
    preferences_for,
)
from accord.resolver.exploring import dryrun, matrix
from accord.resolver.facts.machine import load_facts, load_preset
from tests.operator_fixes import MODELS, cases, judge

LLAMA_70B = str(MODELS / "meta-llama" / "Llama-3.1-70B-Instruct")
LLAMA_8B = str(MODELS / "meta-llama" / "Llama-3.1-8B-Instruct")
DEEPSEEK_V3 = str(MODELS / "deepseek-ai" / "DeepSeek-V3")
QWEN3_235B = str(MODELS / "Qwen" / "Qwen3-235B-A22B")


def _facts(preset: str, model: str | None = None):
    return load_facts(preset, [], model_path=model, system="llm")


@pytest.fixture
def plan():
    return api.plan_for("llm")


@pytest.fixture
def slowest_first(plan, monkeypatch):
    """The preference data with every fastest-first order reversed (for the plan with known-bad
    rules as hard rules too, which the matrix solves with)."""
    for each in (plan, api.plan_for("llm", strict=True)):
        prefs = preferences_for(each)
        reversed_speed = {name: SpeedOrder(tuple((when, tuple(reversed(order))) for when, order in o.cases), ())
                          for name, o in prefs.speed.items()}
        monkeypatch.setitem(preference._LOADED, each, dataclasses.replace(prefs, speed=reversed_speed))
    return plan


# -- the data ------------------------------------------------------------------------------------

@pytest.mark.parametrize("system", ["llm", "diffusion"])
def test_the_preference_data_names_only_what_the_rules_know(system):
    check_preferences(api.plan_for(system))  # raises UsageError on an unknown flag or expression


def test_every_speed_order_cites_upstream():
    import yaml
    data = yaml.safe_load((preference.PREFERENCES_DIR / "llm.yaml").read_text())
    for name, entry in data["fastest_first"].items():
        assert "same_as" in entry or "sglang/srt/" in entry["ref"], name


def test_nearer_sizes_put_8_and_4_before_2_for_a_typed_6(plan):
    sizes = nearer_sizes(plan, 6, {"gpu.count": 8})
    assert sizes[:2] == [8, 4] and sizes.index(2) > 1


def test_a_typed_zero_size_gets_sizes_from_one_up_and_a_conflict_not_a_crash(plan):
    """`--ep-size 0` has no ratio to be near: the sizes to try start at 1, and the launch is
    refused with an explanation (it used to end in a ZeroDivisionError traceback)."""
    assert nearer_sizes(plan, 0, {"gpu.count": 8}, "ep_size") == [1, 2, 4, 8]
    with pytest.raises(api.ConflictError) as err:
        api.resolve("llm", {"ep_size": 0}, load_preset("a100"))
    assert err.value.conflicts and all(c.fixes for c in err.value.conflicts)


def test_the_kv_floor_holds_at_tp_4_but_not_at_tp_2_for_a_70b_model_on_h100(plan):
    # bf16 70B: ~129.5 GiB of weights; tp 2 leaves ~1.3 GiB of a ~66 GiB share per GPU, a few
    # thousand tokens at 160 KiB per token per rank, far below one 131072-token request.
    facts = _facts("h100", LLAMA_70B)
    for tp, holds in ((2, False), (4, True), (8, True)):
        user = {"model_path": LLAMA_70B, "tp_size": tp}
        assert kv_floor_holds(plan, user, facts, plan.decisions(user, facts)) is holds, tp


# -- the cases ---------------------------------------------------------------------------

def _first_fix(plan, user, facts):
    conflicts = find_conflicts(plan, user, facts)
    return conflicts, conflicts[0].fixes[0]


def test_70b_tp6_first_fix_is_tp_8_or_4_and_nothing_drops_the_model(plan):
    facts = _facts("h100", LLAMA_70B)
    user = {"model_path": LLAMA_70B, "tp_size": 6}
    conflicts, first = _first_fix(plan, user, facts)
    assert len(conflicts) == 1  # the default tp 1 coming back is no conflict of its own
    assert dict(first.changes) in ({"tp_size": 8}, {"tp_size": 4})
    assert all("model_path" not in fix.flags() for c in conflicts for fix in c.fixes)
    relaxed = api.resolve("llm", user, facts, relax=True)
    assert relaxed.values["model_path"] == LLAMA_70B and relaxed.values["tp_size"] in (4, 8)
    with pytest.raises(api.ConflictError) as err:
        api.resolve("llm", user, facts)
    report = err.value.to_dict()
    assert all(chain["dropped"] != "model_path" for c in report["conflicts"] for chain in c["chains"])
    assert all(LLAMA_70B in fix["command"] for c in report["conflicts"] for fix in c["fix_details"])


def test_70b_tp1_first_fix_leaves_a_real_kv_pool(plan):
    facts = _facts("h100", LLAMA_70B)
    user = {"model_path": LLAMA_70B, "tp_size": 1}
    conflicts, first = _first_fix(plan, user, facts)
    assert conflicts[0].typed() == ("tp_size",)  # the typed 1 is named, though it is the default
    fixed = first.apply(user)
    assert kv_floor_holds(plan, fixed, facts, plan.decisions(fixed, facts))
    assert all(name != "quantization" for c in conflicts for fix in c.fixes for name in fix.flags())


def test_a_typed_size_too_small_for_the_weights_is_what_the_conflict_names(plan):
    # DeepSeek-V3's FP8 weights (~640 GB) do not fit four B200s: the report names the typed
    # --tp-size 4, not "the defaults themselves", and never proposes another quantization.
    facts = _facts("b200", DEEPSEEK_V3)
    conflicts, first = _first_fix(plan, {"model_path": DEEPSEEK_V3, "tp_size": 4}, facts)
    assert conflicts[0].typed() == ("tp_size",) and dict(first.changes) == {"tp_size": 8}
    assert all("quantization" not in fix.flags() for c in conflicts for fix in c.fixes)


def test_nnodes_2_without_an_address_is_one_conflict_with_a_working_first_fix(plan, capsys):
    argv = ["resolve", "--json", "--facts", "h100", "--model-path", LLAMA_70B, "--tp", "16", "--nnodes", "2"]
    assert main(argv) == 3
    data = json.loads(capsys.readouterr().out)
    (conflict,) = data["conflicts"]
    assert "nnodes = 2" in conflict["proof"][0]["reads"] and "unset), nnodes = 1" not in json.dumps(conflict)
    first = conflict["fix_details"][0]
    assert [c["flag"] for c in first["changes"]] == ["dist_init_addr"] and first["fill_in"]
    command = [w.replace("HOST:PORT", "10.0.0.1:25000") for w in data["fix_all"]["command"]]
    assert main(["resolve", "--facts", "h100", *command]) == 0


def test_eagle_without_a_draft_model_offers_the_draft_path(plan):
    facts = _facts("h100", LLAMA_8B)
    conflicts, first = _first_fix(plan, {"model_path": LLAMA_8B, "speculative_algorithm": "EAGLE"}, facts)
    assert dict(first.changes) == {"speculative_draft_model_path": "DRAFT_MODEL_PATH"} and first.fill_in
    assert any(fix.drops == ("speculative_algorithm",) for fix in conflicts[0].fixes)


@pytest.mark.parametrize("preset, model, backend, fastest", [
    ("b200", LLAMA_8B, "fa3", "trtllm_mha"),
    ("h200", DEEPSEEK_V3, "trtllm_mla", "fa3"),
])
def test_a_backend_on_the_wrong_gpu_is_fixed_and_relaxed_to_the_fastest_legal_one(plan, preset, model, backend,
                                                                               fastest):
    facts = _facts(preset, model)
    user = {"model_path": model, "tp_size": 8, "attention_backend": backend}
    _, first = _first_fix(plan, user, facts)
    assert dict(first.changes) == {"attention_backend": fastest}
    relaxed = api.resolve("llm", user, facts, relax=True)
    assert relaxed.values["attention_backend"] == fastest != "torch_native"


@pytest.mark.parametrize("runner", ["aiter", "intel_xpu"])
def test_rocm_and_xpu_moe_runners_are_refused_on_h100(runner):
    facts = _facts("h100", str(MODELS / "Qwen" / "Qwen3-30B-A3B"))
    with pytest.raises(api.ConflictError) as err:
        api.resolve("llm", {"model_path": str(MODELS / "Qwen" / "Qwen3-30B-A3B"), "moe_runner_backend": runner},
                    facts)
    assert err.value.conflicts[0].rules == ("moe.runner.platform",)


@pytest.mark.parametrize("preset, model, extra", [
    ("h200", DEEPSEEK_V3, []),
    ("b200", DEEPSEEK_V3, ["--moe-a2a-backend", "deepep"]),
    ("h200", QWEN3_235B, []),
    ("b200", str(MODELS / "Qwen" / "Qwen3-30B-A3B"), []),
])
def test_dp_attention_configs_round_trip_through_config(capsys, tmp_path, preset, model, extra):
    argv = ["--facts", preset, "--model-path", model, "--tp", "8", "--enable-dp-attention", "--dp", "8", *extra]
    assert main(["resolve", "--json", *argv]) == 0
    printed = capsys.readouterr().out
    saved = tmp_path / "resolved.json"
    saved.write_text(printed)
    assert main(["resolve", "--json", "--facts", preset, "--config", str(saved)]) == 0
    assert json.loads(capsys.readouterr().out)["hash"] == json.loads(printed)["hash"]


def test_an_old_value_spelling_is_not_a_value_of_its_own(plan):
    facts = _facts("h200", DEEPSEEK_V3)
    _, choices = dryrun.dry_run("llm", {"model_path": DEEPSEEK_V3, "tp_size": 8}, facts, ["attention_backend"])
    values = set(choices[0].legal) | {v for v, _ in choices[0].excluded}
    assert "cutedsl_mla" in values and "tokenspeed_mla" not in values


# -- defaults are free ---------------------------------------------------------------------------

def test_dry_run_lists_the_legal_tp_sizes_of_a_model_that_does_not_fit_at_tp_1(capsys):
    assert main(["resolve", "--dry-run", "--json", "--facts", "h100", "--model-path", LLAMA_70B,
                 "--flag", "tp_size"]) == 0
    (choice,) = json.loads(capsys.readouterr().out)["choices"]
    assert choice["legal"] == [2, 4, 8] and choice["chosen"] == 4
    assert "mem.weights.fit_gpu" in choice["source"]


def test_a_matrix_keeps_a_model_whose_default_tp_does_not_fit():
    presets = {"h100": load_facts("h100", [], system="llm")}
    models = {m: {"h100": _facts("h100", m)} for m in (LLAMA_70B, LLAMA_8B)}
    axis = matrix.Axis("attention_backend", ("fa3", "flashinfer"))
    result = matrix.generate("llm", presets, [axis], {}, "all", models=models)
    big = [row for row in result.rows if row["model"] == LLAMA_70B]
    assert big and all("--tp-size" in row["argv"] for row in big)


# -- one ranking everywhere ----------------------------------------------------------------------

B200_FA3 = {"model_path": LLAMA_8B, "attention_backend": "fa3"}


def test_conflict_fixes_follow_the_ranking(plan, slowest_first):
    facts = _facts("b200", LLAMA_8B)
    _, first = _first_fix(plan, B200_FA3, facts)
    assert dict(first.changes) == {"attention_backend": "triton"}  # the slowest listed, now first


def test_the_combined_fix_and_relax_follow_the_ranking(plan, slowest_first, capsys):
    facts = _facts("b200", LLAMA_8B)
    assert api.resolve("llm", B200_FA3, facts, relax=True).values["attention_backend"] == "triton"
    assert main(["resolve", "--json", "--facts", "b200", "--model-path", LLAMA_8B, "--attention-backend", "fa3",
                 "--tp", "2"]) == 3
    fix_all = json.loads(capsys.readouterr().out)["fix_all"]
    assert [c["to"] for c in fix_all["changes"]] == ["triton"]


def test_the_configurator_one_click_fix_follows_the_ranking(plan, slowest_first, monkeypatch):
    from accord.resolver.configurator import answers, outcomes
    monkeypatch.setattr(outcomes, "OUTCOMES", outcomes.Outcomes())
    status, _, body = answers.answer("fix", {"facts": "b200", "args": ["--model-path", LLAMA_8B,
                                                                       "--attention-backend", "fa3"],
                                             "conflict": 0, "fix": 0})
    assert status == 200 and json.loads(body)["set"] == {"attention_backend": "triton"}


def test_dry_run_order_follows_the_ranking(plan, slowest_first):
    facts = _facts("b200", LLAMA_8B)
    _, (choice,) = dryrun.dry_run("llm", {"model_path": LLAMA_8B}, facts, ["attention_backend"])
    listed = [v for v in choice.legal if v in ("trtllm_mha", "fa4", "flashinfer", "triton")]
    assert listed == ["triton", "flashinfer", "fa4", "trtllm_mha"]


def test_dry_run_chosen_value_follows_the_ranking(plan, monkeypatch):
    monkeypatch.setitem(preference._LOADED, plan, dataclasses.replace(preferences_for(plan), kv_floor=None))
    facts = _facts("h100", LLAMA_70B)
    _, (choice,) = dryrun.dry_run("llm", {"model_path": LLAMA_70B}, facts, ["tp_size"])
    assert choice.chosen == 2  # without the KV floor, the first legal candidate


def test_matrix_rows_follow_the_ranking(plan, slowest_first):
    presets = {"b200": load_facts("b200", [], system="llm")}
    # The first row starts from (b200, auto); both backends cover as many new pairs, so the
    # ranking decides which completes it.
    axes = [matrix.Axis("kv_cache_dtype", ("auto",)), matrix.Axis("attention_backend", ("trtllm_mha", "triton"))]
    rows = matrix.generate("llm", presets, axes, {}, "pairwise", seed=0).rows
    assert rows[0]["attention_backend"] == "triton"


# -- the operator's fixes ------------------------------------------------------------------------

def test_the_first_fix_is_the_operators_on_at_least_90_percent_of_wrong_commands():
    verdicts = [judge(case) for case in cases()]
    assert len(verdicts) >= 25
    missed = [v.id for v in verdicts if not v.matches]
    assert len(missed) <= len(verdicts) // 10, missed
    for v in verdicts:
        assert v.conflicts >= 1, f"{v.id} resolves: not a wrong command"
        assert v.combined_keeps_model and v.combined_resolves, v.id
        assert v.relax_keeps_model and not v.relax_slower, (v.id, v.relax_slower)


# -- messages ------------------------------------------------------------------------------------

def test_why_shows_the_branch_that_fired_wrapped_to_the_terminal(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["why", "attention_backend", "--facts", "b200", "--model-path", DEEPSEEK_V3, "--tp", "8"]) == 0
    out = capsys.readouterr().out
    assert "chose trtllm_mla when" in out
    assert all(len(line) <= 60 for line in out.splitlines() if " " in line.strip())


def test_resolve_help_opens_with_examples_and_closes_with_the_flag_groups(capsys):
    with pytest.raises(SystemExit):
        main(["resolve", "--help"])
    out = capsys.readouterr().out
    assert out.index("examples:") < out.index("options:") < out.index("llm flags by group")
    assert "  accord resolve --facts" in out
    assert "parallel (" in out[out.index("llm flags by group"):]


def test_the_configurator_dry_run_frees_a_default_as_the_cli_does(capsys, monkeypatch):
    from accord.resolver.configurator import answers, outcomes
    monkeypatch.setattr(outcomes, "OUTCOMES", outcomes.Outcomes())
    args = ["--model-path", LLAMA_70B, "--flag", "tp_size"]
    status, _, body = answers.answer("dry-run", {"facts": "h100", "args": args})
    assert main(["resolve", "--dry-run", "--json", "--facts", "h100", *args]) == 0
    assert status == 200 and body == capsys.readouterr().out


def test_a_conflict_report_says_what_an_old_value_spelling_became(capsys):
    assert main(["resolve", "--facts", "h200", "--model-path", DEEPSEEK_V3, "--tp", "8",
                 "--attention-backend", "tokenspeed_mla"]) == 3
    err = capsys.readouterr().err
    assert "you set   --attention-backend cutedsl_mla" in err
    assert "note: --attention-backend tokenspeed_mla is another name for cutedsl_mla" in err



def _tune_tie(plan):
    """Which of two tune candidates the cost model cannot tell apart (the same flags set, the same
    predicted run) comes first on an H100: the one pinning fa3, or the one pinning flashinfer."""
    from accord.resolver.exploring.tune_candidates import Candidate, tie_break
    from accord.resolver.solving.solve import Env

    env = Env(plan, {}, _facts("h100"), {})
    baseline = Candidate(pins={}, predicted={}, stage="layout")
    fa3, flashinfer = (Candidate(pins={"attention_backend": name}, predicted={}, stage="attention")
                       for name in ("fa3", "flashinfer"))
    return "fa3" if tie_break(fa3, baseline, env) < tie_break(flashinfer, baseline, env) else "flashinfer"


def test_tune_breaks_ties_by_upstreams_order(plan):
    assert _tune_tie(plan) == "fa3"


def test_tune_tie_break_follows_the_ranking(slowest_first):
    assert _tune_tie(slowest_first) == "flashinfer"
