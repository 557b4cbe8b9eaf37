"""Launch-time conflict reports: a short proof per conflict, then fixes as pasteable command lines."""

import io
import re
import shlex

import pytest

from accord.resolver import api
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.explaining.conflict_report import command_argv
from accord.resolver.explaining.fixes import Fix
from accord.resolver.explaining.proof import render_conflict, wants_color
from tests.toy import B200, H100, TWO_CONFLICTS, toy_plan

ANSI = re.compile(r"\033\[[0-9;]*m")


@pytest.fixture
def plan(tmp_path, monkeypatch):
    plan = toy_plan(tmp_path)
    monkeypatch.setattr(api, "plan_for", lambda system: plan)
    return plan


def _conflict(user, facts):
    with pytest.raises(api.ConflictError) as err:
        api.resolve("llm", user, facts)
    return err.value


def _commands(text):
    """Every `command` block of a report, its ` \\` continuation lines joined."""
    out, current = [], None
    for line in text.splitlines():
        if line.startswith("  command"):
            current = line.split("command", 1)[1].strip()
        elif current is not None and line.startswith(" " * 12):
            current = current[:-1].rstrip() + " " + line.strip()
        else:
            current = None
            continue
        if not current.endswith("\\"):
            out.append(current)
            current = None
    return out


def test_proof_says_what_you_set_the_machine_the_rule_and_why(plan):
    text = render_conflict(_conflict({"attention_backend": "fa3"}, B200))
    lines = text.splitlines()
    assert lines[0] == "error: no legal llm configuration (1 conflict)"
    assert "  you set   --attention-backend fa3" in lines
    assert "  machine   gpu.sm=100" in lines
    assert "  rule      attn.fa3.hopper requires `gpu.sm == 90` when `attention_backend == 'fa3'`" in lines
    assert "  because   FA3 kernels are built for Hopper." in lines
    assert "  so        no legal configuration includes --attention-backend fa3 on this machine." in lines
    assert lines.index("  because   FA3 kernels are built for Hopper.") < lines.index("  fix       drop --attention-backend")


def test_the_proof_shows_the_values_the_rule_read(plan):
    text = render_conflict(_conflict({"attention_backend": "fa3"}, B200))
    assert "  reads     gpu.sm = 100, attention_backend = fa3" in text.splitlines()


def test_no_shipped_rule_condition_is_elided_in_a_proof():
    """Every condition of the real rule set prints whole, however long (no "see the rule file")."""
    from accord.resolver.explaining.report import rule_clause
    for system in ("llm", "diffusion"):
        for rule in api.plan_for(system).ruleset:
            if rule.kind in ("require", "conflict"):
                clause = rule_clause(rule)
                assert "see the rule file" not in clause
                assert " ".join(rule.when.source.split()) in clause if rule.when is not None else True


def test_flags_that_conflict_without_the_machine_say_so(plan):
    text = render_conflict(_conflict({"tp_size": 8, "dp_size": 3, "enable_dp_attention": True}, H100))
    assert "  machine" not in text
    assert "no legal configuration includes --dp-size 3 --enable-dp-attention." in text
    assert "  fix       --dp-size 8  (the rule's own fix)" in text


def test_no_color_unless_asked(plan):
    err = _conflict(TWO_CONFLICTS, B200)
    plain = render_conflict(err)
    colored = render_conflict(err, color=True)
    assert "\033" not in plain
    assert "\033[31m" in colored and "\033[32m" in colored
    assert ANSI.sub("", colored) == plain


