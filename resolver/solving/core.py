"""The solving algorithm, as a reference: how decisions are ordered, grouped and taken.

Read `Plan.solve` (resolver/solving/solve.py) first; it calls, in order:

1. `build_structure`: from which flags are set and which facts exist alone (no value enters it),
   the rules that can fail, those reading no decision (checked once), and per independent group
   of decisions its `Step`s: each decision, the decisions after it, the rules still open after it
   and the rules it closes (those whose last decision it is).
2. `decide`: the rules reading no decision are checked; then each decision, group by group and in
   order, takes its most preferred candidate that keeps the rules it closes holding and leaves the
   later decisions a way to satisfy the rules still open (`feasible`).

Nothing here is kept between calls: resolver/solving/cache.py keeps the answers, through `Plan`.
"""

from __future__ import annotations

import dataclasses
import functools
import graphlib
from typing import Any, Mapping, NamedTuple

from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving.constants import Constants, constant
from accord.resolver.solving.depgraph import Reach
from accord.resolver.solving.env import Assignment, Env, PlanView, Shared, check, holds, verdict


class Step(NamedTuple):
    """One decision of a group, in the order the group decides them."""

    decision: str
    later: list[str]                             # the group's decisions after this one
    open_rules: list[tuple[Rule, frozenset]]     # rules still open after it, with their decisions
    closes: tuple[Rule, ...] | list[Rule]        # rules whose last decision this is


@dataclasses.dataclass
class Structure:
    """How to decide, given which flags are set and which rules count (no values involved)."""

    fixed: list[Rule]              # rules reading no decision, checked once per launch
    with_decisions: list[Rule]     # rules reading decisions
    groups: list[list[Step]]       # independent groups of decisions, each its steps in order

    @functools.cached_property
    def kinds(self) -> tuple[frozenset[int], frozenset[int]]:
        """Ids of (`fixed`, `with_decisions`): what a `Launch` asks of every rule it is shown."""
        return frozenset(map(id, self.fixed)), frozenset(map(id, self.with_decisions))

    @functools.cached_property
    def group_keys(self) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
        """Per group, its decisions and the ids of its rules: the same key, the same group."""
        return [(tuple(step.decision for step in steps), tuple(id(rule) for step in steps for rule in step.closes))
                for steps in self.groups]


class Decided(NamedTuple):
    """What `decide` found: the decisions, whether every rule held, the rules that could not be
    checked for lack of a fact (with its key), and the rules that read decisions."""

    decisions: Assignment
    satisfiable: bool
    unknown: list[tuple[Rule, str]]
    with_decisions: list[Rule]


def build_structure(plan: PlanView, rules: list[Rule], reach: Reach, probe: Constants) -> Structure:
    """The `Structure` of launches with the flags `reach` is given set; `probe`: what is constant
    for them. A rule that holds whatever their values is left out: say, one reading only flags at
    their catalog default, or one about Accord's own engine (`known(engine)`) when `probe` knows the
    facts have no `engine`. It never fails nor reads an unknown fact, so no decision or outcome
    depends on checking it."""
    rule_vars = [(rule, reach.rule_depends(rule)) for rule in rules if constant(check, rule, probe) is not True]
    fixed = [rule for rule, deps in rule_vars if not deps]
    constrained = [(rule, deps) for rule, deps in rule_vars if deps]
    variables = sorted(set().union(*(d for _, d in constrained)), key=plan.order.__getitem__)
    # Eligibility of a decision (its prefer `when`s) may read other decisions: include those.
    extra = {v: reach.eligibility(v) for v in variables}
    pending = list(variables)
    while pending:
        var = pending.pop()
        for dep in extra.get(var) or ():
            if dep not in extra:
                extra[dep] = reach.eligibility(dep)
                variables.append(dep)
                pending.append(dep)
    groups = []
    for component in components(variables, constrained, extra):
        order = decision_order(plan, component, extra)
        position = {var: i for i, var in enumerate(order)}
        # A rule is checked directly at the step that decides its last decision ("closes" it);
        # before that it constrains the look-ahead of the still undecided ones.
        closes_at: dict[int, list[Rule]] = {}
        open_until: list[tuple[Rule, frozenset, int]] = []
        for rule, deps in constrained:
            if deps & component:
                last = max(position[d] for d in deps)
                closes_at.setdefault(last, []).append(rule)
                open_until.append((rule, deps, last))
        groups.append([Step(var, order[i + 1:], [(rule, deps) for rule, deps, last in open_until if last > i],
                            closes_at.get(i, ())) for i, var in enumerate(order)])
    return Structure(fixed, [rule for rule, _ in constrained], groups)


