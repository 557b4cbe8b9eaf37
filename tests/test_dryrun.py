"""`accord resolve --dry-run`: legal, chosen and excluded values, each exclusion with its rules.

The mechanism is tested on the toy rule set and on small rule sets written here; the real rules
only for properties that hold whatever the rule authors write (every verdict agrees with the solver).
"""

import json
from pathlib import Path

import pytest
import yaml

from accord.resolver import api
from accord.resolver.api import ConflictError
from accord.resolver.cli import main
from accord.resolver.errors import UsageError
from accord.resolver.exploring.dryrun import backend_like, dry_run, mentioned_values, values_of
from accord.resolver.solving.launch import Launch
from accord.resolver.exploring.dryrun_text import render, render_short
from accord.resolver.facts.machine import load_facts
from accord.resolver.language.catalog import load_catalog
from accord.resolver.language.ruleset import load_rules
from accord.resolver.solving.solve import Plan
from tests.toy import B200, H100, toy_plan


def _use(monkeypatch, plan):
    monkeypatch.setattr(api, "plan_for", lambda system: plan)
    monkeypatch.setattr("accord.resolver.exploring.dryrun.plan_for", lambda system: plan)
    return plan


@pytest.fixture
def toy(tmp_path, monkeypatch):
    return _use(monkeypatch, toy_plan(tmp_path))


def _plan(root: Path, flags: list[dict], rules: list[dict]) -> Plan:
    (root / "llm").mkdir(parents=True, exist_ok=True)
    (root / "llm" / "flags.yaml").write_text(yaml.safe_dump({"group": "t", "flags": flags}))
    (root / "llm" / "t.yaml").write_text(yaml.safe_dump({"area": "t", "rules": rules}, sort_keys=False))
    return Plan(load_catalog("llm", root), load_rules("llm", root))


def _enum(name, choices, default):
    return {"name": name, "flags": ["--" + name.replace("_", "-")], "type": "enum", "choices": choices,
            "default": default}


# Two decisions linked by rules: pinning a_backend=x is legal only because the solver re-decides b.
LINKED_FLAGS = [_enum("a_backend", ["w", "x", "v"], "w"), _enum("b_backend", ["z", "y"], "z")]
LINKED_RULES = [
    {"id": "a.prefer", "kind": "prefer", "flag": "a_backend", "reason": "w first", "values": ["w", "x", "v"]},
    {"id": "b.prefer", "kind": "prefer", "flag": "b_backend", "reason": "z first", "values": ["z", "y"]},
    {"id": "x.needs_y", "kind": "require", "when": "a_backend == 'x'", "require": "b_backend == 'y'",
     "reason": "x reads what y writes."},
    {"id": "v.needs_y", "kind": "require", "when": "a_backend == 'v'", "require": "b_backend == 'y'",
     "reason": "v reads what y writes."},
    {"id": "v.needs_z", "kind": "require", "when": "a_backend == 'v'", "require": "b_backend == 'z'",
     "reason": "v also reads what z writes."},
]


def _by_flag(choices):
    return {c.flag: c for c in choices}


def test_chosen_legal_and_excluded_values_with_rule_ids_and_reasons(toy):
    _, choices = dry_run("llm", {}, B200)
    attention = _by_flag(choices)["attention_backend"]
    assert attention.chosen == "flashinfer" and attention.source == "attn.backend.order"
    assert attention.legal == ("flashinfer", "triton", "torch_native")
    assert attention.excluded == (("fa3", (("attn.fa3.hopper", "FA3 kernels are built for Hopper."),)),)
    assert _by_flag(choices)["kv_cache_dtype"].source == "default"


def test_exclusions_follow_the_rest_of_the_command(toy):
    _, choices = dry_run("llm", {"page_size": 7}, B200)
    attention = _by_flag(choices)["attention_backend"]
    assert attention.chosen == "triton"
    assert dict(attention.excluded)["flashinfer"] == (("attn.flashinfer.page", "odd pages unsupported."),)
    _, choices = dry_run("llm", {}, H100)
    assert [v for v, _ in _by_flag(choices)["kv_cache_dtype"].excluded] == ["fp4_e2m1"]


def test_every_verdict_agrees_with_the_solver(toy):
    for facts in (H100, B200):
        for user in ({}, {"page_size": 7}, {"kv_cache_dtype": "fp8_e4m3", "tp_size": 2}):
            _, choices = dry_run("llm", user, facts)
            for choice in choices:
                for value in choice.legal:
                    assert toy.satisfiable({**user, choice.flag: value}, facts), (choice.flag, value)
                for value, _ in choice.excluded:
                    assert not toy.satisfiable({**user, choice.flag: value}, facts), (choice.flag, value)


