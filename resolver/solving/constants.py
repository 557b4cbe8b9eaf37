"""What holds in every launch with given flags set, whatever the values and facts.

Used by the solver to leave out of a search the rules that cannot fail (and the warnings that cannot
apply) knowing only which flags the user set, and the derived values that are the same in all such
launches. Nothing here is kept between questions: resolver/solving/cache.py keeps the answers.
"""

from __future__ import annotations

from typing import Any, Mapping

from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving.env import PlanView, first_default, set_flags_key


class _Varies(Exception):
    """An expression read something only a launch gives: a fact, a typed or a computed value."""


class Constants:
    """What an expression can read knowing only which flags are set: the catalog default of an
    unset flag no rule computes, a default-ruled flag whose rules read only such constants, and
    `is_set` of any flag; anything else raises `_Varies`. An expression that evaluates here gives
    the same answer in every launch with these flags set: a hard rule holding here holds in all of
    them, a warning not applying here applies in none, a flag in `derived` has that value in all."""

    __slots__ = ("plain", "set_flags", "relaxed", "catalog", "default_rules", "derived", "_varies", "known_facts")

    def __init__(self, plan: PlanView, user: Mapping[str, Any], known_facts: frozenset[str] | None = None,
                 seed: "Constants | None" = None):
        self.plain = plan.plain
        self.catalog = plan.catalog
        self.default_rules = plan.default_rules
        self.set_flags, self.relaxed = set_flags_key(user)
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
        result = first_default(rules, self, self.catalog[name].default)  # as `Env.derived`
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


def constant(fn, rule: Rule, probe: Constants) -> Any:
    """`fn(rule, probe)`, or None when the answer varies between launches (or the evaluation fails:
    a real launch then evaluates it and meets the same failure)."""
    try:
        return fn(rule, probe)
    except Exception:  # noqa: BLE001 (_Varies, or an error the real evaluation reports)
        return None


def applies(rule: Rule, env) -> bool:
    return rule.when is None or bool(rule.when._fn(env))
