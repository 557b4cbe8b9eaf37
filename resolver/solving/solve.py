"""Solving: from user values and facts to every flag's value, or to "unsatisfiable".

The model (see rules/README.md for the rule kinds): a flag the user set is a constant, never
changed; an unset flag with `prefer` rules is a *decision*, a solver variable whose domain is its
candidates in preference order; an unset flag with `default` rules is *derived*, a function of
other flags and facts evaluated on demand; any other unset flag keeps its catalog default.

Facts and user values are substituted as constants, so python-constraint only ever sees the few
decisions a hard rule depends on, split into independent groups. Each decision greedily takes its
most preferred candidate that leaves the rest satisfiable: the answer is deterministic and the
preference order means something. `Plan` (here) indexes the rules and answers the solver's
questions; the algorithm is resolver/solving/core.py, an assignment's values resolver/solving/env.py.
"""


from __future__ import annotations

from typing import Any, Mapping

from accord.resolver.language.catalog import Catalog
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.ruletypes import Rule, RuleSet
from accord.resolver.solving import core
from accord.resolver.solving.cache import SolverCache
from accord.resolver.solving.constants import Constants, applies, constant
from accord.resolver.solving.core import Decided, Structure
from accord.resolver.solving.depgraph import DependencyGraph
from accord.resolver.solving.env import Assignment, Env, Outcome, RelaxedValues, Shared, check, holds, set_flags_key

# The solver's public names (Env, RelaxedValues, check and holds live in resolver/solving/env.py).
__all__ = ["Assignment", "Env", "Outcome", "Plan", "RelaxedValues", "Shared", "check", "holds"]