def test_a_value_is_legal_when_the_solver_can_re_decide_the_other_flags(tmp_path, monkeypatch):
    _use(monkeypatch, _plan(tmp_path, LINKED_FLAGS, LINKED_RULES))
    config, choices = dry_run("llm", {}, H100)
    a = _by_flag(choices)["a_backend"]
    assert config.values["b_backend"] == "z" and "x" in a.legal


def test_when_only_rules_together_exclude_a_value_a_minimal_set_is_named(tmp_path, monkeypatch):
    _use(monkeypatch, _plan(tmp_path, LINKED_FLAGS, LINKED_RULES))
    _, choices = dry_run("llm", {}, H100)
    excluded = dict(_by_flag(choices)["a_backend"].excluded)
    assert [rid for rid, _ in excluded["v"]] == ["v.needs_y", "v.needs_z"]


def test_open_string_flags_try_the_values_the_rules_name(tmp_path, monkeypatch):
    flags = [{"name": "draft_backend", "flags": ["--draft-backend"], "type": "str", "nullable": True,
              "default": None}]
    rules = [{"id": "draft.default", "kind": "default", "flag": "draft_backend", "reason": "p by default",
              "value": "'p'"},
             {"id": "draft.q_on_hopper", "kind": "require", "when": "draft_backend in ('q', 'r')",
              "require": "gpu.sm == 90", "reason": "q and r are Hopper kernels."},
             {"id": "draft.s_not_on_cpu", "kind": "conflict", "when": "'s' in (draft_backend,) and platform == 'cpu'",
              "reason": "s needs a GPU."}]
    plan = _use(monkeypatch, _plan(tmp_path, flags, rules))
    assert mentioned_values(plan, "draft_backend") == {"p", "q", "r", "s"}
    assert backend_like(plan) == ["draft_backend"] and values_of(plan, "draft_backend") == ["p", "q", "r", "s"]
    _, (choice,) = dry_run("llm", {}, B200)
    assert choice.chosen == "p" and choice.legal == ("p", "s")
    assert [v for v, _ in choice.excluded] == ["q", "r"]


def test_flag_filter_limits_the_report_to_named_flags(toy):
    _, choices = dry_run("llm", {}, B200, only=["--kv-cache-dtype", "sampling-backend"])
    assert [c.flag for c in choices] == ["kv_cache_dtype", "sampling_backend"]


def test_flag_filter_rejects_unknown_and_open_ended_flags(toy):
    with pytest.raises(UsageError, match="did you mean attention_backend"):
        dry_run("llm", {}, B200, only=["attention_backnd"])
    with pytest.raises(UsageError, match="open-ended"):  # no default, no rule names a value, no candidates
        dry_run("llm", {}, B200, only=["chunked_prefill_size"])


def test_a_conflicting_command_raises_the_conflict(toy):
    with pytest.raises(ConflictError):
        dry_run("llm", {"attention_backend": "fa3"}, B200)


def test_table_lists_chosen_legal_and_each_exclusion(toy):
    _, choices = dry_run("llm", {"page_size": 7}, B200)
    text = render(choices)
    assert "attention_backend = triton   (attn.backend.order)" in text
    assert "  legal     triton, torch_native" in text
    assert "  excluded  flashinfer  attn.flashinfer.page: odd pages unsupported." in text


# -- the short view: what a person reads first ----------------------------------------------------

def test_the_short_view_keeps_only_flags_with_a_value_ruled_out_and_counts_the_rest(toy):
    _, choices = dry_run("llm", {}, B200)  # on B200 only fa3 is ruled out (attention_backend)
    text = render_short(choices, columns=200)
    assert text.splitlines()[0] == ("# 1 of 3 backend-like flags: those with a value ruled out here; --all adds "
                                    "the other 2 (every value legal) and prints each rule's reason, --flag NAME "
                                    "one flag in full")
    assert "attention_backend = flashinfer   (attn.backend.order)" in text
    assert "kv_cache_dtype =" not in text and "sampling_backend =" not in text


def test_the_short_view_names_rule_ids_without_reasons_or_derived_values(toy):
    _, choices = dry_run("llm", {}, B200)
    text = render_short(choices, columns=200)
    assert "  excluded  fa3  attn.fa3.hopper" in text.splitlines()
    assert "FA3 kernels are built for Hopper" not in text and "derived" not in text


