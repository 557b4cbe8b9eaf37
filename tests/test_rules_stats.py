"""`accord rules --stats`: every seed rule is accounted for, and the encoded share stays >= 90%."""

import json
import re
from pathlib import Path

import pytest

from accord.resolver.cli import main
from accord.resolver.commands.rules import coverage

SEED_RULES = Path(__file__).resolve().parents[2] / "shared" / "reference" / "seed_rules.md"


def _seed_ids():
    """Rule ids of sections 1 (llm) and 2 (diffusion) of seed_rules.md."""
    text = SEED_RULES.read_text(encoding="utf-8").split("\n## 3.")[0]
    ids = re.findall(r"^\| `([\w.]+)` \|", text, flags=re.M)
    return {"llm": {i for i in ids if not i.startswith("d.")}, "diffusion": {i for i in ids if i.startswith("d.")}}


@pytest.mark.skipif(not SEED_RULES.exists(), reason="needs ../shared/reference/seed_rules.md beside the checkout")
@pytest.mark.parametrize("system", ["llm", "diffusion"])
def test_every_seed_rule_is_encoded_or_explained(system):
    cov = coverage(system)
    accounted = set(cov["encoded"]) | set(cov["not_encoded"])
    expected = _seed_ids()[system]
    assert not expected - accounted, f"seed rules neither encoded nor explained: {sorted(expected - accounted)}"
    assert not accounted - expected, f"ids that are not seed rules: {sorted(accounted - expected)}"


def test_llm_seed_coverage_is_at_least_90_percent():
    assert coverage("llm")["percent"] >= 90.0


def test_stats_json_maps_seed_rules_to_accord_rules(capsys):
    assert main(["rules", "--stats", "--system", "llm", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rules"] == sum(data["by_kind"].values())
    assert all(ids for ids in data["seed_coverage"]["encoded"].values())
    assert all(why for why in data["seed_coverage"]["not_encoded"].values())
