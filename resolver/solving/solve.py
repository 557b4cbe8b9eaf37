"""Solving: from user values and facts to every flag's value, or to "unsatisfiable".

The model (see rules/README.md for the rule kinds):
- a flag the user set is a constant, never changed;
- an unset flag with `prefer` rules is a *decision*: a solver variable whose domain is its
  candidates, tried in preference order;
- an unset flag with `default` rules is *derived*: a function of other flags and facts, evaluated
  lazily (and so in dependency order) whenever something reads it;
- any other unset flag keeps its catalog default.

Facts and user values are substituted as constants, so python-constraint only ever sees the few
decision variables a hard rule actually depends on, split into independent components. Decisions
are made greedily in dependency order: each takes its most preferred candidate that still leaves
the rest satisfiable, which makes the answer deterministic and the preference order meaningful.
"""

from __future__ import annotations

import graphlib
from typing import Any, Iterable, Mapping

from accord.resolver.language.catalog import Catalog
from accord.resolver.language.expr import UnknownFact
from accord.resolver.language.ruleset import Rule, RuleSet
from accord.resolver.solving.memo import remember


class _CycleError(Exception):
    """A default that reads itself through other defaults (`accord rules --lint` rejects these)."""


class RelaxedValues(dict):
    """The user's values after `--relax` replaced some: `relaxed` names the flags upstream's value
    now holds. Rules asking `is_set` (did the user set it?) see those as not set by the user, so a
    conflict about a typed value does not fire again on the value its fix wrote."""

    def __init__(self, values: Mapping[str, Any], relaxed: frozenset[str] = frozenset()):
        super().__init__(values)
        self.relaxed = relaxed


def _set_flags_key(user: Mapping[str, Any]) -> tuple[frozenset, frozenset]:
    """Which flags hold user values, and which of them `--relax` wrote: what the memos depend on
    (a relaxed flag is fixed like a typed one, but `is_set` reads it as not typed)."""
    return frozenset(user), frozenset(getattr(user, "relaxed", ()))


def _per_flag_set(store: dict, user: Mapping[str, Any], limit: int, make):
    """`store`'s entry for launches with these flags set, made by `make()` on first use; the store
    is emptied when it reaches `limit` entries (a long UI session keeps memory bounded)."""
    key = _set_flags_key(user)
    found = store.get(key)
    if found is None:
        found = remember(store, key, make(), limit)
    return found


class Shared:
    """What one pair of user values and facts gives whatever the decisions, shared by its Envs.

    A derived flag that reads no decision (through its default rules, given which flags are set)
    has the same value in every assignment, and a hard rule that reads no decision the same verdict,
    so each is computed once per pair instead of once per trial assignment of the search.
    """

    __slots__ = ("derived", "verdicts", "depends")

    def __init__(self, depends: dict[str, frozenset], constants: Mapping[str, tuple[Any, str | None]] = {}):
        # Starts with the derived values that are constant for these set flags (see `_Constants`).
        self.derived: dict[str, tuple[Any, str | None]] = dict(constants)
        self.verdicts: dict[int, Any] = {}    # id(rule) -> True, False or the missing fact's key
        self.depends = depends                # the plan's `depends` memo for these set flags