def test_the_short_view_keeps_a_backend_flag_the_user_typed(toy):
    _, choices = dry_run("llm", {"sampling_backend": "pytorch"}, B200)
    text = render_short(choices, typed={"sampling_backend": "pytorch"}, columns=200)
    assert "sampling_backend = pytorch" in text and "or set on the command line" in text
    assert "kv_cache_dtype =" not in text


def test_the_short_view_joins_values_excluded_by_the_same_rules(tmp_path, monkeypatch):
    flags = [_enum("x_backend", ["a", "b", "c", "d"], "a")]
    rules = [{"id": "x.gpu_only", "kind": "conflict", "when": "x_backend in ('b', 'c') and platform == 'cuda'",
              "reason": "b and c run on CPUs only."},
             {"id": "x.d_needs_sm100", "kind": "require", "when": "x_backend == 'd'", "require": "gpu.sm == 100",
              "reason": "d is a Blackwell kernel."}]
    _use(monkeypatch, _plan(tmp_path, flags, rules))
    _, choices = dry_run("llm", {}, H100)
    lines = render_short(choices, columns=200).splitlines()
    assert lines[-2:] == ["  excluded  b, c  x.gpu_only", "  excluded  d     x.d_needs_sm100"]


def _cli(monkeypatch, capsys, *argv: str) -> str:
    monkeypatch.setattr("accord.resolver.commands.resolve.load_facts", lambda *a, **k: B200)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["resolve", "--dry-run", "--facts", "b200", *argv]) == 0
    return capsys.readouterr().out


def test_cli_dry_run_prints_the_short_view_by_default_and_everything_with_all(toy, monkeypatch, capsys):
    short = _cli(monkeypatch, capsys)
    assert short.startswith("# 1 of 3 backend-like flags") and "sampling_backend =" not in short
    full = _cli(monkeypatch, capsys, "--all")
    assert "attn.fa3.hopper: FA3 kernels are built for Hopper." in full
    assert {"attention_backend =", "kv_cache_dtype =", "sampling_backend ="} <= {
        line.split(" = ")[0] + " =" for line in full.splitlines() if " = " in line}


def test_cli_flag_shows_a_named_flag_in_full_whatever_its_set(toy, monkeypatch, capsys):
    out = _cli(monkeypatch, capsys, "--flag", "sampling_backend")  # every value legal here
    assert out.startswith("sampling_backend = flashinfer") and not out.startswith("#")


def test_cli_json_stays_complete_without_all(toy, monkeypatch, capsys):
    data = json.loads(_cli(monkeypatch, capsys, "--json"))
    assert [c["flag"] for c in data["choices"]] == ["attention_backend", "kv_cache_dtype", "sampling_backend"]


def test_serve_dry_run_accepts_all_as_resolve_does(toy, monkeypatch, capsys):
    monkeypatch.setattr("accord.resolver.commands.serve.load_facts", lambda *a, **k: B200)
    assert main(["serve", "--dry-run", "--all", "--facts", "b200"]) == 0
    assert "sampling_backend =" in capsys.readouterr().out


def test_real_h100_dry_run_is_short_and_each_flag_it_shows_has_an_exclusion(monkeypatch, capsys):
    """The default view was ~700 lines on an H100 preset: every flag, every reason, every derived value."""
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["resolve", "--dry-run", "--facts", "h100"]) == 0
    short = capsys.readouterr().out.splitlines()
    assert main(["resolve", "--dry-run", "--all", "--facts", "h100"]) == 0
    full = capsys.readouterr().out.splitlines()
    assert len(short) * 3 < len(full)
    blocks: dict[str, list[str]] = {}  # flag -> its lines
    for line in short[2:]:
        if not line.startswith(" "):
            blocks[line.split(" = ")[0]] = []
        else:
            blocks[list(blocks)[-1]].append(line)
    assert blocks and all(any(line.startswith("  excluded  ") for line in lines) for lines in blocks.values())
    kept, total = (int(n) for n in short[0].removeprefix("# ").split(" backend-like")[0].split(" of "))
    assert kept == len(blocks) < total


