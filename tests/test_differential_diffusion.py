"""Differential test: Accord against upstream SGLang 0.5.23 on random diffusion launches.

The fixtures (tests/differential/fixtures/diffusion_oracle*.json) hold upstream's own resolution of
seeded random commands (six published diffusion models, the CUDA fact presets, one to five
high-impact flags each; ids d* from the first flag menu, later batches from the wide menu,
`diffusion_gen N SEED OUT --wide PREFIX`: e* and f* in diffusion_oracle.json, g* (seed 1203) and
h* (seed 4242), i* (seed 777, drawn after the last rule change and scored untuned) and j* (seed
3109, issue 30: drawn before its rule changes, scored only after them) and n* (seed 5021, drawn
after issue 30's rule changes and scored untuned) in diffusion_oracle_g.json, _h.json, _i.json,
_j.json and _n.json) and two hand-written sets:
diffusion_oracle_known.json (ids k*), commands for disagreements found earlier, and
diffusion_oracle_user.json (ids u*), launches as the docs and model cards write them; all recorded
with the oracle
(`python -m tests.differential.diffusion_score oracle ...`); replaying them needs no sglang. Each
case is resolved by Accord here and compared on accept/reject and the fields seed 004 defines
(tests/differential/diffusion_score.py). Every disagreement must be listed, with its reason, in
tests/differential/diffusion_disagreements.yaml, and the table must match exactly, so a
regression and an unnoticed improvement both fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.differential.diffusion_score import load_table, score

HERE = Path(__file__).resolve().parent / "differential"
FIXTURE = [case for path in sorted((HERE / "fixtures").glob("diffusion_oracle*.json"))
           for case in json.loads(path.read_text())]
TABLE = load_table(HERE / "diffusion_disagreements.yaml")
PARALLEL_FIELDS = {"enable_cfg_parallel", "cfg_parallel_degree", "sp_degree", "ulysses_degree", "ring_degree"}
REASONS = {"seed wins", "upstream bug", "launch-time truth", "open"}


@pytest.fixture(scope="module")
def scored():
    return score(FIXTURE)


def test_fixture_has_at_least_150_upstream_answers():
    assert len(FIXTURE) >= 150
    assert len({case["id"] for case in FIXTURE}) == len(FIXTURE)
    assert all(case["oracle"]["status"] in ("ok", "error") for case in FIXTURE)


def test_every_disagreement_is_listed_with_its_fields(scored):
    differ, _ = scored
    listed = {case_id: row["fields"] for case_id, row in TABLE.items()}
    assert differ == listed


def test_every_listed_disagreement_has_a_reason():
    for case_id, row in TABLE.items():
        assert row["reason"] in REASONS, case_id
        assert row.get("note"), case_id


def test_at_least_83_percent_agree_strictly_and_all_but_seed_wins_agree(scored):
    # Measured on the random commands only (the hand-written k* cases were picked because they
    # disagreed, the u* ones are not random: 45 of 46 agree): 1139 of 1360 (83.8%), the first 240
    # cases and seven fresh batches drawn from the wide flag menu (ids e*, f*, g*, h*, i*, j*, n*:
    # 508 of 600, 101 of 120, 136 of 160, 134 of 160, 131 of 160, 129 of 160 agree). Every case
    # left is listed for a reason; seed-wins cases (the seed is the specification where 0.5.23
    # differs: above all its breakable-CUDA-graph model list, which 0.5.23 widened to FLUX and Wan)
    # are most of them, so the agreement on everything else is the figure that must stay high.
    differ, _ = scored
    random_ids = [case["id"] for case in FIXTURE if not case["id"].startswith(("k", "u"))]
    assert len(random_ids) >= 1000
    strict = [i for i in random_ids if i not in differ]
    assert len(strict) / len(random_ids) >= 0.83
    other = [i for i in random_ids if i in differ and TABLE[i]["reason"] != "seed wins"]
    # 1338 of 1360 (98.4%): the 22 others are launch-time truths (upstream's launch code fails what
    # its resolution passed) and upstream bugs, each listed.
    assert (len(random_ids) - len(other)) / len(random_ids) >= 0.98
    assert not [i for i in other if TABLE[i]["reason"] == "open"]


def test_hand_written_user_launches_agree(scored):
    """Launches as upstream's docs and model cards write them (ids u*): all but an upstream bug agree."""
    differ, _ = scored
    user = [case["id"] for case in FIXTURE if case["id"].startswith("u")]
    assert len(user) >= 40
    assert [i for i in user if i in differ and TABLE[i]["reason"] != "upstream bug"] == []


def test_cfg_parallel_is_automatic_for_guidance_models_only(scored):
    """Seed L1009-1048: two GPUs or more and no parallel flag turn CFG parallel on for Qwen-Image
    and Wan (default guidance), never for FLUX or Z-Image-Turbo; the rest of the GPUs go to SP."""
    differ, _ = scored
    checked = 0
    for case in FIXTURE:
        argv, oracle = case["argv"], case["oracle"]
        plain = not any(a.startswith(("--sp", "--ulysses", "--ring", "--cfg", "--enable-cfg", "--performance"))
                        for a in argv)
        if oracle["status"] == "ok" and plain and oracle["resolved"]["num_gpus"] >= 2 \
                and differ.get(case["id"]) != ["status"]:
            assert not PARALLEL_FIELDS & set(differ.get(case["id"], ())), case["id"]
            checked += 1
    assert checked >= 10
