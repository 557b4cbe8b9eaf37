"""`accord tune`: properties of the search, the cost model and the command (expected values come
from properties and from the resolver itself, never from re-deriving the cost formulas)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from accord.resolver.cli import main
from accord.resolver.exploring.costmodel import Workload
from accord.resolver.exploring.measure import spearman
from accord.resolver.exploring.tune import predict_launch
from accord.resolver.exploring.tune_candidates import pins_key
from accord.resolver.exploring.tune_search import Search
from accord.resolver.facts.machine import load_facts

MODELS = Path(__file__).parent / "differential" / "fixtures" / "models"
LLAMA_70B = str(MODELS / "meta-llama" / "Llama-3.1-70B-Instruct")
LLAMA_8B = str(MODELS / "meta-llama" / "Llama-3.1-8B-Instruct")
QWEN_MOE = str(MODELS / "Qwen" / "Qwen3-30B-A3B")
CHAT = Workload(input_len=1024, output_len=256, concurrency=64)


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    rc = main(["tune", *argv, "--json"])
    out = capsys.readouterr().out
    return rc, (json.loads(out) if rc == 0 else {})


@pytest.fixture(scope="module")
def llama70b_h100():
    facts = load_facts("h100", [], model_path=LLAMA_70B, system="llm")
    search = Search("llm", {"model_path": LLAMA_70B}, facts, CHAT)
    return search, search.run()


def test_70b_on_8xh100_chat_picks_tp_4_or_more_and_beats_the_baseline(llama70b_h100):
    _, result = llama70b_h100
    top = result.candidates[0]
    assert top.pins["tp_size"] >= 4
    assert top.predicted["throughput_tok_s"] >= result.baseline.predicted["throughput_tok_s"]


def test_the_baseline_is_what_resolve_picks_and_is_among_the_judged(llama70b_h100, capsys):
    search, result = llama70b_h100
    # Llama-70B does not fit one H100: `accord resolve` alone conflicts, `--relax` picks the baseline.
    assert main(["resolve", "--facts", "h100", "--model-path", LLAMA_70B]) == 3
    assert result.baseline_source == "resolve --relax"
    capsys.readouterr()
    assert main(["resolve", "--facts", "h100", "--relax", "--json", "--model-path", LLAMA_70B]) == 0
    relaxed = json.loads(capsys.readouterr().out)["values"]
    assert main(["resolve", "--facts", "h100", "--json", *result.baseline.argv]) == 0
    assert json.loads(capsys.readouterr().out)["values"]["tp_size"] == relaxed["tp_size"]
    assert pins_key(result.baseline.pins) in search.judged_keys


def test_every_shown_candidate_resolves_as_is(llama70b_h100, capsys):
    _, result = llama70b_h100
    for candidate in result.candidates:
        assert main(["resolve", "--facts", "h100", *candidate.argv]) == 0, shlex.join(candidate.argv)
        assert candidate.argv[:2] == ["--model-path", LLAMA_70B]   # the model is never swapped
    capsys.readouterr()


def test_the_search_judges_many_and_counts_exclusions_by_rule_family(llama70b_h100):
    _, result = llama70b_h100
    # Values the cost model cannot tell apart are combined once (issue 37: tune within 1 s), so the
    # count is no longer in the thousands; every layout and every distinct value is still judged.
    assert result.legal >= 50
    assert 0 < result.excluded < result.judged
    assert result.excluded <= sum(result.pruned.values())   # each exclusion names at least one family
    assert all(family.endswith(".") or family == "(joint)" for family in result.pruned)
    assert "par." in result.pruned   # tp x dp x pp beyond 8 GPUs is excluded by the parallel rules


def test_more_gpus_never_predict_more_bytes_per_gpu():
    facts = load_facts("h100", [], model_path=LLAMA_70B, system="llm")
    seen = []
    for tp in (2, 4, 8):
        p = predict_launch("llm", {"model_path": LLAMA_70B, "tp_size": tp}, facts, CHAT)
        seen.append((p["weights_gib_per_gpu"], p["kv_bytes_per_token_per_gpu"], p["kv_capacity_tokens"]))
    weights, kv_token, capacity = zip(*seen)
    assert list(weights) == sorted(weights, reverse=True) and weights[0] > weights[-1]
    assert list(kv_token) == sorted(kv_token, reverse=True)
    assert list(capacity) == sorted(capacity)


def test_a_model_that_does_not_fit_is_never_a_candidate(capsys):
    # One 24 GB L4 cannot hold Llama-70B in any layout: no candidate, exit 3.
    assert main(["tune", "--facts", "l4", "--fact", "gpu.count=1", "--model-path", LLAMA_70B]) == 3
    capsys.readouterr()
    # Where some layouts fit, each candidate has KV room for the workload's requests.
    rc, data = run_json(capsys, "--facts", "l40s", "--model-path", LLAMA_70B, "--input-len", "2048", "--top", "20")
    assert rc == 0
    for c in data["candidates"]:
        assert c["predicted"]["concurrency_fits"] >= 1
        assert c["predicted"]["kv_capacity_tokens"] >= 2048 + 256


def test_a_typed_flag_is_in_every_candidate(capsys):
    rc, data = run_json(capsys, "--facts", "h100", "--model-path", LLAMA_8B, "--page-size", "32",
                        "--kv-cache-dtype", "bf16", "--top", "50")
    assert rc == 0 and data["candidates"]
    for c in [*data["candidates"], data["baseline"]]:
        words = c["argv"]
        assert words[words.index("--page-size") + 1] == "32"
        assert words[words.index("--kv-cache-dtype") + 1] == "bf16"


def test_an_sla_drops_the_candidates_that_miss_it(capsys):
    rc, data = run_json(capsys, "--facts", "h100", "--model-path", LLAMA_8B, "--max-tpot-ms", "12",
                        "--max-ttft-ms", "400", "--top", "50")
    assert rc == 0 and data["ranking"] == "sla"
    for c in data["candidates"]:
        assert c["predicted"]["tpot_ms"] <= 12 and c["predicted"]["ttft_ms"] <= 400
    assert main(["tune", "--facts", "h100", "--model-path", LLAMA_8B, "--max-tpot-ms", "0.001"]) == 3


def test_json_shape_and_determinism(capsys):
    argv = ["--facts", "h100", "--model-path", QWEN_MOE, "--concurrency", "32"]
    rc, first = run_json(capsys, *argv)
    rc2, second = run_json(capsys, *argv)
    assert rc == rc2 == 0 and first == second
    assert set(first) >= {"baseline", "candidates", "evaluated", "pruned"}
    assert set(first["baseline"]) >= {"argv", "predicted"}
    for c in first["candidates"]:
        assert {"throughput_tok_s", "ttft_ms", "tpot_ms"} <= set(c["predicted"]) and c["why"]
    # ep is an axis only because the model has experts
    assert any("--ep-size" in c["argv"] for c in first["candidates"]) or "ep_size" not in first["pruned"]


def test_pareto_candidates_are_not_dominated(llama70b_h100):
    _, result = llama70b_h100
    front = [c.predicted for c in result.candidates if c.predicted["pareto"]]
    assert front
    for a in front:
        assert not any(b["throughput_per_gpu"] > a["throughput_per_gpu"] and b["tok_s_per_user"] > a["tok_s_per_user"]
                       for b in (c.predicted for c in result.candidates))


def test_bad_usage_is_exit_2(capsys):
    assert main(["tune", "--facts", "h100"]) == 2                          # no model
    assert main(["tune", "--facts", "h100", "--model-path", LLAMA_8B, "--workload", "nope"]) == 2
    assert main(["tune", "--facts", "h100", "--model-path", LLAMA_8B, "--calibrate", "x.yaml"]) == 2
    assert main(["tune", "--facts", "h100", "--fact", "gpu.name=Mystery GPU", "--model-path", LLAMA_8B]) == 2
    capsys.readouterr()


def test_spearman_follows_its_definition():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert spearman([1, 2], [5, 5]) is None
    assert spearman([1], [1]) is None


def test_measure_serves_the_top_candidates_on_cpu_and_stops_them(capsys, tmp_path):
    import os

    from tests.processes import children_of

    calibration = tmp_path / "cal.yaml"
    rc, data = run_json(capsys, "--facts", "cpu", "--model-path", "tiny-llama", "--input-len", "16",
                        "--output-len", "8", "--concurrency", "4", "--measure", "2", "--measure-seconds", "1.5",
                        "--calibrate", str(calibration))
    assert rc == 0
    rows = data["measured"]["rows"]
    # the top 2, and the baseline when it is not one of them
    assert [r["rank"] for r in rows if r["rank"] != "base"] == [1, 2]
    assert len(rows) == 2 + (data["baseline"]["argv"] not in [r["argv"] for r in rows[:2]])
    assert sorted(map(str, data["measured"]["by_measurement"])) == sorted(str(r["rank"]) for r in rows)
    for row in rows:
        assert row["measured"].get("throughput_tok_s", 0) > 0, row
        assert row["measured"]["errors"] == 0
    assert "spearman_throughput" in data["measured"]
    assert children_of(os.getpid()) == []         # every server stopped
    factors = data["measured"]["calibration"]["family_speed"]
    assert factors and all(v > 0 for v in factors.values())
    # the written calibration is read back
    rc, again = run_json(capsys, "--facts", "cpu", "--model-path", "tiny-llama", "--input-len", "16",
                         "--output-len", "8", "--concurrency", "4", "--calibration", str(calibration))
    assert rc == 0 and again["candidates"]


def test_speculative_and_quantization_axes_only_when_asked(capsys):
    draft = str(MODELS / "jamesliu1" / "sglang-EAGLE3-Llama-3.1-Instruct-8B")
    rc, plain = run_json(capsys, "--facts", "h100", "--model-path", LLAMA_8B, "--concurrency", "8", "--top", "50")
    assert rc == 0
    for c in plain["candidates"]:
        assert "--speculative-num-steps" not in c["argv"] and "--quantization" not in c["argv"]
    assert "quant." not in plain["pruned"] and "spec." not in plain["pruned"]
    rc, spec = run_json(capsys, "--facts", "h100", "--model-path", LLAMA_8B, "--speculative-algorithm", "EAGLE3",
                        "--speculative-draft-model-path", draft, "--concurrency", "8", "--top", "50")
    assert rc == 0
    assert any("--speculative-num-steps" in c["argv"] for c in spec["candidates"])
    for c in spec["candidates"]:   # the typed draft stays in every candidate
        assert c["argv"][c["argv"].index("--speculative-draft-model-path") + 1] == draft


def test_no_two_shown_candidates_are_predicted_alike(llama70b_h100):
    _, result = llama70b_h100
    speeds = [(c.predicted["throughput_tok_s"], c.predicted["ttft_ms"], c.predicted["tpot_ms"], c.predicted["gpus"])
              for c in result.candidates]
    assert len(speeds) == len(set(speeds))


def test_every_shown_candidate_carries_the_warnings_resolve_gives_it(capsys):
    rc, data = run_json(capsys, "--facts", "h100", "--model-path", LLAMA_8B, "--top", "8")
    assert rc == 0
    for candidate in [*data["candidates"], data["baseline"]]:
        assert main(["resolve", "--facts", "h100", "--json", *candidate["argv"]]) == 0
        assert candidate["warnings"] == json.loads(capsys.readouterr().out)["warnings"], candidate["args"]
    # DP attention on a dense model is one resolve warns about, and tune says so where it suggests it
    dp = [c for c in data["candidates"] if "--enable-dp-attention" in c["argv"]]
    assert all(any("dp_attention" in w for w in c["warnings"]) for c in dp)


def test_a_warned_candidate_ranks_below_an_equal_clean_one():
    from accord.resolver.exploring.tune_candidates import Candidate
    from accord.resolver.exploring.tune_ranking import rank_key

    figures = {"throughput_per_gpu": 100.0, "throughput_tok_s": 100.0, "tok_s_per_user": 10.0, "pareto": True}
    clean = Candidate({"a": 1}, dict(figures), "layout")
    warned = Candidate({"a": 0}, dict(figures), "layout", warnings=("[x.y] careful",))
    tie = lambda c: tuple(sorted(c.pins.items()))  # alone it would put `warned` first
    assert sorted([warned, clean], key=lambda c: rank_key(c, lambda x: -x, tie)) == [clean, warned]
    faster = Candidate({"a": 0}, {**figures, "throughput_per_gpu": 200.0}, "layout", warnings=("[x.y] careful",))
    assert sorted([clean, faster], key=lambda c: rank_key(c, lambda x: -x, tie))[0] is faster


def test_top_n_prints_n_rows_or_says_why_fewer(capsys):
    rc = main(["tune", "--facts", "cpu", "--model-path", "tiny-llama", "--top", "400"])
    out = capsys.readouterr().out
    assert rc == 0
    rows = [line for line in out.splitlines() if line[:4].strip().rstrip("*").isdigit()]
    assert len(rows) < 400 and f"shown {len(rows)} of the 400 asked for" in out
    rc = main(["tune", "--facts", "cpu", "--model-path", "tiny-llama", "--top", "3"])
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if line[:4].strip().rstrip("*").isdigit()]) == 3
    assert "asked for" not in out


def test_a_measurement_that_beats_the_predicted_winner_is_said_and_reranks():
    from accord.resolver.exploring.measure import measured_ranking

    row = lambda rank, tok_s: {"rank": rank, "baseline": rank == "base", "measured": {"throughput_tok_s": tok_s}}
    held = measured_ranking([row(1, 900.0), row(2, 800.0), row("base", 700.0)])
    assert held == {"by_measurement": [1, 2, "base"], "verdict": None}
    beaten = measured_ranking([row(1, 3405.0), row(2, 800.0), row("base", 6023.0)])
    assert beaten["by_measurement"] == ["base", 1, 2]
    assert "baseline" in beaten["verdict"] and "6023.0 vs 3405.0" in beaten["verdict"]
    other = measured_ranking([row(1, 500.0), row(2, 800.0)])
    assert other["by_measurement"] == [2, 1] and other["verdict"].startswith("#2 measured faster")
