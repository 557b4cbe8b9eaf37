"""Launch-time conflict reports: a short proof per conflict, then fixes as pasteable command lines."""

import io
import re
import shlex

import pytest

from resolver import api
from resolver.explain import Fix
from resolver.flagparse import parse_flags
from resolver.proof import command_line, render_conflict, wants_color
from tests.toy import B200, H100, toy_plan

ANSI = re.compile(r"\033\[[0-9;]*m")
TWO_CONFLICTS = {"tp_size": 8, "dp_size": 3, "enable_dp_attention": True, "attention_backend": "fa3"}


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
    return [line.split("command", 1)[1].split("   (")[0].strip()
            for line in text.splitlines() if line.startswith("  command")]


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
    from resolver.report import rule_clause
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
    assert "  fix       --dp-size 8  (what upstream does)" in text


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


def test_every_fix_comes_with_a_command_that_parses_and_resolves(plan):
    for user, facts in ((TWO_CONFLICTS, B200), ({"tp_size": 16}, H100), ({"attention_backend": "fa3"}, B200)):
        err = _conflict(user, facts)
        text = render_conflict(err)
        commands = _commands(text)
        assert len(commands) == sum(len(c.fixes) for c in err.conflicts) > 0
        for command in commands:
            words = [] if command == "(no flags)" else shlex.split(command)
            _, parsed = parse_flags(words, system="llm")
            api.resolve("llm", parsed.values, facts)  # raises if the pasted command is still illegal


def test_a_command_fixes_the_other_conflicts_too(plan):
    text = render_conflict(_conflict(TWO_CONFLICTS, B200))
    # conflict 1 (fa3 on Blackwell): each command also carries the upstream fix of conflict 2.
    assert "  command   --tp-size 8 --dp-size 8 --enable-dp-attention --attention-backend triton" in text
    assert "(fixes this conflict only)" not in text


def test_command_line_keeps_the_users_order_and_applies_the_fix(plan):
    user = {"tp_size": 8, "attention_backend": "fa3", "enable_dp_attention": False}
    assert command_line(plan.catalog, user, [Fix(changes=(("attention_backend", "triton"),))]) == \
        "--tp-size 8 --attention-backend triton"
    assert command_line(plan.catalog, user, [Fix(changes=(("page_size", 16),), drops=("tp_size",))]) == \
        "--attention-backend fa3 --page-size 16"
    assert command_line(plan.catalog, {"tp_size": 8}, [Fix(changes=(), drops=("tp_size",))]) == "(no flags)"
