"""Real launch commands from public SGLang issue reports (tests/differential/fixtures/issue_reports_llm.yaml):
Accord catches most of the real failures before launch and leaves the working launches alone.

A failure counts as caught when `accord resolve` refuses it, or warns, naming the rule the entry
expects (`caught_by`, a known-bad rule citing that very report); each report runs with the release
its reporter ran (`packages.sglang`), so a fixed release would make the rule quiet.
"""

from __future__ import annotations

import pytest

from tests.differential.issue_reports import FAILURES, accord_verdict, caught, load_reports

REPORTS = load_reports()


@pytest.mark.parametrize("report", REPORTS, ids=[r["id"] for r in REPORTS])
def test_each_report_gets_the_expected_answer(report):
    verdict = accord_verdict(report)
    if report["outcome"] in FAILURES and report["caught_by"] is None:
        assert not any(r.startswith("bad.") for r in verdict["rules"]), verdict  # no invented cause
    else:
        assert caught(report, verdict), verdict


def test_every_report_cites_a_public_url_and_known_bad_rules_cite_their_report():
    from accord.resolver.language.ruleset import load_rules

    rules = load_rules("llm").by_id()
    for report in REPORTS:
        assert report["url"].startswith("https://github.com/sgl-project/sglang/"), report["id"]
        if report["caught_by"]:
            assert report["url"] in rules[report["caught_by"]].message, report["id"]


def test_most_real_failures_are_caught_before_launch():
    failures = [r for r in REPORTS if r["outcome"] in FAILURES]
    hits = [r["id"] for r in failures if caught(r, accord_verdict(r))]
    assert len(failures) >= 8 and len(hits) / len(failures) > 0.5, hits


def test_a_known_bad_rule_is_quiet_for_a_release_past_its_fix():
    report = next(r for r in REPORTS if r["id"] == "sglang-8736")
    assert "bad.trtllm_mla.deepseek_gibberish" in accord_verdict(report)["rules"]
    assert accord_verdict({**report, "sglang": "0.5.23"})["rules"] == []
