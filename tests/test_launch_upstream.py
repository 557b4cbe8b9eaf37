"""`accord launch` against upstream SGLang 0.5.23: upstream accepts each emitted command and holds
Accord's value for every field it decides.

The fixtures (tests/differential/fixtures/launch_oracle.json, built by `python -m
tests.differential.run_launch`, and launch_oracle_hand.json, its hand-picked commands: the longer
context's environment variable, DP attention's rewrites) hold legal commands, the upstream command `accord launch`
wrote for each, and what upstream's own parsing and resolution (the oracle) made of it; no sglang is
needed here. Each case is resolved and emitted again. A case whose command is no longer the stored one
is stale (a rule change moved a value; upstream's answer for the new command is unknown): it is not
counted, and at least 300 LLM and 100 diffusion cases must still be current, else the fixture must be
regenerated. In every current case each compared upstream field must hold Accord's value, except the
field classes and cases listed in tests/differential/launch_exceptions.yaml with reasons.
The figures print with `python -m tests.differential.launch_score`.
"""

from __future__ import annotations

import pytest

from tests.differential.launch_score import exceptions, load_fixtures, score


@pytest.fixture(scope="module")
def fixture():
    return load_fixtures()


@pytest.fixture(scope="module")
def results(fixture):
    return score(fixture)


def _stale(diffs) -> bool:
    return bool(diffs) and diffs[0][0] == "stale"


def _ids(fixture, results, system):
    """The current cases of a system (stale ones left out)."""
    return [c["id"] for c in fixture["cases"] if c["system"] == system and not _stale(results[c["id"]])]


@pytest.mark.parametrize("system, least", [("llm", 300), ("diffusion", 100)])
def test_enough_legal_commands_are_current(fixture, results, system, least):
    current = _ids(fixture, results, system)
    assert len(current) >= least, (
        f"only {len(current)} {system} cases still emit their stored command; regenerate the fixture "
        f"with `python -m tests.differential.run_launch` (needs the oracle venv)")


def test_the_environment_upstream_reads_is_exercised(fixture):
    assert any(case["env"] for case in fixture["cases"])


@pytest.mark.parametrize("system", ["llm", "diffusion"])
def test_upstream_accepts_and_agrees_in_at_least_99_percent(fixture, results, system):
    ids = _ids(fixture, results, system)
    agree = [i for i in ids if not results[i]]
    assert len(agree) >= 0.99 * len(ids), {i: results[i] for i in ids if results[i]}


def test_every_disagreement_is_listed_with_its_reason(results):
    listed = exceptions().get("cases") or {}
    unlisted = {cid: diffs for cid, diffs in results.items() if diffs and not _stale(diffs) and cid not in listed}
    assert not unlisted, unlisted
    for cid, entry in listed.items():
        assert entry.get("why"), cid
        if _stale(results.get(cid)):
            continue
        assert sorted({d[0] for d in results.get(cid, [])}) == sorted(entry["fields"]), (
            f"{cid}: listed as differing on {entry['fields']}, now {results.get(cid)}")


def test_every_field_exception_says_why():
    for system, fields in exceptions()["fields"].items():
        for name, rule in fields.items():
            assert rule.get("why"), (system, name)