class Env:
    """The values one (partial) assignment gives every flag; derived flags are computed on demand."""

    __slots__ = ("plan", "user", "facts", "decided", "_derived", "_busy", "_shared", "_plain", "named_values")

    def __init__(self, plan: "Plan", user: Mapping[str, Any], facts: Mapping[str, Any],
                 decided: Mapping[str, Any], shared: Shared | None = None):
        self.plan = plan
        self.user = user
        self.facts = facts
        self.decided = decided
        self._derived: dict[str, tuple[Any, str | None]] = {}
        self._busy: set[str] = set()
        self._shared = shared
        self._plain = plan.plain
        # Named derived values read in this environment (kept by their expressions, see
        # resolver/language/ruleset.py `_combine`), like `_derived` for derived flags.
        self.named_values: dict[str, Any] = {}

    def fact(self, key: str) -> Any:
        try:
            return self.facts[key]
        except KeyError:
            raise UnknownFact(key) from None

    def is_set(self, name: str) -> bool:
        return name in self.user and name not in getattr(self.user, "relaxed", ())

    def user_value(self, name: str) -> Any:
        return self.user.get(name)

    def default(self, name: str) -> Any:
        """The catalog default of a flag (what `user_changed` compares the user's value with)."""
        return self.plan.catalog[name].default

    def flag(self, name: str) -> Any:
        if name in self.user:
            return self.user[name]
        if name in self.decided:
            return self.decided[name]
        if name in self._plain:  # most reads: a flag no rule computes keeps its catalog default
            return self._plain[name]
        # A derived value computed already (the common case: answered without another call).
        found = self._derived.get(name)
        if found is None and self._shared is not None:
            found = self._shared.derived.get(name)
        if found is not None:
            return found[0]
        if name in self.plan.prefer_rules:
            # An undecided decision read before it is decided: its most preferred candidate.
            return self.plan.candidates(name, self)[0][0]
        return self.derived(name)[0]

    def derived(self, name: str) -> tuple[Any, str | None]:
        """Value of an unset non-decision flag and the id of the default rule that produced it."""
        rules = self.plan.default_rules.get(name)
        if rules is None:  # most flags: no default rule, so the catalog default, read by nobody's choice
            return (self.plan.catalog[name].default, None)
        found = self._derived.get(name)
        if found is not None:
            return found
        shared = self._shared
        if shared is not None:
            found = shared.derived.get(name)
            if found is not None:
                return found
        if name in self._busy:
            raise _CycleError(name)
        self._busy.add(name)
        try:
            result: tuple[Any, str | None] = (self.plan.catalog[name].default, None)
            for rule in rules:
                try:
                    if rule.when is None or rule.when._fn(self):
                        result = (rule.value._fn(self), rule.id)
                        break
                except UnknownFact:
                    continue
        finally:
            self._busy.discard(name)
        if shared is not None:
            deps = shared.depends.get(name)
            if deps is None:
                deps = self.plan.depends((name,), self.user, shared.depends)
            if not deps:
                shared.derived[name] = result
                return result
        self._derived[name] = result
        return result


class _Varies(Exception):
    """An expression read something only a launch gives: a fact, a typed or a computed value."""


class _Constants:
    """What an expression can read knowing only which flags are set: the catalog default of a flag
    that no rule computes and the user did not set, a default-ruled flag whose rules read only such
    constants, and `is_set` of any flag. Anything else raises `_Varies`.

    An expression that evaluates without raising gives the same answer in every launch with these
    flags set (evaluation is deterministic and reads nothing else), so a hard rule that holds here
    holds in all of them, a warning that does not apply here applies in none, and a derived flag
    found here (`derived`: its value and rule) has that value in all of them.
    """

    __slots__ = ("plain", "set_flags", "relaxed", "catalog", "default_rules", "derived", "_varies", "known_facts")

    def __init__(self, plan: "Plan", user: Mapping[str, Any], known_facts: frozenset[str] | None = None,
                 seed: "_Constants | None" = None):
        self.plain = plan.plain
        self.catalog = plan.catalog
        self.default_rules = plan.default_rules
        self.set_flags, self.relaxed = _set_flags_key(user)
        # With `known_facts` (which facts the launch has, not their values), a fact outside them is
        # unknown here as in the launch: `known(engine)` is then false in every such launch.
        self.known_facts = known_facts
        self.derived: dict[str, tuple[Any, str | None]] = {}
        self._varies: set[str] = set()   # flags found to vary, and flags being derived (cycles)
        if seed is not None:
            # What is constant knowing only the set flags stays so knowing the facts too; anything
            # else is derived when a rule reads it.
            self.derived.update(seed.derived)
            return
        for name in plan.default_rules:
            try:
                self.flag(name)
            except Exception:  # noqa: BLE001 (it varies, or a real launch meets the same failure)
                continue

    def flag(self, name: str) -> Any:
        if name in self.set_flags:
            raise _Varies(name)
        if name in self.plain:
            return self.plain[name]
        found = self.derived.get(name)
        if found is None:
            found = self._derive(name)
        return found[0]

    def _derive(self, name: str) -> tuple[Any, str | None]:
        """Like `Env.derived`, except that reading anything but a constant makes the flag vary."""
        rules = self.default_rules.get(name)
        if rules is None or name in self._varies:  # a decision (or not a flag), or a cycle
            raise _Varies(name)
        self._varies.add(name)
        result: tuple[Any, str | None] = (self.catalog[name].default, None)
        for rule in rules:
            try:
                if rule.when is None or rule.when._fn(self):
                    result = (rule.value._fn(self), rule.id)
                    break
            except UnknownFact:  # as in `Env.derived` (only with `known_facts`: absent facts)
                continue
        self._varies.discard(name)
        self.derived[name] = result
        return result

    def fact(self, key: str) -> Any:
        if self.known_facts is not None and key not in self.known_facts:
            raise UnknownFact(key)
        raise _Varies(key)

    def is_set(self, name: str) -> bool:
        return name in self.set_flags and name not in self.relaxed

    def user_value(self, name: str) -> Any:
        if name in self.set_flags:
            raise _Varies(name)
        return None

    def default(self, name: str) -> Any:
        return self.catalog[name].default