class Plan:
    """A catalog and rule set compiled for solving: rules indexed by the flags they govern."""

    def __init__(self, catalog: Catalog, ruleset: RuleSet):
        self.catalog = catalog
        self.ruleset = ruleset
        self.prefer_rules: dict[str, list[Rule]] = {}
        self.default_rules: dict[str, list[Rule]] = {}
        self.hard_rules: list[Rule] = []
        self.warn_rules: list[Rule] = []
        for rule in ruleset:
            if rule.kind == "prefer":
                self.prefer_rules.setdefault(rule.flag, []).append(rule)
            elif rule.kind == "default":
                self.default_rules.setdefault(rule.flag, []).append(rule)
            elif rule.is_hard:
                self.hard_rules.append(rule)
            else:
                self.warn_rules.append(rule)
        # Settings only: a meta option (the seed's own --config) belongs to the command line.
        self.names = [name for name, flag in catalog.flags.items() if not flag.meta]
        # Flags no prefer or default rule computes (most of them): unset, they hold the catalog default.
        self.plain = {name: flag.default for name, flag in catalog.flags.items()
                      if name not in self.prefer_rules and name not in self.default_rules}
        self.order = {name: i for i, name in enumerate(catalog.flags)}
        # What `solve` starts every answer from, in catalog order: each setting at its catalog
        # default with no origin (one C-level copy instead of a Python step per setting).
        self._values_template = {name: catalog.flags[name].default for name in self.names}
        self._origin_template = dict.fromkeys(self.names)
        # The settings a rule computes (decisions and defaulted flags), in catalog order.
        self.computed = [name for name in self.names if name not in self.plain]
        self.cache = SolverCache()           # every answer kept between questions
        self.graph = DependencyGraph(self)   # who reads whom, built once with the plan

    # -- decisions ---------------------------------------------------------------------------

    def domain(self, flag: str) -> list[Any]:
        """Every value a decision could take, most preferred first (static: before any solving)."""
        values = [cand.value for rule in self.prefer_rules[flag] for cand in rule.values]
        values.append(self.catalog[flag].default)
        return [value for i, value in enumerate(values) if value not in values[:i]]

    def candidates(self, flag: str, env: Env) -> list[tuple[Any, str | None]]:
        """Candidates of a decision in `env`: the first open prefer rule's open values (a condition
        needing an unknown fact does not hold), else the catalog default."""
        for rule in self.prefer_rules[flag]:
            if _open(rule, env):
                found = [(cand.value, rule.id) for cand in rule.values if _open(cand, env)]
                if found:
                    return found
        return [(self.catalog[flag].default, None)]

    def eligible(self, flag: str, value: Any, env: Env) -> bool:
        """Whether `value` is among `candidates(flag, env)`, evaluating as few candidates as that
        takes: its own first, then the others until one is eligible (a pinned launch asks this of
        every decision its pins reach)."""
        for rule in (rule for rule in self.prefer_rules[flag] if _open(rule, env)):
            if any(_open(cand, env) for cand in rule.values if cand.value == value):
                return True
            if any(_open(cand, env) for cand in rule.values if cand.value != value):
                return False
        return self.catalog[flag].default == value

    # -- solving -----------------------------------------------------------------------------

    def solve(self, user: Mapping[str, Any], facts: Mapping[str, Any],
              hard_rules: list[Rule] | None = None) -> Outcome:
        """Resolve every flag. `hard_rules` narrows the constraints (used by explanations)."""
        rules = self.hard_rules if hard_rules is None else hard_rules
        shared = self.shared(user, facts)
        decided, ok, unknown, constrained = self._decide(user, facts, rules, shared)
        env = Env(self, user, facts, decided, shared)
        # Every setting starts at its catalog default with no origin; only computed ones need a step.
        values: dict[str, Any] = self._values_template.copy()
        origin: dict[str, str | None] = self._origin_template.copy()
        for name in user:
            if name in values:
                values[name] = user[name]
        for name in self.computed:
            if name in user:
                continue
            if name in decided:
                values[name] = decided[name]
                origin[name] = next((rid for v, rid in self.candidates(name, env) if v == decided[name]), None)
            elif name in self.prefer_rules:
                values[name], origin[name] = self.candidates(name, env)[0]
            else:
                values[name], origin[name] = env.derived(name)
        # Rules reading no decision were checked up front. After a successful search each other rule
        # held when its last decision was taken, on these values: only those that may read an
        # unknown fact (reported, not enforced) need evaluating again.
        final = Env(self, user, facts, values)
        violated = []
        if ok:
            known = facts.keys()
            constrained = [rule for rule in constrained if not rule.reads_facts <= known]
        for rule in constrained:
            try:
                if not check(rule, final):
                    violated.append(rule)
            except UnknownFact as missing:
                unknown.append((rule, missing.key))
        return Outcome(values, origin, violated, unknown, ok and not violated)

    def satisfiable(self, user: Mapping[str, Any], facts: Mapping[str, Any],
                    hard_rules: list[Rule] | None = None) -> bool:
        return self._decide(user, facts, hard_rules, self.shared(user, facts)).satisfiable

    def decisions(self, user: Mapping[str, Any], facts: Mapping[str, Any],
                  hard_rules: list[Rule] | None = None) -> Assignment | None:
        """The decisions `solve` makes (None: unsatisfiable), without resolving every other flag:
        explanations read the few values they need through an `Env` (resolver/solving/launch.py)."""
        found = self._decide(user, facts, hard_rules, self.shared(user, facts))
        return found.decisions if found.satisfiable else None

    def shared(self, user: Mapping[str, Any], facts: Mapping[str, Any]) -> Shared:
        """The decision-free values of these user values and facts (kept for the last few pairs:
        an explanation solves the same launch under many rule subsets, the UI asks it again)."""
        make = lambda: Shared(self.graph.given(user), self._constants(user).derived)  # noqa: E731
        key = (repr(sorted(user.items())), set_flags_key(user), repr(facts))  # (facts in their order: cheaper)
        return self.cache.lookup("shared", key, make, 32)

    def warnings_to_check(self, user: Mapping[str, Any]) -> list[Rule]:
        """The warn rules that may apply to a launch with these flags set, in rule order (the others
        read only catalog defaults and `is_set`, and do not apply)."""
        def make() -> list[Rule]:
            probe = self._constants(user)
            return [rule for rule in self.warn_rules if constant(applies, rule, probe) is not False]
        return self.cache.lookup("warnings_to_check", set_flags_key(user), make, 512)

    def _constants(self, user: Mapping[str, Any]) -> Constants:
        """What is constant in every launch with these flags set (see `Constants`)."""
        return self.cache.lookup("constants", set_flags_key(user), lambda: Constants(self, user), 512)

    def structure(self, user: Mapping[str, Any], facts: Mapping[str, Any],
                  rules: list[Rule] | None = None) -> Structure:
        """How `solve` decides this launch (see `core.Structure`; a `Launch` decides it group by
        group): built from which flags are set, which rules count and which facts exist."""
        rules = self.hard_rules if rules is None else rules
        known = frozenset(facts)
        key = (set_flags_key(user), None if rules is self.hard_rules else tuple(map(id, rules)), known)

        def build() -> Structure:
            probe = Constants(self, user, known, seed=self._constants(user))
            return core.build_structure(self, rules, self.graph.given(user), probe)
        return self.cache.lookup("structure", key, build, 512)

    def _decide(self, user: Mapping[str, Any], facts: Mapping[str, Any], rules: list[Rule] | None,
                shared: Shared) -> Decided:
        return core.decide(self, user, facts, self.structure(user, facts, rules), shared)


def _open(item, env: Env) -> bool:
    """Whether a prefer rule, or one of its candidates, applies in `env` (an unknown fact: it does not)."""
    try:
        return item.when is None or bool(item.when._fn(env))
    except UnknownFact:
        return False