def test_cli_json_shape(toy, monkeypatch, capsys):
    monkeypatch.setattr("accord.resolver.commands.resolve.load_facts", lambda *a, **k: B200)
    assert main(["resolve", "--dry-run", "--json", "--facts", "b200", "--flag", "attention_backend"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"system", "hash", "choices"}
    (choice,) = data["choices"]
    assert set(choice) == {"flag", "chosen", "source", "legal", "excluded"}
    assert choice["excluded"] == [{"value": "fa3", "rules": [
        {"id": "attn.fa3.hopper", "reason": "FA3 kernels are built for Hopper."}]}]


def test_cli_conflicting_command_exits_3(toy, monkeypatch, capsys):
    monkeypatch.setattr("accord.resolver.commands.resolve.load_facts", lambda *a, **k: B200)
    assert main(["resolve", "--dry-run", "--json", "--facts", "b200", "--attention-backend", "fa3"]) == 3
    assert json.loads(capsys.readouterr().out)["error"] == "conflict"


def test_pinning_several_flags_at_once(toy):
    config = api.resolve("llm", {}, B200)
    launch = Launch(toy, {}, B200, resolved=config.values)
    assert launch.pinned({"attention_backend": "triton", "kv_cache_dtype": "fp4_e2m1"}).satisfiable
    assert [[r.id for r in group] for group in
            launch.pinned({"attention_backend": "fa3", "kv_cache_dtype": "auto"}).exclusions] == [["attn.fa3.hopper"]]


# -- the derived values that decided an exclusion (issue 11) ---------------------------------------

BLACKWELL_DERIVED = """
derived:
  - id: blackwell
    type: bool
    values: [{value: "platform == 'cuda' and gpu.sm in (100, 103)"}]
    reason: a datacenter Blackwell GPU
"""


def test_an_exclusion_shows_the_derived_values_its_rule_read(tmp_path, monkeypatch):
    flags = [_enum("kv_backend", ["plain", "fp4"], "plain")]
    rules = [{"id": "kv.fp4.blackwell", "kind": "require", "when": "kv_backend == 'fp4'", "require": "blackwell",
              "reason": "FP4 kernels are Blackwell-only."}]
    _plan(tmp_path, flags, rules)
    (tmp_path / "llm" / "derived.yaml").write_text(BLACKWELL_DERIVED)
    _use(monkeypatch, Plan(load_catalog("llm", tmp_path), load_rules("llm", tmp_path)))
    _, (choice,) = dry_run("llm", {}, H100)
    assert [v for v, _ in choice.excluded] == ["fp4"]
    (readings,) = choice.derived
    assert [r.line() for r in readings] == ["blackwell = false because gpu.sm = 90, platform = cuda"]
    assert "derived  blackwell = false because gpu.sm = 90, platform = cuda" in render([choice], columns=120)
    assert choice.to_dict()["excluded"][0]["derived"] == [
        {"name": "blackwell", "value": False, "when": None, "reads": {"gpu.sm": 90, "platform": "cuda"}}]
    _, (choice,) = dry_run("llm", {}, B200)
    assert choice.excluded == () and "derived" not in json.dumps(choice.to_dict())


# -- integer and list flags: a declared candidate set, judged by the solver -----------------------

SIXTY_FOUR_HEADS = {**H100, "model.num_attention_heads": 64}   # 8 GPUs


def test_integer_flag_tries_powers_of_two_and_divisors_and_the_solver_judges_them(toy):
    candidates = values_of(toy, "tp_size", [SIXTY_FOUR_HEADS])
    # upstream's constraints on tp: the heads split evenly across ranks, one rank per GPU
    assert {2, 4, 8, 16, 32, 64} <= set(candidates) and candidates == sorted(candidates)
    _, (tp,) = dry_run("llm", {}, SIXTY_FOUR_HEADS, only=["tp_size"])
    assert list(tp.legal) == [v for v in candidates if 64 % v == 0 and v <= 8]
    assert 2 in tp.legal
    excluded = dict(tp.excluded)
    assert [rid for rid, _ in excluded[16]] == ["par.world_size.fits"]


def test_a_candidate_that_does_not_divide_the_heads_is_excluded_by_that_rule(toy):
    facts = {**H100, "model.num_attention_heads": 12}   # 12 heads on 8 GPUs: tp 8 splits them unevenly
    _, (tp,) = dry_run("llm", {}, facts, only=["tp_size"])
    assert tp.legal == (1, 2, 3, 4, 6)                  # the divisors of 12 that fit 8 GPUs
    assert [rid for rid, _ in dict(tp.excluded)[8]] == ["model.heads.divide"]
    assert [rid for rid, _ in dict(tp.excluded)[12]] == ["par.world_size.fits"]


def test_candidates_follow_the_facts_and_unknown_facts_add_nothing(toy):
    assert values_of(toy, "tp_size", [{}]) == [1]           # the default only
    assert values_of(toy, "tp_size", [{"gpu.count": 2}, {"gpu.count": 4}]) == [1, 2, 4]
    assert values_of(toy, "tp_size", [{"gpu.count": "many"}]) == [1]


LLAMA_70B = {   # meta-llama/Llama-3.1-70B-Instruct config.json, the fields the model facts read
    "architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "num_attention_heads": 64,
    "num_key_value_heads": 8, "num_hidden_layers": 80, "intermediate_size": 28672,
    "max_position_embeddings": 131072,
    "vocab_size": 128256, "torch_dtype": "bfloat16"}


def test_real_rules_tp_for_a_64_head_70b_model_on_8_gpus(tmp_path):
    """Issue 17: the legal tp list holds 2 and every value that divides the heads and fits the GPUs.

    Upstream: tp must divide the attention heads (64) and tp x dp x pp must fit the 8 GPUs, so only
    2, 4, 8 and 1 pass those; 140 GB of bf16 weights do not load on one 80 GB GPU, so 1 fails too.
    """
    model = tmp_path / "Llama-3.1-70B-Instruct"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA_70B))
    facts = load_facts("h100", model_path=str(model))
    user = {"model_path": str(model), "tp_size": 8}   # tp 1, the default, cannot load the weights
    _, (tp,) = dry_run("llm", user, facts, only=["tp_size"])
    judged = set(tp.legal) | {v for v, _ in tp.excluded}
    assert set(tp.legal) == {2, 4, 8}
    assert set(tp.legal) == {v for v in judged if 64 % v == 0 and v <= 8} - {1}
    assert all(v not in tp.legal for v in (3, 6))
    plan = api.plan_for("llm")
    for value in tp.legal:
        assert plan.satisfiable({**user, "tp_size": value}, facts)