def _constant(fn, rule: Rule, probe: _Constants) -> Any:
    """`fn(rule, probe)`, or None when the answer varies between launches (or the evaluation fails:
    a real launch then evaluates it and meets the same failure)."""
    try:
        return fn(rule, probe)
    except Exception:  # noqa: BLE001 (_Varies, or an error the real evaluation reports)
        return None


def _applies(rule: Rule, env) -> bool:
    return rule.when is None or bool(rule.when._fn(env))


class Outcome:
    """What a solve produced: every value with its origin, or the hard rules that failed."""

    __slots__ = ("values", "origin", "violated", "unknown", "satisfiable")

    def __init__(self, values: dict[str, Any], origin: dict[str, str | None], violated: list[Rule],
                 unknown: list[tuple[Rule, str]], satisfiable: bool):
        self.values = values
        self.origin = origin          # flag -> rule id that set it (None: user or catalog)
        self.violated = violated
        self.unknown = unknown        # rules that could not be checked, and the missing fact
        self.satisfiable = satisfiable


def check(rule: Rule, env: Env) -> bool:
    """True when a hard rule holds in `env`. Raises UnknownFact when it cannot be decided."""
    applies = rule.when is None or bool(rule.when._fn(env))
    if rule.kind == "conflict":
        return not applies
    return (not applies) or bool(rule.require._fn(env))


