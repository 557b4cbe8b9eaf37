"""`accord resolve --dry-run`: for every backend-like choice, what is legal, what is chosen, and why not.

A value is *legal* when pinning it, on top of what the user typed, still leaves a legal
configuration (the solver re-decides everything else). For an illegal value we name the hard rules
that exclude it: the ones that fail once the value is pinned into the resolved configuration, or,
when the exclusion is indirect, a minimal set found by deletion.

Backend-like flags are the choice flags whose names say they pick an implementation: `*_backend`,
`*_runner_backend` and `*_dtype` (the KV cache, Mamba state and draft KV dtypes), plus `backend`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from resolver.api import ConflictError, plan_for, resolve
from resolver.errors import UsageError
from resolver.expr import UnknownFact
from resolver.explain import minimal_rules
from resolver.report import describe_value
from resolver.solve import Env, Plan, check

SUFFIXES = ("_backend", "_dtype")


@dataclasses.dataclass(frozen=True)
class Choice:
    flag: str
    chosen: Any
    source: str
    legal: tuple[Any, ...]
    excluded: tuple[tuple[Any, tuple[tuple[str, str], ...]], ...]   # value -> ((rule id, reason), ...)

    def to_dict(self) -> dict:
        return {"flag": self.flag, "chosen": self.chosen, "source": self.source, "legal": list(self.legal),
                "excluded": {describe_value(v): [{"rule": r, "reason": why} for r, why in rules]
                             for v, rules in self.excluded}}


def backend_like(plan: Plan) -> list[str]:
    """Choice flags that select an implementation and have a known set of values."""
    names = []
    for flag in plan.catalog:
        if not (flag.name == "backend" or flag.name.endswith(SUFFIXES)):
            continue
        if flag.finite_domain is not None or flag.name in plan.prefer_rules:
            names.append(flag.name)
    return names


def values_of(plan: Plan, name: str) -> list[Any]:
    """The values to try: the solver's candidates first, then the rest of the catalog domain."""
    ordered = plan.domain(name) if name in plan.prefer_rules else []
    for value in plan.catalog[name].finite_domain or ():
        if value not in ordered:
            ordered.append(value)
    return [v for v in ordered if v is not None]


def _excluding_rules(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                     resolved: Mapping[str, Any], name: str, value: Any) -> tuple[tuple[str, str], ...]:
    explicit = {k: v for k, v in user.items() if k != name}
    env = Env(plan, explicit, facts, {**resolved, name: value})
    direct = []
    for rule in plan.hard_rules:
        if name not in rule.constrained_flags:
            continue
        try:
            if not check(rule, env):
                direct.append(rule)
        except UnknownFact:
            continue
    rules = direct or minimal_rules(plan, {**user, name: value}, facts)
    return tuple((r.id, r.reason) for r in rules)


def dry_run(system: str, user: Mapping[str, Any], facts: Mapping[str, Any],
            only: list[str] | None = None) -> tuple[Any, list[Choice]]:
    """The resolved config (raises ConflictError if the command itself is illegal) and each choice."""
    plan = plan_for(system)
    names = backend_like(plan)
    if only:
        wanted = [o.lstrip("-").replace("-", "_") for o in only]
        unknown = [w for w in wanted if w not in plan.catalog]
        if unknown:
            raise UsageError(f"--flag names unknown {system} flag(s) {unknown}; "
                             f"dry-run covers: {', '.join(names)}.")
        names = wanted
    config = resolve(system, user, facts)
    choices = []
    for name in names:
        legal, excluded = [], []
        for value in values_of(plan, name):
            if value == config.values[name] or plan.satisfiable({**user, name: value}, facts):
                legal.append(value)
            else:
                excluded.append((value, _excluding_rules(plan, user, facts, config.values, name, value)))
        prov = config.provenance[name]
        choices.append(Choice(name, config.values[name], prov.get("rule") or prov["source"],
                              tuple(legal), tuple(excluded)))
    return config, choices


def render(choices: list[Choice]) -> str:
    lines = []
    for choice in choices:
        lines.append(f"{choice.flag} = {describe_value(choice.chosen)}   ({choice.source})")
        lines.append(f"  legal:    {', '.join(describe_value(v) for v in choice.legal) or '(none)'}")
        for value, rules in choice.excluded:
            why = "; ".join(f"{rid}: {reason}" for rid, reason in rules)
            lines.append(f"  excluded: {describe_value(value):<16} {why}")
    return "\n".join(lines)


def main_dry_run(parsed, facts, opts) -> int:
    from resolver.commands.resolve import print_conflict

    try:
        config, choices = dry_run(parsed.system, parsed.values, facts, opts.only)
    except ConflictError as err:
        return print_conflict(err, opts.json)
    if opts.json:
        print(json.dumps({"system": config.system, "hash": config.hash,
                          "choices": [c.to_dict() for c in choices]}, indent=2, sort_keys=True))
    else:
        print(render(choices))
    return 0