def test_list_flags_try_their_declared_lists(tmp_path, monkeypatch):
    import accord.resolver.exploring.dryrun as dryrun

    flags = [{"name": "graph_sizes", "flags": ["--graph-sizes"], "type": "list", "nullable": True, "default": None}]
    rules = [{"id": "sizes.small", "kind": "require", "when": "graph_sizes is not None",
              "require": "max(graph_sizes) <= 8", "reason": "small graphs only."}]
    monkeypatch.setattr(dryrun, "_candidate_specs", lambda: {"graph_sizes": {"values": [[1, 2], [1, 2, 4, 8, 16]]}})
    plan = _use(monkeypatch, _plan(tmp_path, flags, rules))
    assert values_of(plan, "graph_sizes") == [[1, 2], [1, 2, 4, 8, 16]]
    _, (choice,) = dry_run("llm", {}, H100, only=["graph_sizes"])
    assert choice.legal == ([1, 2],) and [v for v, _ in choice.excluded] == [[1, 2, 4, 8, 16]]


# -- the real rule sets: properties that do not depend on which rules exist -----------------------

@pytest.mark.parametrize("system, preset, user, flags", [
    ("llm", "h100", {"tp_size": 8}, ["attention_backend", "kv_cache_dtype", "sampling_backend"]),
    ("diffusion", "h100", {}, None),
])
def test_real_rules_verdicts_agree_with_the_solver(system, preset, user, flags):
    facts = load_facts(preset, system=system)
    plan = api.plan_for(system)
    config, choices = dry_run(system, user, facts, only=flags)
    assert choices, "no backend-like flag found"
    for choice in choices:
        assert choice.chosen == config.values[choice.flag]
        for value in choice.legal:
            assert plan.satisfiable({**user, choice.flag: value}, facts), (choice.flag, value)
        for value, rules in choice.excluded:
            assert rules and all(rid in plan.ruleset.by_id() for rid, _ in rules)
            assert not plan.satisfiable({**user, choice.flag: value}, facts), (choice.flag, value)


def test_real_llm_dry_run_covers_the_backend_families():
    names = set(backend_like(api.plan_for("llm")))
    assert {"attention_backend", "prefill_attention_backend", "decode_attention_backend",
            "sampling_backend", "grammar_backend", "moe_runner_backend", "fp8_gemm_runner_backend",
            "fp4_gemm_runner_backend", "kv_cache_dtype", "lora_backend", "mamba_backend",
            "linear_attn_backend", "disaggregation_transfer_backend"} <= names
    assert "attention_backend" in backend_like(api.plan_for("diffusion"))
