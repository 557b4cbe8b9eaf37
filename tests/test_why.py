"""`accord why` explains a value with the conditions that actually held on this launch.

A prefer rule may offer one value from several candidates (fa3 for GPT-OSS on Hopper, fa3 for any
MHA model on Hopper); `why` must show the one whose condition held, not the first that names the
value. The property: every condition `why --json` prints, evaluated by the rule language itself on
only the facts and flag values that same output prints, is true.
"""

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from accord.resolver import api
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.commands import why
from accord.resolver.explaining.conflict_report import flag_argv
from accord.resolver.facts.machine import list_presets
from accord.resolver.language.catalog import SYSTEMS
from accord.resolver.language.expr import constant, parse
from accord.resolver.language.expr_runtime import UnknownFact
from tests.launch_samples import sampled_flags


class PrintedLaunch:
    """The rule language's environment over what one `why` answer printed, and nothing else: a
    condition that reads a flag or fact the answer did not show fails the test instead of being
    answered from somewhere the reader cannot see."""

    def __init__(self, catalog, typed: dict, facts: dict, unknown_facts: list, values: dict):
        self.catalog, self.typed, self.facts, self.unknown_facts, self.values = \
            catalog, typed, facts, set(unknown_facts), values

    def fact(self, key):
        if key in self.facts:
            return self.facts[key]
        assert key in self.unknown_facts, f"the condition reads fact {key}, which `why` did not print"
        raise UnknownFact(key)

    def flag(self, name):
        assert name in self.values, f"the condition reads flag {name}, which `why` did not print"
        return self.values[name]

    def is_set(self, name):
        return name in self.typed

    def user_value(self, name):
        return self.typed.get(name)

    def default(self, name):
        return self.catalog[name].default


def _language(plan):
    """What a printed condition may name: the rule set's derived values and named sets, and the
    catalog's choice metadata (as the rule loader compiles them)."""
    names = {s.id: constant(s.id, s.values) for s in plan.ruleset.sets}
    names |= {d.id: d.expr for d in plan.ruleset.derived}
    return names, plan.catalog.choice_metadata()


def _printed_values(node) -> dict:
    """Every flag value shown in a chain: the node's own and those of the flags it reads."""
    values = {node["flag"]: node["value"]}
    for child in node.get("reads", ()):
        values |= _printed_values(child)
    return values


def _printed_conditions(node):
    """(condition, values shown beside it, facts, unknown facts) for the node and every node below it."""
    if "rule" in node:
        values = _printed_values(node)
        conditions = [node["rule"]["when"], node["rule"]["chosen_when"]]
        conditions += [d["when"] for d in node["derived"]]
        for condition in filter(None, conditions):
            yield condition, values, node["facts"], node["unknown_facts"]
    for child in node.get("reads", ()):
        yield from _printed_conditions(child)


def _computed_flags(plan) -> list[str]:
    return sorted(set(plan.prefer_rules) | set(plan.default_rules))


def _typable_flags(plan) -> dict[str, list]:
    """Flags a rule reads, with a finite domain or a few sample sizes."""
    return sampled_flags(plan, {n for rule in plan.ruleset for n in rule.reads_flags})


def launches(system):
    plan = api.plan_for(system)
    flags = _typable_flags(plan)
    picked = st.lists(st.sampled_from(sorted(flags)), max_size=3, unique=True)
    return st.tuples(
        st.sampled_from(list_presets()),
        picked.flatmap(lambda chosen: st.fixed_dictionaries({n: st.sampled_from(flags[n]) for n in chosen})),
        # every decision (the flags prefer rules choose, where branches offering one value are
        # likely) and a few flags default rules compute
        st.lists(st.sampled_from(_computed_flags(plan)), max_size=3, unique=True).map(
            lambda computed: sorted(set(plan.prefer_rules) | set(computed))),
    )


def _check_why(system, preset, user, targets, capsys):
    plan = api.plan_for(system)
    flags = [word for name, value in user.items() for word in flag_argv(plan.catalog, name, value)]
    typed = parse_flags(flags, system=system)[1].user
    argv = ["--system", system, "--facts", preset, *flags]
    if why.main([*targets, *argv, "--json"]) != 0:
        capsys.readouterr()
        return  # no legal configuration: `why` explains no value
    answer = json.loads(capsys.readouterr().out)
    names, meta = _language(plan)
    for chain in answer["flags"]:
        for condition, values, facts, unknown in _printed_conditions(chain):
            env = PrintedLaunch(plan.catalog, typed, facts, unknown, values)
            assert parse(condition, names, meta)(env), (argv, chain["flag"], condition)


def test_why_names_the_prefer_branch_whose_condition_held(capsys):
    """The reported bug: Llama on an H100 gets fa3 from the MHA-on-Hopper branch, not from the
    GPT-OSS branch that comes first and also offers fa3."""
    assert why.main(["attention_backend", "--facts", "h100", "--tp", "8"]) == 0
    out = capsys.readouterr().out
    assert "reads fact model.architecture = LlamaForCausalLM" in out
    chose = next(line for line in out.splitlines() if line.strip().startswith("chose fa3 when"))
    assert "GptOssForCausalLM" not in chose
    _check_why("llm", "h100", {"tp_size": 8}, ["attention_backend"], capsys)


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_condition_why_prints_holds_on_the_values_it_prints(system, capsys):
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(launches(system))
    @example(("h100", {"tp_size": 8}, ["attention_backend"]))
    def run(launch):
        preset, user, targets = launch
        _check_why(system, preset, user, targets, capsys)

    run()
