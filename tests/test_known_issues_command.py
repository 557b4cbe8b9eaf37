"""`accord known-issues`: the known SGLang issues as a list, by release, or for one launch."""

from __future__ import annotations

import json
from pathlib import Path

from accord.resolver.cli import main

DEEPSEEK = str(Path(__file__).resolve().parent / "differential" / "fixtures" / "models" / "deepseek-ai" / "DeepSeek-V3")
LAUNCH = ["--facts", "b200", "--model-path", DEEPSEEK, "--tp-size", "8", "--attention-backend", "trtllm_mla"]


def _json(capsys, *argv):
    code = main(["known-issues", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_lists_every_known_issue_with_its_data(capsys):
    code, data = _json(capsys)
    assert code == 0 and len(data["issues"]) >= 50 and data["release"] is None
    first = data["issues"][0]
    assert set(first) == {"id", "symptom", "releases", "issue", "fixed_by", "message"}
    assert all(i["issue"][0].startswith("https://github.com/sgl-project/sglang/") for i in data["issues"])


def test_release_keeps_the_issues_affecting_it(capsys):
    _, data = _json(capsys, "--release", "0.4.7.post1")
    ids = {i["id"] for i in data["issues"]}
    assert "bad.dp_attention.mtp_multinode" in ids and "bad.tbo.speculative" in ids
    assert "bad.trtllm_mla.deepseek_gibberish" not in ids
    _, fixed = _json(capsys, "--release", "0.4.8")
    assert "bad.dp_attention.mtp_multinode" not in {i["id"] for i in fixed["issues"]}


def test_symptom_filter(capsys):
    _, data = _json(capsys, "--symptom", "hang")
    assert data["issues"] and all(i["symptom"] == "hang" for i in data["issues"])


def test_a_launch_lists_what_it_triggers_on_that_release(capsys):
    code, data = _json(capsys, "--release", "0.4.10.post2", *LAUNCH)
    assert code == 0 and data["launch"] is True and data["release"] == "0.4.10.post2"
    assert [i["id"] for i in data["issues"]] == ["bad.trtllm_mla.deepseek_gibberish"]
    _, later = _json(capsys, *LAUNCH)  # 0.5.23 by default: fixed
    assert later["release"] == "0.5.23" and later["issues"] == []


def test_the_release_may_come_from_the_fact(capsys):
    _, data = _json(capsys, "--fact", "packages.sglang=0.4.10.post2", *LAUNCH)
    assert data["release"] == "0.4.10.post2" and len(data["issues"]) == 1


def test_text_output(capsys):
    assert main(["known-issues", "--release", "0.4.10.post2", *LAUNCH]) == 0
    out = capsys.readouterr().out
    assert "bad.trtllm_mla.deepseek_gibberish" in out and "issues/8736" in out and "wrong-output" in out


def test_bad_release_and_bad_flag_are_usage_errors(capsys):
    assert main(["known-issues", "--release", "0.5"]) == 2
    assert "not an SGLang release" in capsys.readouterr().err
    assert main(["known-issues", "--facts", "h100", "--no-such-flag"]) == 2


def test_an_illegal_launch_exits_3(capsys):
    assert main(["known-issues", "--json", "--facts", "h100", "--tp-size", "3", "--enable-dp-attention",
                 "--dp-size", "2"]) == 3