def test_color_is_for_terminals_only(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert wants_color(Terminal()) and not wants_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_color(Terminal())


def test_every_fix_comes_with_a_command_that_keeps_the_other_flags(plan):
    for user, facts in ((TWO_CONFLICTS, B200), ({"tp_size": 16}, H100), ({"attention_backend": "fa3"}, B200)):
        err = _conflict(user, facts)
        report = err.to_dict()
        shown = [[f["command"] for f in c["fix_details"]] + [ch["then"]["command"] for ch in c["chains"] if ch["then"]]
                 for c in report["conflicts"]]
        expected = [shlex.join(argv) or "(no flags)" for each in shown for argv in each]
        if len(err.conflicts) > 1:
            expected.append(shlex.join(report["fix_all"]["command"]))
        assert _commands(render_conflict(err)) == expected  # the text prints the JSON's commands
        for conflict in err.conflicts:
            others = {n for c in err.conflicts if c is not conflict for n in c.flags}
            for fix, entry in zip(conflict.fixes, report["conflicts"][err.conflicts.index(conflict)]["fix_details"]):
                _, parsed = parse_flags(entry["command"], system="llm")
                assert parsed.user == fix.apply(user)  # only the fix's own change differs
                api.resolve("llm", {k: v for k, v in parsed.user.items() if k not in others}, facts)


def test_several_conflicts_end_with_one_combined_fix_that_resolves(plan):
    text = render_conflict(_conflict(TWO_CONFLICTS, B200))
    assert text.splitlines().index("combined fix (all 2 conflicts)") > text.splitlines().index("conflict 2 of 2")
    command = _commands(text)[-1]
    _, parsed = parse_flags(shlex.split(command), system="llm")
    config = api.resolve("llm", parsed.user, B200)
    assert config.values["dp_size"] == 8 and config.values["attention_backend"] != "fa3"
    assert config.values["tp_size"] == 8 and config.values["enable_dp_attention"] is True


def test_a_drop_that_exposes_another_rule_is_shown_as_a_chain(plan):
    # Dropping --enable-dp-attention leaves dp 3 x tp 8 = 24 ranks on 8 GPUs.
    text = render_conflict(_conflict({"tp_size": 8, "dp_size": 3, "enable_dp_attention": True}, H100))
    chain = next(line for line in text.splitlines() if line.startswith("  chain"))
    assert chain.startswith("  chain     dropping --enable-dp-attention still fails because rule par.world_size.fits")


def test_the_report_wraps_to_the_width(plan):
    err = _conflict(TWO_CONFLICTS, B200)
    for width in (60, 100):
        assert max(len(line) for line in render_conflict(err, width=width).splitlines()) <= width


def test_command_argv_keeps_the_users_order_and_applies_the_fix(plan):
    user = {"tp_size": 8, "attention_backend": "fa3", "enable_dp_attention": False}
    assert command_argv(plan.catalog, user, [Fix(changes=(("attention_backend", "triton"),))]) == \
        ["--tp-size", "8", "--attention-backend", "triton"]
    assert command_argv(plan.catalog, user, [Fix(changes=(("page_size", 16),), drops=("tp_size",))]) == \
        ["--attention-backend", "fa3", "--page-size", "16"]
    assert command_argv(plan.catalog, {"tp_size": 8}, [Fix(changes=(), drops=("tp_size",))]) == []


def test_a_proof_prints_the_choice_metadata_the_rule_read(tmp_path, monkeypatch):
    from accord.resolver.language.catalog import load_catalog
    from accord.resolver.language.ruleset import load_rules
    from accord.resolver.solving.solve import Plan
    from tests.toy import A100, write_meta_toy
    write_meta_toy(tmp_path)
    plan = Plan(load_catalog("llm", tmp_path), load_rules("llm", tmp_path))
    monkeypatch.setattr(api, "plan_for", lambda system: plan)
    err = _conflict({"attention_backend": "flashinfer"}, A100)
    text = render_conflict(err, width=200)
    assert "rule      attn.sm.listed requires `gpu.sm in meta(attention_backend).sms`" in text
    assert "derived   meta(attention_backend).sms = [90, 100] because attention_backend = flashinfer" in text
    (step,) = [s for c in err.to_dict()["conflicts"] for s in c["proof"] if s["rule"] == "attn.sm.listed"]
    assert "meta(attention_backend).sms = [90, 100] because attention_backend = flashinfer" in step["derived"]
