"""Known-bad runtime combinations (rules of kind known_bad, rules/llm/known_bad.yaml): a warning by
default, a conflict with `accord resolve --strict`, left out of `accord matrix` rows unless
`--include-known-bad`; a rule must cite its public report and the versions it affects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accord.resolver.cli import main
from accord.resolver.errors import UsageError
from accord.resolver.language.ruleset import _rule_from_yaml

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


@pytest.mark.parametrize("missing, message", [("report", "'report' must be"), ("affects", "'affects' must")])
def test_a_known_bad_rule_needs_its_report_and_versions(missing, message):
    entry = {"id": "bad.x", "kind": "known_bad", "when": "enable_two_batch_overlap", "message": "m",
             "reason": "r", "report": "https://github.com/sgl-project/sglang/issues/1", "affects": "0.4.8"}
    entry[missing] = "not a url" if missing == "report" else ""
    with pytest.raises(UsageError, match=message):
        _rule_from_yaml(entry, "known_bad", Path("known_bad.yaml"), {}, {})