def decide(plan: PlanView, user: Mapping[str, Any], facts: Mapping[str, Any], structure: Structure,
           shared: Shared) -> Decided:
    """Choose every decision that some hard rule depends on (see the module docstring)."""
    base = Env(plan, user, facts, {}, shared)
    unknown: list[tuple[Rule, str]] = []
    for rule in structure.fixed:
        found = verdict(rule, base, shared)
        if found is False:
            return Decided({}, False, unknown, [])
        if found is not True:
            unknown.append((rule, found))
    decided: Assignment = {}
    for steps in structure.groups:
        found, ok = decide_group(plan, user, facts, steps, shared)
        decided.update(found)
        if not ok:
            return Decided(decided, False, unknown, structure.with_decisions)
    return Decided(decided, True, unknown, structure.with_decisions)


def decide_group(plan: PlanView, user: Mapping[str, Any], facts: Mapping[str, Any], steps: list[Step],
                 shared: Shared) -> tuple[Assignment, bool]:
    """One independent group's decisions (see the module docstring) and whether its rules hold (if
    not, the decisions taken before the one that found no candidate). Groups read none of each
    other's decisions, so each is decided alone."""
    decided: Assignment = {}
    witness: Assignment | None = None
    for var, later, open_rules, closes in steps:
        for value, _rid in plan.candidates(var, Env(plan, user, facts, decided, shared)):
            decided[var] = value
            if witness is not None and same(witness[var], value):
                # The completion the last step verified starts with this value: every rule
                # still open (those it closes and those ahead) held on it already.
                break
            env = Env(plan, user, facts, decided, shared)
            if not all(holds(rule, env) for rule in closes):
                continue
            ok, witness = feasible(plan, later, open_rules, user, facts, decided, shared)
            if ok:
                break
        else:
            decided.pop(var, None)
            return decided, False
    return decided, True


def feasible(plan: PlanView, undecided: list[str], rules: list[tuple[Rule, frozenset]], user: Mapping[str, Any],
             facts: Mapping[str, Any], decided: Assignment, shared: Shared) -> tuple[bool, Assignment | None]:
    """Can the undecided decisions still be chosen so that every rule (all still open) holds?

    Also returns the witness when it is the most preferred completion (None otherwise): the next
    decision takes its first value from it, and is then known to be feasible without a check.
    """
    if not rules:
        return True, None  # every decision has at least one eligible candidate
    # Fast path: the most preferred completion is usually legal, and is then its own witness.
    trial = dict(decided)
    for var in undecided:
        trial[var] = plan.candidates(var, Env(plan, user, facts, trial, shared))[0][0]
    witness = Env(plan, user, facts, trial, shared)
    if all(holds(rule, witness) for rule, _ in rules):
        return True, trial
    from constraint import Problem  # only a search needs it; most solves never get here

    pending = set(undecided)
    problem = Problem()
    for var in undecided:
        problem.addVariable(var, plan.domain(var))
    fixed = dict(decided)

    def make(rule: Rule, names: list[str]):
        def constraint(*vals):
            return holds(rule, Env(plan, user, facts, {**fixed, **dict(zip(names, vals))}, shared))
        return constraint

    for rule, deps in rules:
        names = sorted(deps & pending, key=plan.order.__getitem__)
        problem.addConstraint(make(rule, names), names)
    for var in undecided:
        reads = sorted(shared.reach.eligibility(var) & pending, key=plan.order.__getitem__)
        names = [var] + reads

        def eligible(*vals, _var=var, _names=names):
            env = Env(plan, user, facts, {**fixed, **dict(zip(_names, vals))}, shared)
            return any(vals[0] == value for value, _ in plan.candidates(_var, env))
        problem.addConstraint(eligible, names)
    return problem.getSolution() is not None, None


def decision_order(plan: PlanView, component: set[str], extra: dict[str, frozenset]) -> list[str]:
    """Decisions whose eligibility others read come first; catalog order breaks ties."""
    sorter = graphlib.TopologicalSorter({v: set(extra.get(v, ())) & component for v in component})
    sorter.prepare()
    order: list[str] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready(), key=plan.order.__getitem__)
        order.extend(ready)
        sorter.done(*ready)
    return order


def components(variables: list[str], constrained: list[tuple[Rule, frozenset]],
               extra: dict[str, frozenset]) -> list[set[str]]:
    """Split decisions into independent groups (no rule or eligibility links them)."""
    parent = {v: v for v in variables}

    def find(v):
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    def union(group):
        group = [g for g in group if g in parent]
        for other in group[1:]:
            parent[find(other)] = find(group[0])

    for _, deps in constrained:
        union(sorted(deps))
    for var, deps in extra.items():
        union([var, *sorted(deps)])
    groups: dict[str, set[str]] = {}
    for v in variables:
        groups.setdefault(find(v), set()).add(v)
    return [groups[k] for k in sorted(groups, key=variables.index)]


def same(a: Any, b: Any) -> bool:
    """The same value for the solver (True and 1 are equal in Python, not here)."""
    return type(a) is type(b) and a == b