def holds(rule: Rule, env: Env) -> bool:
    """Like `check`, but an unknown fact never blocks: the rule is reported, not enforced."""
    try:
        return check(rule, env)
    except UnknownFact:
        return True


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
        # Settings only: a meta option (the seed's own --config) is part of the command line, not
        # of the configuration.
        self.names = [name for name, flag in catalog.flags.items() if not flag.meta]
        # Flags that no prefer or default rule computes: unless the user set them, their value is
        # the catalog default (most of the ~480 flags a solve reads or reports).
        self.plain = {name: flag.default for name, flag in catalog.flags.items()
                      if name not in self.prefer_rules and name not in self.default_rules}
        self.order = {name: i for i, name in enumerate(catalog.flags)}
        # What `solve` starts every answer from: each setting in catalog order, holding its catalog
        # default (plain flags keep it unless the user set them; the others are always overwritten),
        # with no origin. Copying these is one C call instead of a Python step per setting.
        self._values_template = {name: catalog.flags[name].default for name in self.names}
        self._origin_template = dict.fromkeys(self.names)
        # The settings a rule computes (decisions and defaulted flags), in catalog order.
        self.computed = [name for name in self.names if name not in self.plain]
        self._reads: dict[str, frozenset[str]] = {}
        # What `depends` found, per set of user-set flag names: it reads only which flags are set,
        # never their values, so every solve with the same flags set (the explanation's hundreds of
        # checks, the dry run's pins, the next request of the UI) shares the work.
        self._memos: dict[frozenset[str], tuple[dict[str, frozenset], dict[int, frozenset]]] = {}
        self._structures: dict[tuple, tuple] = {}
        self._pinning: dict[frozenset[str], dict] = {}
        self._shared: dict[tuple[str, str], Shared] = {}
        self._warnings: dict[tuple, list[Rule]] = {}
        self._constant_memo: dict[tuple, _Constants] = {}
        self._last_facts: tuple | None = None  # see `_facts_key`

    # -- decisions ---------------------------------------------------------------------------

    def domain(self, flag: str) -> list[Any]:
        """Every value a decision could take, most preferred first (static: before any solving)."""
        seen: list[Any] = []
        for rule in self.prefer_rules[flag]:
            for cand in rule.values:
                if cand.value not in seen:
                    seen.append(cand.value)
        default = self.catalog[flag].default
        if default not in seen:
            seen.append(default)
        return seen

    def candidates(self, flag: str, env: Env) -> list[tuple[Any, str | None]]:
        """Candidates of a decision in `env`: the first matching prefer rule's eligible values."""
        for rule in self.prefer_rules[flag]:
            try:
                if rule.when is not None and not rule.when._fn(env):
                    continue
            except UnknownFact:
                continue
            out = []
            for cand in rule.values:
                try:
                    if cand.when is None or cand.when._fn(env):
                        out.append((cand.value, rule.id))
                except UnknownFact:
                    continue
            if out:
                return out
        return [(self.catalog[flag].default, None)]

    def depends(self, names: Iterable[str], user: Mapping[str, Any], memo: dict[str, frozenset]) -> frozenset:
        """The decision variables that the given flags' values depend on."""
        out: set[str] = set()
        for name in names:
            if name in user or name not in self.catalog:
                continue
            if name not in memo:
                memo[name] = frozenset()  # breaks cycles; lint rejects them anyway
                if name in self.prefer_rules:
                    deps = {name} | self.depends(self._prefer_reads(name), user, memo)
                else:
                    reads = set().union(*(r.reads_flags for r in self.default_rules.get(name, ())))
                    deps = set(self.depends(reads, user, memo))
                memo[name] = frozenset(deps)
            out |= memo[name]
        return frozenset(out)

    def _prefer_reads(self, flag: str) -> frozenset[str]:
        reads = self._reads.get(flag)
        if reads is None:
            reads = self._reads[flag] = frozenset().union(*(r.reads_flags for r in self.prefer_rules[flag]))
        return reads

    def _memo(self, user: Mapping[str, Any]) -> tuple[dict[str, frozenset], dict[int, frozenset]]:
        """(flag -> decisions it depends on, id(rule) -> decisions it constrains) for these set flags."""
        return _per_flag_set(self._memos, user, 512, lambda: ({}, {}))

    def pinning_memo(self, user: Mapping[str, Any]) -> dict:
        """A dict `Pinning` fills with its analysis of launches with these flags set."""
        return _per_flag_set(self._pinning, user, 64, dict)

    def depends_memo(self, user: Mapping[str, Any]) -> dict[str, frozenset]:
        """The shared memo for `depends` with these flags set."""
        return self._memo(user)[0]

    def rule_depends(self, rule: Rule, user: Mapping[str, Any]) -> frozenset:
        """The decisions a hard rule's verdict depends on, given which flags the user set."""
        memo, by_rule = self._memo(user)
        deps = by_rule.get(id(rule))
        if deps is None:
            deps = by_rule[id(rule)] = self.depends(rule.constrained_flags, user, memo)
        return deps

    # -- solving -----------------------------------------------------------------------------

    def solve(self, user: Mapping[str, Any], facts: Mapping[str, Any],
              hard_rules: list[Rule] | None = None) -> Outcome:
        """Resolve every flag. `hard_rules` narrows the constraints (used by explanations)."""
        rules = self.hard_rules if hard_rules is None else hard_rules
        shared = self.shared(user, facts)
        decided, ok, unknown, constrained = self._decide(user, facts, rules, shared)
        env = Env(self, user, facts, decided, shared)
        # Every setting starts at its catalog default with no origin (the user's values then
        # replace theirs, keeping the catalog order); only the computed ones need a step each.
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
        # Rules that read no decision were checked once, up front; re-check the others on the result.
        # After a successful search each of them already held when its last decision was taken, on
        # the same values, so only those that may read an unknown fact (reported, not enforced)
        # need evaluating again.
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
        rules = self.hard_rules if hard_rules is None else hard_rules
        return self._decide(user, facts, rules, self.shared(user, facts))[1]

    def decisions(self, user: Mapping[str, Any], facts: Mapping[str, Any],
                  hard_rules: list[Rule] | None = None) -> dict[str, Any] | None:
        """The decisions `solve` makes (None: unsatisfiable), without resolving every other flag:
        explanations read the few values they need through an `Env` (resolver/solving/nearby.py)."""
        rules = self.hard_rules if hard_rules is None else hard_rules
        decided, ok, _, _ = self._decide(user, facts, rules, self.shared(user, facts))
        return decided if ok else None

    def decision_groups(self, user: Mapping[str, Any]) -> list[tuple[tuple[str, ...], tuple[Rule, ...]]]:
        """The independent groups of decisions for these set flags, each with the hard rules that
        read its decisions (resolver/solving/nearby.py re-decides only the groups a change reaches)."""
        return [(tuple(var for var, *_ in steps), tuple(rule for *_, closing in steps for rule in closing))
                for steps in self._structure(user, self.hard_rules)[2]]

    def shared(self, user: Mapping[str, Any], facts: Mapping[str, Any]) -> Shared:
        """The decision-free values of these user values and facts (kept for the last few pairs:
        an explanation solves the same launch under many rule subsets, the UI asks it again)."""
        key = (repr(sorted(user.items())), _set_flags_key(user), self._facts_key(facts))
        shared = self._shared.get(key)
        if shared is None:
            if len(self._shared) >= 32:
                del self._shared[next(iter(self._shared))]  # the oldest pair
            shared = self._shared[key] = Shared(self._memo(user)[0], self._constants(user).derived)
        return shared

    def holds_anyway(self, user: Mapping[str, Any], facts: Mapping[str, Any]) -> tuple[frozenset[int], frozenset[int]]:
        """Ids of the hard rules that hold in every launch with these flags set and these fact
        names, whatever the values (see `_for_facts`): (the decision-free ones, the decision-reading
        ones). Explanations skip checking them, as `_decide` does."""
        structure = self._structure(user, self.hard_rules)
        anyway_by_facts = structure[4]
        known = frozenset(facts)
        found = anyway_by_facts.get(known)
        if found is None:
            fixed, with_decisions, _ = self._for_facts(user, facts, structure)
            checked = {id(rule) for rule in (*fixed, *with_decisions)}
            reading = {id(rule) for rule in structure[1]}
            anyway = [id(rule) for rule in self.hard_rules if id(rule) not in checked]
            found = (frozenset(rid for rid in anyway if rid not in reading),
                     frozenset(rid for rid in anyway if rid in reading))
            remember(anyway_by_facts, known, found, 64)
        return found

    def _facts_key(self, facts: Mapping[str, Any]) -> str:
        """`repr(sorted(facts.items()))`, the facts' part of a `shared` key, kept for the last facts
        mapping asked about: an explanation asks `shared` about dozens of commands with the same
        facts, and writing them out costs more than the rest of the key. The same mapping changed
        in place since is noticed (its items, list values included, are compared with a copy, and
        so are their types: 1 and 1.0 are equal but write differently), so the key is never stale."""
        shape = _shape(facts)
        last = self._last_facts
        if shape is not None and last is not None and last[0] is facts and last[2] == shape and last[1] == facts:
            return last[3]
        key = repr(sorted(facts.items()))
        if shape is not None:
            self._last_facts = (facts, {k: list(v) if type(v) is list else v for k, v in facts.items()}, shape, key)
        return key

    def warnings_to_check(self, user: Mapping[str, Any]) -> list[Rule]:
        """The warn rules that may apply to a launch with these flags set, in rule order (the others
        read only catalog defaults and `is_set`, and do not apply)."""
        def make() -> list[Rule]:
            probe = self._constants(user)
            return [rule for rule in self.warn_rules if _constant(_applies, rule, probe) is not False]
        return _per_flag_set(self._warnings, user, 512, make)

    def _constants(self, user: Mapping[str, Any]) -> _Constants:
        """What is constant in every launch with these flags set (see `_Constants`)."""
        return _per_flag_set(self._constant_memo, user, 512, lambda: _Constants(self, user))

    def forget_values(self) -> None:
        """Drop the per-launch values kept by `shared` (benchmarks: measure the work, not the memory)."""
        self._shared.clear()

    def _structure(self, user: Mapping[str, Any], rules: list[Rule]) -> tuple:
        """How to decide, given which flags are set and which rules count (no values involved).

        Returns (rules reading no decision, rules reading decisions, per independent group of
        decisions the steps (decision, later decisions, rules still open after it, rules it closes),
        and the memos of `_for_facts` and `holds_anyway`, per set of fact names).
        """
        key = (_set_flags_key(user), None if rules is self.hard_rules else tuple(map(id, rules)))
        found = self._structures.get(key)
        if found is not None:
            return found
        memo, by_rule = self._memo(user)
        rule_vars = []
        for rule in rules:
            deps = by_rule.get(id(rule))
            if deps is None:
                deps = by_rule[id(rule)] = self.depends(rule.constrained_flags, user, memo)
            rule_vars.append((rule, deps))
        # A rule that reads no decision is checked once per launch, unless it holds whatever the
        # launch's values and facts are (it reads only flags at their catalog default, say).
        probe = self._constants(user)
        fixed = [rule for rule, deps in rule_vars if not deps and _constant(check, rule, probe) is not True]
        constrained = [(rule, deps) for rule, deps in rule_vars if deps]
        variables = sorted(set().union(*(d for _, d in constrained)), key=self.order.__getitem__)
        # Eligibility of a decision (its prefer `when`s) may read other decisions: include those.
        extra = {v: self.depends(self._prefer_reads(v), user, memo) - {v} for v in variables}
        pending = list(variables)
        while pending:
            var = pending.pop()
            for dep in extra.get(var) or ():
                if dep not in extra:
                    extra[dep] = self.depends(self._prefer_reads(dep), user, memo) - {dep}
                    variables.append(dep)
                    pending.append(dep)
        groups = []
        for component in _components(variables, constrained, extra):
            order = self._decision_order(component, extra)
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
            groups.append([(var, order[i + 1:], [(rule, deps) for rule, deps, last in open_until if last > i],
                            closes_at.get(i, ())) for i, var in enumerate(order)])
        return remember(self._structures, key, (fixed, [rule for rule, _ in constrained], groups, {}, {}), 512)

    def _decide(self, user: Mapping[str, Any], facts: Mapping[str, Any], rules: list[Rule], shared: Shared):
        """Choose every decision that some hard rule depends on.

        Returns (decisions, satisfiable, rules that could not be checked for lack of a fact, the
        rules that read decisions). Rules that read no decision are checked here, once.
        """
        fixed, with_decisions, groups = self._for_facts(user, facts, self._structure(user, rules))
        base = Env(self, user, facts, {}, shared)
        verdicts = shared.verdicts
        unknown: list[tuple[Rule, str]] = []
        for rule in fixed:
            verdict = verdicts.get(id(rule))
            if verdict is None:
                try:
                    verdict = check(rule, base)
                except UnknownFact as missing:
                    verdict = missing.key
                verdicts[id(rule)] = verdict
            if verdict is False:
                return {}, False, unknown, []
            if verdict is not True:
                unknown.append((rule, verdict))
        memo = shared.depends
        decided: dict[str, Any] = {}
        for steps in groups:
            witness: dict[str, Any] | None = None
            for var, rest, ahead, closing in steps:
                for value, _rid in self.candidates(var, Env(self, user, facts, decided, shared)):
                    decided[var] = value
                    if witness is not None and _same(witness[var], value):
                        # The completion the last step verified starts with this value: every rule
                        # still open (those it closes and those ahead) held on it already.
                        break
                    env = Env(self, user, facts, decided, shared)
                    if not all(holds(rule, env) for rule in closing):
                        continue
                    feasible, witness = self._feasible(rest, ahead, user, facts, decided, memo, shared)
                    if feasible:
                        break
                else:
                    decided.pop(var, None)
                    return decided, False, unknown, with_decisions
        return decided, True, unknown, with_decisions

    def _for_facts(self, user: Mapping[str, Any], facts: Mapping[str, Any], structure: tuple) -> tuple:
        """`structure` (see `_structure`) without the rules that hold whatever the values, knowing
        only which flags are set and which facts exist: say, the rules about Accord's own engine,
        guarded by `known(engine)`, when the facts have no `engine` (a plain resolve). Such a rule
        never fails and never reads an unknown fact, so no check of it can change a decision or
        the outcome. Kept per set of fact names, next to the structure; no fact value enters it."""
        fixed, with_decisions, groups, by_facts, _ = structure
        known = frozenset(facts)
        found = by_facts.get(known)
        if found is None:
            probe = _Constants(self, user, known, seed=self._constants(user))
            holds_anyway = {id(rule) for rule in (*fixed, *with_decisions) if _constant(check, rule, probe) is True}
            found = ([rule for rule in fixed if id(rule) not in holds_anyway],
                     [rule for rule in with_decisions if id(rule) not in holds_anyway],
                     [[(var, rest, [(rule, deps) for rule, deps in ahead if id(rule) not in holds_anyway],
                        [rule for rule in closing if id(rule) not in holds_anyway])
                       for var, rest, ahead, closing in steps] for steps in groups])
            remember(by_facts, known, found, 64)
        return found

    def _decision_order(self, component: set[str], extra: dict[str, frozenset]) -> list[str]:
        """Decisions whose eligibility others read come first; catalog order breaks ties."""
        sorter = graphlib.TopologicalSorter({v: set(extra.get(v, ())) & component for v in component})
        sorter.prepare()
        order: list[str] = []
        while sorter.is_active():
            ready = sorted(sorter.get_ready(), key=self.order.__getitem__)
            order.extend(ready)
            sorter.done(*ready)
        return order

    def _feasible(self, undecided: list[str], rules: list[tuple[Rule, frozenset]], user, facts,
                  decided, memo, shared: Shared | None = None) -> tuple[bool, dict[str, Any] | None]:
        """Can the undecided decisions still be chosen so that every rule (all still open) holds?

        Also returns the witness when it is the most preferred completion (None otherwise): the next
        decision takes its first value from it, and is then known to be feasible without a check.
        """
        if not rules:
            return True, None  # every decision has at least one eligible candidate
        # Fast path: the most preferred completion is usually legal, and is then its own witness.
        trial = dict(decided)
        for var in undecided:
            trial[var] = self.candidates(var, Env(self, user, facts, trial, shared))[0][0]
        witness = Env(self, user, facts, trial, shared)
        if all(holds(rule, witness) for rule, _ in rules):
            return True, trial
        from constraint import Problem  # only a search needs it; most solves never get here

        pending = set(undecided)
        problem = Problem()
        for var in undecided:
            problem.addVariable(var, self.domain(var))
        fixed = dict(decided)

        def make(rule: Rule, names: list[str]):
            def constraint(*vals):
                return holds(rule, Env(self, user, facts, {**fixed, **dict(zip(names, vals))}, shared))
            return constraint

        for rule, deps in rules:
            names = sorted(deps & pending, key=self.order.__getitem__)
            problem.addConstraint(make(rule, names), names)
        for var in undecided:
            reads = sorted((self.depends(self._prefer_reads(var), user, memo) - {var}) & pending,
                           key=self.order.__getitem__)
            names = [var] + reads

            def eligible(*vals, _var=var, _names=names):
                env = Env(self, user, facts, {**fixed, **dict(zip(_names, vals))}, shared)
                return any(vals[0] == value for value, _ in self.candidates(_var, env))
            problem.addConstraint(eligible, names)
        return problem.getSolution() is not None, None


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _shape(facts: Mapping[str, Any]) -> list | None:
    """The types of the facts' values and of the items of list values; None when a value is
    neither a scalar nor a list of scalars (such facts are never remembered by `_facts_key`)."""
    out: list = []
    for value in facts.values():
        kind = type(value)
        if kind is list:
            items = tuple(map(type, value))
            if not _SCALARS.issuperset(items):
                return None
            out.append((list, items))
        elif kind in _SCALARS:
            out.append(kind)
        else:
            return None
    return out


def _same(a: Any, b: Any) -> bool:
    """The same value for the solver (True and 1 are equal in Python, not here)."""
    return type(a) is type(b) and a == b


def _components(variables: list[str], constrained: list[tuple[Rule, frozenset]],
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
