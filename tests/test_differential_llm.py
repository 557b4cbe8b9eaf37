"""LLM differential test: Accord against upstream SGLang 0.5.23's answers on the same commands.

The fixtures (tests/differential/fixtures/llm_oracle*.json: seed 13 with the hand-picked cases, and
fresh seed-29, seed-41 and seed-53 batches, each scored only after the rules were tuned on the ones before, the
issue-30 hand-written checks (h30-*), the untuned seed-3107 batch of issue 30, the seed-4219 and
seed-5309 batches drawn after it, and the seed-6421 batch drawn after issues 34-39) hold generated launch
commands and what the upstream oracle decided for each (built by `python -m
tests.differential.run_llm`); no sglang is needed here. Every case must agree with upstream, except the cases listed in
tests/differential/llm_disagreements.yaml, each with its reason (seed wins, upstream bug, launch-time
truth; `open` marks a difference not yet resolved, which does not count as agreement). The table
must match exactly: a new disagreement is a regression, a listed case that now agrees is an
accidental change of a deliberate decision; both fail.

Issue 12 counts a case as agreeing when Accord decides what upstream decides "within the rules":
a listed disagreement with a deliberate reason counts, an `open` one does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.differential.score import load_fixtures, score

HERE = Path(__file__).resolve().parent / "differential"
DELIBERATE = {"seed wins", "upstream bug", "launch-time truth"}
REASONS = DELIBERATE | {"open"}


@pytest.fixture(scope="module")
def results():
    return score(load_fixtures(sorted((HERE / "fixtures").glob("llm_oracle*.json"))))


@pytest.fixture(scope="module")
def table():
    return yaml.safe_load((HERE / "llm_disagreements.yaml").read_text())["cases"]


def test_fixture_is_large_enough(results):
    assert len(results) >= 700


def test_every_listed_disagreement_has_a_known_reason(table):
    for cid, entry in table.items():
        assert entry["reason"] in REASONS, cid
        assert entry.get("why"), cid


def test_agreement_within_the_rules_is_at_least_95_percent(results, table):
    agree = sum(1 for cid, diffs in results.items()
                if not diffs or table.get(cid, {}).get("reason") in DELIBERATE)
    assert agree / len(results) >= 0.95, f"{agree}/{len(results)}"


def test_unlisted_cases_agree_with_upstream(results, table):
    regressions = {cid: diffs for cid, diffs in results.items() if diffs and cid not in table}
    assert regressions == {}


def test_listed_disagreements_still_disagree_on_the_listed_fields(results, table):
    changed = {cid: sorted({d[0] for d in results.get(cid, [])}) for cid in table
               if sorted({d[0] for d in results.get(cid, [])}) != sorted(table[cid]["fields"])}
    assert changed == {}


@pytest.mark.parametrize("batch, measured", [("r3107", "319 and 320 of 320"), ("r4219", "296 and 298 of 300"),
                                              ("r5309", "297 and 300 of 300"), ("r6421", "298 and 300 of 300")])
def test_the_untuned_batches_meet_the_agreement_targets(table, batch, measured):
    """Batches drawn fresh and scored only after the rules were written (seed 3107 before issue
    30's rule changes; seed 4219 after them, whose first scoring prompted only the --relax rounds
    for case r4219-0009; seed 5309 after that, nothing changed for it; seed 6421 after issues 34-39,
    its 35 disagreements classified by the reasons of earlier cases with the same disagreement,
    nothing changed for it), as `accord resolve --strict`
    answers them (known-bad combinations refused, among them the launch 0.5.23 crashes on while
    resolving): every compared field agrees, relaxed changes included, in at least 97% of the
    commands, and accept/reject in at least 99% when a refusal whose --relax gives upstream's exact
    configuration counts as accepted (measured: `measured`; print with
    `python -m tests.differential.score tests/differential/fixtures/llm_oracle_BATCH.json --measures --strict`).
    Every remaining difference is in the disagreement table with its reason."""
    from tests.differential.score import two_measures

    fixture = load_fixtures([HERE / "fixtures" / f"llm_oracle_{batch}.json"])
    m = two_measures(fixture, table, strict=True)
    assert m["total"] >= 300
    assert len(m["every_field"]) / m["total"] >= 0.97
    assert (len(m["accept_reject"]) + len(m["by_relax"])) / m["total"] >= 0.99
    assert all(cid in table for cid, diffs in m["cases"].items() if diffs)
