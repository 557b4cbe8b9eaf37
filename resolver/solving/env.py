"""What one assignment gives every flag: `Env`, the values rules are evaluated against.

An `Env` answers a rule expression's reads: a user's value, a decision, a catalog default, or a
derived value computed on demand by the flag's default rules. `check` and `holds` give a hard
rule's verdict in one. `Shared` holds what every assignment of one launch has in common, so the
trial assignments of a search compute it once. `PlanView` is what these read of solve.py's `Plan`
(which imports this module: nothing here imports it back).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol

from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.ruletypes import Rule

if TYPE_CHECKING:
    from accord.resolver.language.catalog import Catalog

#: A (partial) assignment of the decisions: decision flag -> the value chosen for it.
Assignment = dict[str, Any]


class PlanView(Protocol):
    """What an `Env`, `Constants` and the solver core read of a compiled plan (solve.py's `Plan`)."""

    catalog: Catalog
    plain: dict[str, Any]  # flags no rule computes -> their catalog default
    prefer_rules: dict[str, list[Rule]]
    default_rules: dict[str, list[Rule]]
    order: dict[str, int]  # flag -> its place in the catalog

    def domain(self, flag: str) -> list[Any]: ...

    def candidates(self, flag: str, env: Env) -> list[tuple[Any, str | None]]: ...


class Reads(Protocol):
    """What the solver asks of the dependency graph given the set flags (depgraph.py's `Reach`)."""

    def depends(self, names: Iterable[str]) -> frozenset: ...

    def eligibility(self, decision: str) -> frozenset: ...


class _CycleError(Exception):
    """A default that reads itself through other defaults (`accord rules --lint` rejects these)."""


class RelaxedValues(dict):
    """The user's values after `--relax` replaced some: `relaxed` names the flags upstream's value
    now holds. Rules asking `is_set` (did the user set it?) see those as not set by the user, so a
    conflict about a typed value does not fire again on the value its fix wrote."""

    def __init__(self, values: Mapping[str, Any], relaxed: frozenset[str] = frozenset()):
        super().__init__(values)
        self.relaxed = relaxed


def set_flags_key(user: Mapping[str, Any]) -> tuple[frozenset, frozenset]:
    """Which flags hold user values, and which of them `--relax` wrote: what the memos depend on
    (a relaxed flag is fixed like a typed one, but `is_set` reads it as not typed)."""
    return frozenset(user), frozenset(getattr(user, "relaxed", ()))


class Shared:
    """What one pair of user values and facts gives whatever the decisions, shared by its Envs.

    A derived flag that reads no decision (through its default rules, given which flags are set)
    has the same value in every assignment, and a hard rule that reads no decision the same verdict,
    so each is computed once per pair instead of once per trial assignment of the search.
    """

    __slots__ = ("derived", "verdicts", "reach")

    def __init__(self, reach: Reads, constants: Mapping[str, tuple[Any, str | None]] = {}):
        # Starts with the derived values that are constant for these set flags (see `_Constants`).
        self.derived: dict[str, tuple[Any, str | None]] = dict(constants)
        self.verdicts: dict[int, Any] = {}    # id(rule) -> True, False or the missing fact's key
        self.reach = reach                    # the dependency graph given these set flags


class Env:
    """The values one (partial) assignment gives every flag; derived flags are computed on demand."""

    __slots__ = ("plan", "user", "facts", "decided", "_derived", "_busy", "_shared", "_plain", "named_values")

    def __init__(self, plan: PlanView, user: Mapping[str, Any], facts: Mapping[str, Any],
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
        # resolver/language/derived.py `combine`), like `_derived` for derived flags.
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
        shared = self._shared  # (a kept answer is a (value, rule) pair: never falsy)
        found = self._derived.get(name) or (shared.derived.get(name) if shared is not None else None)
        if found is not None:
            return found
        if name in self._busy:
            raise _CycleError(name)
        self._busy.add(name)
        try:
            result = first_default(rules, self, self.plan.catalog[name].default)
        finally:
            self._busy.discard(name)
        if shared is not None and not shared.reach.depends((name,)):  # the same in every assignment
            shared.derived[name] = result
            return result
        self._derived[name] = result
        return result


@dataclasses.dataclass(slots=True)
class Outcome:
    """What a solve produced: every value with its origin, or the hard rules that failed."""

    values: dict[str, Any]
    origin: dict[str, str | None]     # flag -> rule id that set it (None: user or catalog)
    violated: list[Rule]
    unknown: list[tuple[Rule, str]]   # rules that could not be checked, and the missing fact
    satisfiable: bool


def first_default(rules: list[Rule], env: Any, default: Any) -> tuple[Any, str | None]:
    """A derived flag's value and the id of the default rule giving it: the first whose condition
    holds (one needing an unknown fact does not apply), else the catalog default `default`."""
    for rule in rules:
        try:
            if rule.when is None or rule.when._fn(env):
                return rule.value._fn(env), rule.id
        except UnknownFact:
            continue
    return default, None


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


def verdict(rule: Rule, env: Env, shared: Shared) -> Any:
    """A decision-free hard rule's verdict in `env` (True, False or the missing fact's key), kept
    in `shared`: the same for every assignment of the launch."""
    found = shared.verdicts.get(id(rule))
    if found is None:
        try:
            found = check(rule, env)
        except UnknownFact as missing:
            found = missing.key
        shared.verdicts[id(rule)] = found
    return found
