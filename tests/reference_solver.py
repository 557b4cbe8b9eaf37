"""The oracle of the solver's property tests: what a `Launch` and its children answer, written plainly.

Accord asks every question of a `Launch` (resolver/solving/launch.py): about the command itself
(its decisions, warnings, satisfiability under a subset of the hard rules), about its changed
children (the command with a few flags changed) and about its pinned children (is the command
still legal with these flags pinned, and which rules exclude it). A
child is a command too, so every answer is a plain question to the core about another command,
stated here by a full solve of that command. A `Launch` answers by incremental algorithms (they start from the base command's solve and recompute only what the
change reaches), with the cache layer on or off; tests/test_solver_queries.py demands the same
answers as these functions (as pubgrub keeps its SAT reference solver in its tests).

Everything here computes from its arguments, through `Plan`, and keeps nothing.
"""

from __future__ import annotations

from typing import Any, Mapping

from accord.resolver.solving.quickxplain import quickxplain
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving.depgraph import Reach
from accord.resolver.solving.solve import Env, Plan, check, holds

# -- a command and its changed children --------------------------------------------------------


def decision_reading(plan: Plan, user: Mapping[str, Any]) -> list[Rule]:
    """The hard rules that read a solver decision in launches with these flags set, in rule order."""
    reach = Reach(plan.graph, frozenset(user))  # a fresh walk of the graph, none of the solver's
    return [rule for rule in plan.hard_rules if reach.depends(rule.constrained_flags)]


def verdict(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any], rule: Rule) -> Any:
    """A decision-free hard rule's verdict on the command (True, False, or the key of the unknown
    fact that keeps it from being checked); None for a rule that reads a decision."""
    if Reach(plan.graph, frozenset(user)).depends(rule.constrained_flags):
        return None
    try:
        return check(rule, Env(plan, user, facts, {}))
    except UnknownFact as missing:
        return missing.key


def base_decisions(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any]) -> dict[str, Any] | None:
    """The command's decisions under its decision-reading hard rules alone (None: those rules
    have no solution together)."""
    return plan.decisions(user, facts, decision_reading(plan, user))


def warnings(plan: Plan, values: Mapping[str, Any], facts: Mapping[str, Any]) -> set[str]:
    """Ids of the warn rules firing for the command `values`, read from its full solve as `accord
    resolve` reads them (none when the solve fails; a rule needing an unknown fact stays silent)."""
    outcome = plan.solve(values, facts)
    if not outcome.satisfiable:
        return set()
    env = Env(plan, values, facts, outcome.values)
    fired = set()
    for rule in plan.warn_rules:
        try:
            if rule.when is None or rule.when(env):
                fired.add(rule.id)
        except UnknownFact:
            continue
    return fired


# -- pinned children (`Launch.pinned`) ---------------------------------------------------------


def excluding_alone(plan: Plan, pinned: Mapping[str, Any], facts: Mapping[str, Any]) -> list[Rule]:
    """The hard rules that, each by itself, no launch with these values satisfies, in rule order.

    A rule holding with every decision at its most preferred eligible value (an `Env` with none
    taken) is satisfied by that launch, so only the others are solved."""
    preferred = Env(plan, pinned, facts, {})
    return [rule for rule in plan.hard_rules
            if not holds(rule, preferred) and not plan.satisfiable(pinned, facts, [rule])]


def minimal_rules(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                  rules: list[Rule] | None = None) -> list[Rule]:
    """`Launch.minimal_rules` by full solves: QuickXplain over `not plan.satisfiable`."""
    pool = list(plan.hard_rules if rules is None else rules)
    core = {id(r) for r in quickxplain(pool, lambda subset: not plan.satisfiable(user, facts, subset))}
    return [r for r in pool if id(r) in core]


def exclusions(plan: Plan, pinned: Mapping[str, Any], facts: Mapping[str, Any], resolved: bool,
               every: bool) -> list[tuple[Rule, ...]] | None:
    """A pinned `Launch`'s answer for the command `pinned` (the user's flags with the pins on top): None
    when it is satisfiable; else the groups of rules that exclude it.

    With `every`: each rule excluding it by itself, as a group of one, in rule order; when none
    does, the one minimal set of rules `minimal_rules` finds on it. Without:
    the first of those single rules, one reading no decision once pinned first (no choice of the
    solver changes it), or no group (`[]`: no single rule to blame).

    `resolved` is false when the user's flags conflict by themselves (the parent launch has no
    resolved configuration): then no single rule is looked for (`every`: the minimal set; else `[]`)."""
    if plan.satisfiable(pinned, facts):
        return None
    alone = excluding_alone(plan, pinned, facts) if resolved else []
    if every:
        return [(rule,) for rule in alone] or [tuple(minimal_rules(plan, pinned, facts))]
    fixed = [rule for rule in alone if not plan.graph.given(pinned).rule_depends(rule)]
    return [((fixed or alone)[0],)] if alone else []
