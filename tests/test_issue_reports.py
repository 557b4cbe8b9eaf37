"""Real launch commands from public SGLang issue reports (tests/differential/fixtures/issue_reports_llm.yaml):
Accord catches most of the real failures before launch and leaves the working launches alone.

A failure counts as caught when `accord resolve` refuses it, or warns, naming the rule the entry
expects (`caught_by`, a known issue of rules/llm/known_issues.yaml citing that very report); each report runs with the release
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
    assert len(failures) >= 30 and len(hits) / len(failures) > 0.7, hits


def test_the_set_is_honest_about_what_no_setting_explains():
    """At least 35 reports, with working launches and failures no launch setting explains (an
    environment problem, a workload bug), and every expected known issue covers the reporter's release."""
    from accord.resolver.language.ruleset import known_issues, release_in_bounds, release_key

    assert len(REPORTS) >= 35
    assert sum(r["outcome"] == "works" for r in REPORTS) >= 5
    assert sum(r["outcome"] in FAILURES and r["caught_by"] is None for r in REPORTS) >= 5
    issues = {i["id"]: i for i in known_issues("llm")}
    for report in REPORTS:
        if report["caught_by"] in issues:
            key = release_key(report["sglang"])
            assert release_in_bounds(key, issues[report["caught_by"]]["bounds"]), report["id"]


def test_a_known_bad_rule_is_quiet_for_a_release_past_its_fix():
    report = next(r for r in REPORTS if r["id"] == "sglang-8736")
    assert "bad.trtllm_mla.deepseek_gibberish" in accord_verdict(report)["rules"]
    assert accord_verdict({**report, "sglang": "0.5.23"})["rules"] == []
