"""Known SGLang issues (rules of kind known_bad, rules/llm/known_issues.yaml): a warning by default, a
conflict with `accord resolve --strict`, left out of `accord matrix` rows unless
`--include-known-bad`; an entry must give its releases (a range the loader turns into the condition
on sglang_release), its issue, its fix (or null) and its symptom, and says nothing outside its range."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accord.resolver.cli import main
from accord.resolver.errors import UsageError
from accord.resolver.language.expr import constant, parse
from accord.resolver.language.ruleset import (
    SYMPTOMS,
    _rule_from_yaml,
    known_issue_derived,
    known_issues,
    load_rules,
    parse_releases,
    release_conditions,
    release_in,
)

MODELS = Path(__file__).resolve().parent / "differential" / "fixtures" / "models"
DEEPSEEK = str(MODELS / "deepseek-ai" / "DeepSeek-V3")
REPORTED = ["--facts", "b200", "--fact", "packages.sglang=0.4.10.post2", "--model-path", DEEPSEEK,
            "--tp-size", "8", "--attention-backend", "trtllm_mla"]



def test_resolve_warns_and_cites_the_report(capsys):
    assert main(["resolve", "--json", *REPORTED]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    bad = [w for w in warnings if w.startswith("[bad.trtllm_mla.deepseek_gibberish]")]
    assert bad and "https://github.com/sgl-project/sglang/issues/8736" in bad[0] and "0.4.10.post2" in bad[0]


def test_strict_refuses_it_with_exit_3_and_a_fix(capsys):
    assert main(["resolve", "--strict", "--json", *REPORTED]) == 3
    report = json.loads(capsys.readouterr().out)
    assert any("bad.trtllm_mla.deepseek_gibberish" in c["rules"] for c in report["conflicts"])
    assert any(c["fixes"] for c in report["conflicts"])


@pytest.mark.parametrize("release", [["--fact", "packages.sglang=0.5.23"], []], ids=["named", "default 0.5.23"])
def test_a_fixed_release_is_not_warned_about(capsys, release):
    argv = [w for w in REPORTED if w not in ("--fact", "packages.sglang=0.4.10.post2")]
    assert main(["resolve", "--strict", "--json", *release, *argv]) == 0
    assert not [w for w in json.loads(capsys.readouterr().out)["warnings"] if w.startswith("[bad.")]


def _matrix_rows(capsys, tmp_path, *extra):
    facts = tmp_path / "b200-sglang-0.4.10.yaml"
    facts.write_text("preset: b200\npackages:\n  sglang: 0.4.10.post2\n")
    assert main(["matrix", "--facts", str(facts), "--model-path", DEEPSEEK, "--axes", "attention_backend",
                 "--values", "attention_backend=trtllm_mla,flashinfer", "--strategy", "all",
                 "--format", "json", *extra, "--fix", "--tp-size 8"]) == 0
    return json.loads(capsys.readouterr().out)


def test_matrix_leaves_known_bad_rows_out_unless_asked(capsys, tmp_path):
    def backends(data):
        rows = data["rows"] if isinstance(data, dict) else data
        return sorted(row["attention_backend"] for row in rows)
    assert backends(_matrix_rows(capsys, tmp_path)) == ["flashinfer"]
    assert backends(_matrix_rows(capsys, tmp_path, "--include-known-bad")) == ["flashinfer", "trtllm_mla"]


ENTRY = {"id": "bad.x", "kind": "known_bad", "when": "enable_two_batch_overlap", "message": "m", "reason": "r",
         "releases": ">=0.4.4.post1, <0.4.8", "issue": "https://github.com/sgl-project/sglang/issues/1",
         "fixed_by": "https://github.com/sgl-project/sglang/pull/2", "symptom": "crash"}


@pytest.mark.parametrize("key, value, message", [
    ("releases", "0.4.8", "'releases' bound '0.4.8' is not an operator"),
    ("releases", ">=0.4.8rc1, <0.5", "is not an operator"),
    ("releases", ">=0.4.4", "must bound the range on both sides"),
    ("releases", ">=0.5.0, <0.4.0", "holds no release at all"),
    ("releases", "", "'releases' must be"),
    ("issue", "not a url", "'issue' must be the public report"),
    ("issue", "https://github.com/sgl-project/sglang", "'issue' must be the public report"),
    ("fixed_by", "#6081", "'fixed_by' must be one pull request URL"),
    ("symptom", "garbage", "has symptom 'garbage'"),
    ("when", [], "'when' must be the trigger"),
])
def test_a_malformed_known_issue_fails_in_one_paragraph(key, value, message):
    entry = {**ENTRY, key: value}
    with pytest.raises(UsageError, match=message) as err:
        _rule_from_yaml(entry, "known_issues", Path("known_issues.yaml"), {}, {})
        known_issue_derived(entry, "known_issues.yaml: rule 'bad.x'", {}, {})
    assert "\n" not in str(err.value) and "bad.x" in str(err.value)


@pytest.mark.parametrize("missing", ["releases", "issue", "fixed_by", "symptom"])
def test_a_known_issue_lacking_a_field_is_refused(missing):
    entry = {k: v for k, v in ENTRY.items() if k != missing}
    with pytest.raises(UsageError, match=missing):
        _rule_from_yaml(entry, "known_issues", Path("known_issues.yaml"), {}, {})


RELEASES = ("0.4.3 0.4.4 0.4.4.post1 0.4.4.post4 0.4.7 0.4.7.post1 0.4.8 0.4.9 0.4.9.post2 0.4.9.post6 0.4.10 "
            "0.4.10.post2 0.5.1 0.5.6 0.5.6.post1 0.5.6.post2 0.5.15 0.5.15.post1 0.5.16 0.5.23").split()


@pytest.mark.parametrize("releases", [">=0.4.4.post1, <0.4.8", "==0.4.10.post2", ">0.4.4.post1, <=0.4.9.post2",
                                      ">=0.5.6, <=0.5.6.post1", "==0.5.6", ">=0.4.9, <0.5.16"])
def test_the_rule_condition_and_the_comparator_agree_on_every_release(releases):
    conditions = release_conditions(parse_releases(releases, "t"), "sglang_release")
    for release in RELEASES:
        names = {"sglang_release": constant("sglang_release", release)}
        in_rule = all(parse(c, names)(None) for c in conditions)
        assert in_rule == release_in(release, releases), (releases, release)


def test_post_releases_are_ordered():
    assert release_in("0.4.4.post1", ">=0.4.4.post1, <0.4.8") and not release_in("0.4.4", ">=0.4.4.post1, <0.4.8")
    assert release_in("0.4.7.post1", ">=0.4.4.post1, <0.4.8") and not release_in("0.4.8", ">=0.4.4.post1, <0.4.8")
    assert not release_in("0.5.0rc2", ">=0.4.4, <0.6.0")  # a pre-release is no released version


def test_every_known_issue_has_structured_data():
    issues = known_issues("llm")
    assert len(issues) >= 50
    ids = {i["id"] for i in issues}
    rules = load_rules("llm").by_id()
    for issue in issues:
        assert issue["symptom"] in SYMPTOMS and issue["issue"] and issue["releases"]
        assert all(u.startswith("https://github.com/sgl-project/sglang/") for u in issue["issue"])
        rule = rules[issue["id"]]
        assert rule.kind == "known_bad" and all(u in rule.message for u in issue["issue"])
        # quiet for 0.5.23 (the release resolved for by default) unless the range reaches it
        assert release_in("0.5.23", issue["releases"]) == (issue["id"] in {
            "bad.spec.steps_without_topk", "bad.deterministic.model_default_kernel"}), issue["id"]
    assert {"bad.trtllm_mla.deepseek_gibberish", "bad.dp_attention.mtp_multinode", "bad.tbo.speculative",
            "bad.llama4.paged_fa3", "bad.spec.steps_without_topk", "bad.deterministic.model_default_kernel"} <= ids
