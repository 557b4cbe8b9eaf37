"""The cost model of `accord tune` (issue 37): properties of its predictions, its workloads and its
data, and its agreement with the published reference set. Expected values come from properties or
from the published measurements (benchmarks/data/serving_figures.yaml), never from re-deriving the
model's own formulas; nothing here asserts a timing."""

from __future__ import annotations

import ast
import json
import math
import sys
from pathlib import Path

import pytest

from accord.resolver.cli import main
from accord.resolver.exploring.cost_steps import engine_factors
from accord.resolver.exploring.costmodel import CostModel, Workload, load_costs
from accord.resolver.exploring.tune import predict_launch
from accord.resolver.facts.machine import load_facts

ROOT = Path(__file__).resolve().parent.parent
LLAMA_70B_FP8 = "nvidia/Llama-3.1-70B-Instruct-FP8"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
QWEN_MOE = "Qwen/Qwen3-235B-A22B"


def predict(model: str, flags: dict, workload: Workload, preset: str = "h100", gpus: int = 8) -> dict:
    facts = load_facts(preset, [f"gpu.count={gpus}"], model_path=model, system="llm")
    found = predict_launch("llm", {"model_path": model, **flags}, facts, workload)
    assert found is not None
    return found


def test_ttft_grows_with_load():
    # NIM measured 407 ms at 1 user and 835 ms at 50 (5,000-token prompts, 70B FP8 on 2 x H100).
    ttft = [predict(LLAMA_70B_FP8, {"tp_size": 2}, Workload(5000, 500, concurrency=c), gpus=2)["ttft_ms"]
            for c in (1, 5, 25, 50)]
    assert ttft == sorted(ttft) and ttft[-1] > 1.3 * ttft[0]


def test_tpot_and_throughput_move_with_load_the_way_they_must():
    low, high = (predict(LLAMA_8B, {}, Workload(1024, 256, concurrency=c), gpus=1) for c in (1, 64))
    assert high["tpot_ms"] > low["tpot_ms"]
    assert high["throughput_tok_s"] > low["throughput_tok_s"]


def test_open_loop_serves_the_offered_rate_until_it_saturates():
    light = predict(LLAMA_8B, {}, Workload(512, 128, request_rate=2.0), gpus=1)
    assert light["throughput_tok_s"] == pytest.approx(2.0 * 128)
    assert not light["saturated"] and light["ttft_ms"] is not None
    heavy = predict(LLAMA_8B, {}, Workload(512, 128, request_rate=10_000.0), gpus=1)
    assert heavy["saturated"] and heavy["ttft_ms"] is None
    assert heavy["throughput_tok_s"] < 10_000.0 * 128


def test_a_burst_drains_slower_than_a_steady_server_and_waits_longer_when_bigger():
    w = dict(input_len=1000, output_len=1000)
    steady = predict(LLAMA_8B, {}, Workload(**w, request_rate=1e6), gpus=1)      # saturated: the ceiling
    small, big = (predict(LLAMA_8B, {}, Workload(**w, burst=n), gpus=1) for n in (64, 3000))
    assert big["throughput_tok_s"] <= steady["throughput_tok_s"] * 1.001
    assert big["ttft_ms"] > small["ttft_ms"]
    assert "burst of 3000" in Workload(**w, burst=3000).describe()


def test_the_page_size_penalty_applies_only_to_the_backend_it_was_measured_on():
    w = Workload(1024, 256, concurrency=64)
    fa3 = [predict(LLAMA_8B, {"attention_backend": "fa3", "page_size": p}, w, gpus=1)["tpot_ms"] for p in (1, 16)]
    triton = [predict(LLAMA_8B, {"attention_backend": "triton", "page_size": p}, w, gpus=1)["tpot_ms"] for p in (1, 16)]
    assert fa3[0] == fa3[1]
    assert triton[0] > triton[1]
    assert set(load_costs()["page_efficiency"]) == {"triton"}


def test_fp8_weights_are_credited_but_less_than_the_byte_ratio():
    w = Workload(1000, 1000, concurrency=1)
    bf16 = predict(LLAMA_8B, {}, w, gpus=1)
    fp8 = predict(LLAMA_8B, {"quantization": "fp8"}, w, gpus=1)
    assert bf16["tpot_ms"] / 2 < fp8["tpot_ms"] < bf16["tpot_ms"]


def test_expert_parallelism_adds_all_to_all_time():
    w = Workload(1000, 200, concurrency=64)
    plain = predict(QWEN_MOE, {"tp_size": 8}, w)
    ep = predict(QWEN_MOE, {"tp_size": 8, "ep_size": 8}, w)
    assert ep["comm_ms"] != plain["comm_ms"]


