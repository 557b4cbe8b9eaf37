"""`accord launch` over several nodes: every node's command in `--dry-run --json`, and the rank of the
node a launch runs on (typed, or from Slurm's or LeaderWorkerSet's variable).

Why: N nodes run one command that differs only in the rank; a wrong rank is silent until the
rendezvous hangs, so a typed rank that the scheduler's variable contradicts is an error, never
silently replaced. Whether upstream resolves each node's command to Accord's values is measured
against the oracle by tests/differential/launch_fixpoint.py (every node of the issue-38 launches).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from accord.resolver.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "differential" / "fixtures" / "models"
R1 = str(MODELS / "deepseek-ai" / "DeepSeek-R1-0528")
Q235 = str(MODELS / "Qwen" / "Qwen3-235B-A22B")
ADDR = ("--dist-init-addr", "10.0.0.1:20000")
R1_4X8 = ("--facts", "h100", "--model-path", R1, "--tp-size", "32", "--nnodes", "4", *ADDR)
Q_2X8 = ("--facts", "h100", "--model-path", Q235, "--tp-size", "16", "--ep-size", "16", "--nnodes", "2", *ADDR)
RANK_VARS = ("SLURM_NODEID", "LWS_WORKER_INDEX")


@pytest.fixture(autouse=True)
def _no_scheduler(monkeypatch):
    for name in RANK_VARS:
        monkeypatch.delenv(name, raising=False)


def launch(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["launch", *argv])
    return code, out.getvalue(), err.getvalue()


def dry(*argv: str) -> dict:
    code, out, err = launch("--dry-run", "--json", *argv)
    assert code == 0, err
    return json.loads(out)


def _without_rank(command: list[str]) -> list[str]:
    at = command.index("--node-rank")
    return command[:at] + command[at + 2:]


def test_one_entry_per_node_differing_only_in_the_rank():
    data = dry(*R1_4X8)
    nodes = data["nodes"]
    assert [n["node_rank"] for n in nodes] == [0, 1, 2, 3]
    for node in nodes:
        command = node["command"]
        assert command[command.index("--node-rank") + 1] == str(node["node_rank"])
        assert _without_rank(command) == _without_rank(nodes[0]["command"])
        assert node["env"] == nodes[0]["env"]
    assert data["command"] == nodes[0]["command"]


def test_one_node_launch_has_no_nodes_entry():
    qwen = str(MODELS / "Qwen" / "Qwen3-8B")
    assert "nodes" not in dry("--facts", "h100", "--model-path", qwen)


def test_rank_from_slurm(monkeypatch):
    monkeypatch.setenv("SLURM_NODEID", "1")
    code, out, err = launch("--dry-run", *Q_2X8)
    assert code == 0, err
    words = out.split()
    assert words[words.index("--node-rank") + 1] == "1"
    assert "read from $SLURM_NODEID" in err
    data = dry(*Q_2X8)
    assert data["values"]["node_rank"] == 1 and data["command"] == data["nodes"][1]["command"]


def test_rank_from_leaderworkerset(monkeypatch):
    monkeypatch.setenv("LWS_WORKER_INDEX", "3")
    data = dry(*R1_4X8)
    assert data["values"]["node_rank"] == 3


def test_a_typed_rank_that_agrees_with_the_scheduler_is_kept(monkeypatch):
    monkeypatch.setenv("SLURM_NODEID", "1")
    assert dry(*Q_2X8, "--node-rank", "1")["values"]["node_rank"] == 1


@pytest.mark.parametrize("env, extra, needle", [
    ({"SLURM_NODEID": "1"}, ("--node-rank", "0"), "--node-rank 0 was typed, but $SLURM_NODEID=1"),
    ({"SLURM_NODEID": "1", "LWS_WORKER_INDEX": "0"}, (), "name different node ranks"),
    ({"LWS_WORKER_INDEX": "2"}, (), "counts nodes 0 to 1"),
    ({"SLURM_NODEID": "one"}, (), "not a node rank"),
])
def test_bad_ranks_are_usage_errors(monkeypatch, env, extra, needle):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, err = launch("--dry-run", *Q_2X8, *extra)
    assert code == 2 and needle in err and not out and "Traceback" not in err


def test_one_node_launch_ignores_the_scheduler(monkeypatch):
    """A Slurm job may start one single-node server per node: SLURM_NODEID is not its rank."""
    monkeypatch.setenv("SLURM_NODEID", "5")
    qwen = str(MODELS / "Qwen" / "Qwen3-8B")
    assert dry("--facts", "h100", "--model-path", qwen)["values"]["node_rank"] == 0


def test_missing_rendezvous_address_is_a_conflict_with_a_fill_in_fix():
    code, out, err = launch("--dry-run", "--json", *Q_2X8[:-2])
    assert code == 3
    conflict = json.loads(out)["conflicts"][0]
    assert "par.dist_init_addr.multinode" in conflict["rules"]
    assert any("HOST:PORT" in json.dumps(fix) for fix in conflict["fixes"])


def test_emit_commands_one_line_per_node_with_a_fill_in_comment():
    code, out, err = launch("--emit", "commands", *Q_2X8[:-2])
    assert code == 0, err
    lines = out.splitlines()
    assert any(line.startswith("# fill in: HOST") for line in lines)
    commands = [line for line in lines if not line.startswith("#")]
    assert len(commands) == 2
    assert all("--dist-init-addr HOST:20000" in line and "--host 0.0.0.0" in line for line in commands)
    assert "--node-rank 0" in commands[0] and "--node-rank 1" in commands[1]


def test_emit_commands_keeps_a_typed_address():
    code, out, err = launch("--emit", "commands", *Q_2X8)
    assert code == 0, err
    assert "fill in" not in out and out.count("--dist-init-addr 10.0.0.1:20000") == 2
