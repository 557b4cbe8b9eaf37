"""`accord tune --max-nodes N` (issue 38): the search spans 1 .. N machines like the facts' one, the
cost model prices collectives that cross nodes at the link between them, and a launch over several
nodes is reported with its node count and each node's command. Expected values come from
properties (a candidate needing two nodes appears only when two are allowed; crossing nodes never
makes a step cheaper than the same layout inside one node) and from the resolver itself, never from
re-deriving the cost formulas."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from accord.resolver.cli import main
from accord.resolver.exploring.costmodel import Workload, load_costs
from accord.resolver.exploring.tune import predict_launch, tune
from accord.resolver.exploring.tune_candidates import NoCandidate
from accord.resolver.facts.machine import load_facts

MODELS = Path(__file__).parent / "differential" / "fixtures" / "models"
LLAMA_70B = str(MODELS / "meta-llama" / "Llama-3.1-70B-Instruct")
QWEN_MOE = str(MODELS / "Qwen" / "Qwen3-30B-A3B")
DEEPSEEK = "deepseek-ai/DeepSeek-V3"     # a built-in model card: no download
CHAT = Workload(input_len=1024, output_len=256, concurrency=64)
TWO_NODES = {"nnodes": 2, "dist_init_addr": "HOST:20000"}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def deepseek_two_nodes():
    facts = load_facts("h100", [], model_path=DEEPSEEK, system="llm")
    return facts, tune("llm", {"model_path": DEEPSEEK}, facts, CHAT, beam={"verify": 40}, max_nodes=2)


@pytest.fixture(scope="module")
def llama70b_two_nodes():
    facts = load_facts("h100", [], model_path=LLAMA_70B, system="llm")
    return tune("llm", {"model_path": LLAMA_70B}, facts, CHAT, max_nodes=2)


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_a_model_one_node_cannot_hold_finds_a_two_node_tp16_launch(deepseek_two_nodes):
    facts, result = deepseek_two_nodes
    # On one node of 8 H100s nothing leaves KV room for DeepSeek-V3: no candidate at all.
    with pytest.raises(NoCandidate):
        tune("llm", {"model_path": DEEPSEEK}, facts, CHAT)
    assert result.candidates
    assert all(c.nodes == 2 and c.predicted["gpus"] > facts["gpu.count"] for c in result.candidates)
    assert any(_value(c.argv, "--tp-size") == "16" for c in result.candidates)
    top = result.candidates[0]
    assert _value(top.argv, "--nnodes") == "2"
    assert _value(top.argv, "--dist-init-addr").startswith("HOST:")   # node 0's address, to fill in
    assert top.fill_in and "HOST" in top.fill_in


def test_each_node_command_resolves_and_differs_only_in_its_rank(deepseek_two_nodes, capsys):
    _, result = deepseek_two_nodes
    for c in result.candidates[:3]:
        assert len(c.node_argv) == 2
        for rank, argv in enumerate(c.node_argv):
            assert _value(argv, "--node-rank") == str(rank)
            assert argv[:len(c.argv)] == c.argv and len(argv) == len(c.argv) + 2
            assert main(["resolve", "--facts", "h100", *argv]) == 0, shlex.join(argv)
    capsys.readouterr()


def test_a_candidate_needing_two_nodes_appears_only_with_max_nodes_two(llama70b_two_nodes):
    facts = load_facts("h100", [], model_path=LLAMA_70B, system="llm")
    one = tune("llm", {"model_path": LLAMA_70B}, facts, CHAT, beam={"verify": 40})
    assert all(c.nodes == 1 and c.predicted["gpus"] <= facts["gpu.count"] for c in one.candidates)
    assert not any("--nnodes" in c.argv for c in one.candidates)
    # with two nodes allowed, the search judges more: the layouts over two nodes
    assert llama70b_two_nodes.judged > one.judged


def test_llama_70b_still_prefers_one_node(llama70b_two_nodes):
    # An all-reduce over two nodes runs at the link between them, far slower than NVLink.
    result = llama70b_two_nodes
    assert result.candidates[0].nodes == 1
    assert "--nnodes" not in result.candidates[0].argv
    one_node = [c for c in result.candidates if c.nodes == 1]
    two_nodes = [c for c in result.candidates if c.nodes == 2]
    best = max(c.predicted["throughput_per_gpu"] for c in one_node)
    assert all(c.predicted["throughput_per_gpu"] < best for c in two_nodes)


@pytest.mark.parametrize("model, flags", [
    (LLAMA_70B, {"tp_size": 8}),                       # the TP group split 4 + 4 over two nodes
    (LLAMA_70B, {"tp_size": 4, "pp_size": 2}),          # one pipeline stage per node
    (QWEN_MOE, {"tp_size": 8, "ep_size": 8}),           # the expert all-to-all over two nodes
    (QWEN_MOE, {"tp_size": 8, "dp_size": 8, "enable_dp_attention": True}),
])
def test_crossing_nodes_never_makes_a_step_cheaper(model, flags):
    facts = load_facts("h100", [], model_path=model, system="llm")
    for workload in (CHAT, Workload(2048, 128, request_rate=2.0), Workload(512, 512, burst=200)):
        inside = predict_launch("llm", {"model_path": model, **flags}, facts, workload)
        across = predict_launch("llm", {"model_path": model, **flags, **TWO_NODES}, facts, workload)
        assert inside["gpus"] == across["gpus"]
        assert across["decode_step_ms"] > inside["decode_step_ms"]
        assert across["comm_ms"] > inside["comm_ms"]
        assert across["prefill_ms"] >= inside["prefill_ms"]
        assert across["tpot_ms"] > inside["tpot_ms"]
        assert across["throughput_tok_s"] <= inside["throughput_tok_s"]


def test_nodes_that_meet_over_nvlink_cross_at_nvlink_speed():
    # GB200 trays of one NVL72 rack meet over NVLink (costs.yaml `internode: nvlink`): a TP group
    # over two trays runs like one inside a node; a device whose nodes meet over InfiniBand does not.
    assert load_costs()["devices"]["gb200"].get("internode") == "nvlink"
    for preset, same in (("gb200", True), ("b200", False)):
        facts = load_facts(preset, ["gpu.count=4"], model_path=LLAMA_70B, system="llm")
        eight = load_facts(preset, ["gpu.count=8"], model_path=LLAMA_70B, system="llm")
        across = predict_launch("llm", {"model_path": LLAMA_70B, "tp_size": 8, **TWO_NODES}, facts, CHAT)
        inside = predict_launch("llm", {"model_path": LLAMA_70B, "tp_size": 8}, eight, CHAT)
        assert (across["comm_ms"] == inside["comm_ms"]) is same, preset


def test_every_device_names_its_link_between_nodes_with_a_source():
    costs = load_costs()
    for name, device in costs["devices"].items():
        assert "ib_gb_s" in device, name
        if device["ib_gb_s"] is not None and device.get("nvlink_gb_s"):
            assert device["ib_gb_s"] <= device["nvlink_gb_s"], name   # a NIC is slower than the node's own link
    assert costs["overheads"]["collective_latency_us"]["ib"] >= costs["overheads"]["collective_latency_us"]["nvlink"]
    text = (Path(__file__).resolve().parent.parent / "rules/llm/data/costs.yaml").read_text()
    assert "ConnectX-7" in text and "DGX H100" in text


def test_default_is_one_node_and_max_nodes_one_changes_nothing(capsys):
    argv = ["tune", "--facts", "h100", "--model-path", QWEN_MOE, "--concurrency", "32"]
    assert main(argv) == 0
    plain = capsys.readouterr().out
    assert main([*argv, "--max-nodes", "1"]) == 0
    assert capsys.readouterr().out == plain
    assert " nodes " not in plain.splitlines()[1] and "--nnodes" not in plain
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "max_nodes" not in data and all("nodes" not in c for c in data["candidates"])


def test_the_node_count_is_in_the_text_and_the_json(capsys):
    argv = ["tune", "--facts", "h100", "--model-path", DEEPSEEK, "--max-nodes", "2", "--top", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].split()[-3:] == ["nodes", "fits", "flags"]
    assert "#1 launch, node 0 of 2:" in out and "#1 launch, node 1 of 2:" in out and "fill in: HOST" in out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["max_nodes"] == 2
    for c in data["candidates"]:
        assert c["nodes"] == 2 and len(c["node_argv"]) == 2 and _value(c["argv"], "--nnodes") == "2"


def test_max_nodes_is_checked(capsys):
    base = ["tune", "--facts", "h100", "--model-path", LLAMA_70B]
    assert main([*base, "--max-nodes", "0"]) == 2
    assert main([*base, "--max-nodes", "2", "--measure", "2"]) == 2   # this machine cannot serve two nodes
    capsys.readouterr()