def test_prefill_riding_in_decode_steps_delays_the_first_token():
    # SGLang runs a prefill as a batch of its own unless --enable-mixed-chunk puts its chunks into
    # decode steps, where the first token also waits for the running batch's step.
    w = Workload(1024, 256, request_rate=4)
    plain = predict(LLAMA_8B, {}, w, gpus=1)
    mixed = predict(LLAMA_8B, {"enable_mixed_chunk": True}, w, gpus=1)
    assert mixed["ttft_ms"] > plain["ttft_ms"]


def test_tpot_stretches_by_the_share_of_time_spent_prefilling():
    # More arrivals per second mean more prefill work between one request's tokens.
    tpot = [predict(LLAMA_8B, {}, Workload(2048, 128, request_rate=r), gpus=1)["tpot_ms"] for r in (1, 4, 8)]
    assert tpot == sorted(tpot) and tpot[-1] > 1.2 * tpot[0]


def test_engine_factors_default_to_the_reference_engine_and_apply_by_release():
    data = load_costs()
    sglang = engine_factors(data, None)
    assert sglang["decode"] == sglang["prefill"] == 1.0
    assert engine_factors(data, ("no-such-engine", "1.0")) == engine_factors(data, ("sglang", ""))
    older, newer = engine_factors(data, ("vllm", "0.6.0")), engine_factors(data, ("vllm", "0.11.0"))
    assert older["scheduler_steps"] == 10 and newer["scheduler_steps"] == 1    # an entry for vLLM 0.6 only
    assert older["decode"] == 1.0 != newer["decode"]                # and one for vLLM 0.11 only


def test_every_fitted_constant_has_a_value_bounds_and_provenance():
    raw = __import__("yaml").safe_load((ROOT / "rules/llm/data/costs.yaml").read_text())
    constants = raw["fitted"]["constants"]
    assert len(constants) >= 10
    data = load_costs()
    for name, entry in constants.items():
        lo, hi = entry["bounds"]
        assert lo <= entry["value"] <= hi, name
        assert entry["fitted_on"], name
        node = data
        for key in name.split("/"):
            node = node[key]
        assert node == entry["value"], name     # put in place when the file is read


def test_predictor_functions_stay_small():
    for path in sorted((ROOT / "resolver" / "exploring").glob("cost*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno + 1 <= 60, f"{path.name}:{node.name}"


def test_json_errors_are_json(capsys):
    rc = main(["tune", "--facts", "h100", "--model-path", "no-such-org/no-such-model", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 2 and out["exit_code"] == 2 and "no-such-org/no-such-model" in out["error"]
    rc = main(["tune", "--facts", "h100", "--model-path", LLAMA_8B, "--no-such-flag", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 2 and out == {"error": out["error"], "exit_code": 2}


def test_burst_is_a_workload_of_the_command(capsys):
    rc = main(["tune", "--facts", "h100", "--model-path", LLAMA_8B, "--input-len", "128", "--output-len", "128",
               "--burst", "500", "--top", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["workload"]["burst"] == 500 and out["workload"]["concurrency"] is None
    assert main(["tune", "--facts", "h100", "--model-path", LLAMA_8B, "--burst", "5", "--concurrency", "3"]) == 2


def test_the_stored_constants_agree_with_the_published_reference_set():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import tune_accuracy
    finally:
        sys.path.pop(0)
    _, runs = tune_accuracy.load_runs()
    assert len(runs) >= 40 and len({r.source for r in runs}) >= 4
    scores = tune_accuracy.scores(tune_accuracy.figures(runs, tune_accuracy.predictor(load_costs())))
    assert scores["all"]["median_abs_log"] <= math.log(1.25)
    assert scores["order"]["accuracy"] >= 0.9
    for kind in ("throughput_tok_s", "tpot_ms", "ttft_ms"):
        assert scores[kind]["n"] >= 10


def test_same_inputs_same_prediction():
    model = CostModel(load_costs())
    facts = load_facts("h100", [], model_path=LLAMA_8B, system="llm")
    a = predict_launch("llm", {"model_path": LLAMA_8B}, facts, Workload(256, 64, burst=100), model)
    b = predict_launch("llm", {"model_path": LLAMA_8B}, facts, Workload(256, 64, burst=100), model)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_spread_output_lengths_drain_a_burst_no_faster_than_fixed_ones():
    # Same mean lengths: a burst ends when its longest request ends, so the wider the spread of
    # output lengths, the longer the drain (fixed <= uniform <= exponential); a steady open loop
    # that is not short of KV room serves the offered rate whatever the spread.
    figures = [predict(LLAMA_8B, {}, Workload(256, 256, burst=2000, lengths=kind), gpus=1)["throughput_tok_s"]
               for kind in ("fixed", "uniform", "exponential")]
    assert figures[0] > figures[1] > figures[2]
    light = [predict(LLAMA_8B, {}, Workload(256, 256, request_rate=2.0, lengths=kind), gpus=1)["throughput_tok_s"]
             for kind in ("fixed", "exponential")]
    assert light[0] == light[1] == pytest.approx(2.0 * 256)
    assert Workload(1, 1).lengths == "fixed"      # the command's workloads: fixed lengths, as before
