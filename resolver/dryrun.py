"""`accord resolve --dry-run`: for every backend-like choice, what is legal, what is chosen, and why not.

A value is *legal* when pinning it, as if the user had typed it on top of the rest of the command,
still leaves a legal configuration (the solver may re-decide everything else). For an illegal value
we name the hard rules that exclude it: every rule that on its own rules the value out, or, when
only a combination does, a minimal set of rules found by deletion.

Backend-like flags are the choice flags whose name says they pick an implementation (a `backend`
word: `attention_backend`, `moe_runner_backend`, `cuda_graph_backend_decode`, `backend`) or a data
type (`kv_cache_dtype`, `mamba_ssm_dtype`, ...). The values tried are the solver's candidates, the
catalog's choices and, for open string flags such as the diffusion attention backend, the values
the rules themselves name.

Speed: one solve per value would cost ~50 ms each on the LLM rules (hundreds of values). Most
answers need no search: the resolved configuration, with the pinned value swapped in, either still
satisfies every rule the pinned flag can influence (legal, by example) or breaks a rule that no
choice of the other flags can repair (illegal). Only the rest is solved, and only on the part of
the problem the pinned flag touches.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import json
from typing import Any, Iterable, Mapping

from resolver.api import ConflictError, plan_for, resolve
from resolver.errors import UsageError
from resolver.explain import minimal_rules
from resolver.expr import UnknownFact
from resolver.frozen import ResolvedConfig
from resolver.report import describe_value
from resolver.rules import Rule
from resolver.solve import Env, Plan, check

_SKIPPED_TYPES = ("json", "list")


@dataclasses.dataclass(frozen=True)
class Choice:
    """One backend-like flag: its resolved value, where that came from, and every value's verdict."""

    flag: str
    chosen: Any
    source: str
    legal: tuple[Any, ...]
    excluded: tuple[tuple[Any, tuple[tuple[str, str], ...]], ...]   # (value, ((rule id, reason), ...))

    def to_dict(self) -> dict:
        return {"flag": self.flag, "chosen": self.chosen, "source": self.source, "legal": list(self.legal),
                "excluded": [{"value": value, "rules": [{"id": rid, "reason": why} for rid, why in rules]}
                             for value, rules in self.excluded]}


# -- which flags, which values ------------------------------------------------------------------

def backend_like(plan: Plan) -> list[str]:
    """Choice flags that select an implementation or a data type and have values to try."""
    names = []
    for flag in plan.catalog:
        words = flag.name.split("_")
        if flag.type in _SKIPPED_TYPES or not ("backend" in words or words[-1] == "dtype" and len(words) > 1):
            continue
        if values_of(plan, flag.name):
            names.append(flag.name)
    return names


def values_of(plan: Plan, name: str) -> list[Any]:
    """The values to try: the solver's candidates first, then the catalog's, then the rules' own."""
    ordered = list(plan.domain(name)) if name in plan.prefer_rules else []
    flag = plan.catalog[name]
    extra = flag.finite_domain if flag.finite_domain is not None else sorted(mentioned_values(plan, name), key=str)
    for value in extra:
        if value not in ordered:
            ordered.append(value)
    return [v for v in ordered if v is not None]


def mentioned_values(plan: Plan, name: str) -> set[Any]:
    """Constants the rules compare `name` with (`name == 'fa'`, `name in ('fa', 'sage')`) or assign it."""
    found: set[Any] = set()
    for rule in plan.ruleset:
        if rule.flag == name:
            found.update(c.value for c in rule.values)
            if rule.value is not None:
                found.update(_constants(rule.value.source))
        found.update(value for flag, expr in rule.fix if flag == name for value in _constants(expr.source))
        for expr in (rule.when, rule.require):
            if expr is not None and name in expr.flags:
                found.update(_compared_constants(expr.source, name))
    return {v for v in found if isinstance(v, (str, int, float)) and not isinstance(v, bool)}


def _constants(source: str) -> list[Any]:
    """The value of a constant expression (`'fa'`), or nothing if the expression computes it."""
    try:
        return [ast.literal_eval(source.strip())]
    except (ValueError, SyntaxError, TypeError):
        return []


def _compared_constants(source: str, name: str) -> Iterable[Any]:
    for node in ast.walk(ast.parse(source.strip(), mode="eval")):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:]):
            if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                continue
            for mine, other in ((left, right), (right, left)):
                if isinstance(mine, ast.Name) and mine.id == name:
                    items = other.elts if isinstance(other, (ast.Tuple, ast.List, ast.Set)) else [other]
                    yield from (item.value for item in items if isinstance(item, ast.Constant))


# -- legality of one pinned value -----------------------------------------------------------------

class Pinning:
    """Answers "is this command still legal with these flags pinned?" for many pins, from one resolve.

    `reach(x)` is every flag whose value can change x's value: x itself and, while x is unset, what
    its default and prefer rules read. A hard rule can only change verdict when a flag in its reach
    is pinned, so only those rules are checked, against the resolved configuration with the pinned
    values swapped in (the *example*). When the example breaks a rule, the rules unsatisfiable on
    their own name the exclusion; otherwise the solver decides, given only the rules linked to the
    pinned flags through shared decisions (the other components are untouched and stay legal).

    Without a resolved configuration (the user's flags conflict by themselves) every question goes
    to the solver.
    """

    def __init__(self, plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                 config: ResolvedConfig | None):
        self.plan = plan
        self.user = dict(user)
        self.facts = facts
        self.decisions = None if config is None else {d: config.values[d] for d in plan.prefer_rules}
        self._reach: dict[str, frozenset[str]] = {}
        self._rule_reach = {id(rule): self._reach_all(_read_by(rule, hard=True)) for rule in plan.hard_rules}
        self._touching: dict[frozenset[str], list[Rule]] = {}
        self._linked: dict[frozenset[str], list[Rule]] = {}
        self._depends: dict[frozenset[str], dict] = {}
        self._clean: set[tuple] = {()}  # pin sets whose example holds (no pins: the resolved config)

    def reach(self, name: str) -> frozenset[str]:
        if name not in self._reach:
            self._reach[name] = frozenset({name})  # placeholder breaks cycles (lint rejects them)
            if name not in self.user and name in self.plan.catalog:
                rules = self.plan.default_rules.get(name, []) + self.plan.prefer_rules.get(name, [])
                reads = set().union(*(_read_by(r, hard=False) for r in rules))
                self._reach[name] = frozenset({name}) | self._reach_all(reads)
        return self._reach[name]

    def _reach_all(self, names: Iterable[str]) -> frozenset[str]:
        return frozenset().union(*(self.reach(n) for n in names))

    def repair_flags(self, rules: Iterable[Rule]) -> frozenset[str]:
        """Flags whose pinning could change what these rules say: only they can undo an exclusion."""
        return frozenset().union(*(self._rule_reach[id(r)] for r in rules))

    def touching(self, names: frozenset[str]) -> list[Rule]:
        """Hard rules whose verdict can change when these flags are pinned."""
        if names not in self._touching:
            self._touching[names] = [r for r in self.plan.hard_rules if self._rule_reach[id(r)] & names]
        return self._touching[names]

    def legal(self, pins: Mapping[str, Any]) -> bool:
        return self._judge(pins, every=False) is None

    def verdict(self, pins: Mapping[str, Any]) -> tuple[Rule, ...] | None:
        """None when the command with `pins` is legal, else the rules that exclude it."""
        groups = self.exclusions(pins)
        return None if groups is None else tuple(dict.fromkeys(r for g in groups for r in g))

    def exclusions(self, pins: Mapping[str, Any]) -> list[tuple[Rule, ...]] | None:
        """None when legal; else groups of rules, each unsatisfiable by itself with these pins."""
        return self._judge(pins, every=True)

    def _judge(self, pins: Mapping[str, Any], every: bool) -> list[tuple[Rule, ...]] | None:
        """The exclusions of `pins`; without `every`, only the first proof found (possibly empty)."""
        names = frozenset(pins)
        pinned = {**self.user, **pins}
        if self.decisions is None:
            if self.plan.satisfiable(pinned, self.facts):
                return None
            return [tuple(minimal_rules(self.plan, pinned, self.facts))] if every else []
        key = _pin_key(pins)
        if key in self._clean:
            return None
        fresh = self._unchecked(pins)
        decided = {d: v for d, v in self.decisions.items() if d not in pinned}
        env = Env(self.plan, pinned, self.facts, decided)
        broken = []
        for rule in self.touching(fresh):
            if not _holds(rule, env):
                if not every and self._fixed(names, rule):
                    return [(rule,)]
                broken.append(rule)
        if not broken and self._still_eligible(fresh, decided, env):
            self._clean.add(key)
            return None
        alone = []
        for rule in broken:
            if self._fixed(names, rule) or not self.plan.satisfiable(pinned, self.facts, [rule]):
                if not every:
                    return [(rule,)]
                alone.append((rule,))
        if alone:
            return alone
        linked = self.linked(names)
        if self.plan.satisfiable(pinned, self.facts, linked):
            return None
        return [tuple(minimal_rules(self.plan, pinned, self.facts, linked))] if every else []

    def _unchecked(self, pins: Mapping[str, Any]) -> frozenset[str]:
        """The pinned flags whose rules must be checked: all of them, unless the example already
        held with one pin fewer, in which case only that last pin can have broken something."""
        for name in pins:
            if _pin_key({k: v for k, v in pins.items() if k != name}) in self._clean:
                return frozenset({name})
        return frozenset(pins)

    def _still_eligible(self, names: frozenset[str], decided: Mapping[str, Any], env: Env) -> bool:
        """Every decision the pins can influence may still take its resolved value."""
        return all(value in [v for v, _ in self.plan.candidates(decision, env)]
                   for decision, value in decided.items() if self.reach(decision) & names)

    def _fixed(self, names: frozenset[str], rule: Rule) -> bool:
        """The rule reads no decision once `names` are pinned: no choice of the solver changes it."""
        memo = self._depends.setdefault(names, {})
        return not self.plan.depends(rule.constrained_flags, {**self.user, **dict.fromkeys(names)}, memo)

    def linked(self, names: frozenset[str]) -> list[Rule]:
        """The rules touching `names` plus every rule sharing a decision with them, transitively."""
        if names not in self._linked:
            keys = {**self.user, **dict.fromkeys(names)}
            memo: dict[str, frozenset] = {}
            deps = [(rule, self.plan.depends(rule.constrained_flags, keys, memo)) for rule in self.plan.hard_rules]
            chosen = {id(r) for r in self.touching(names)}
            variables: set[str] = set().union(*(d for r, d in deps if id(r) in chosen))
            grown = True
            while grown:
                grown = False
                for var in list(variables):
                    reads = set().union(*(r.reads_flags for r in self.plan.prefer_rules.get(var, ())))
                    new = self.plan.depends(reads, keys, memo) - variables
                    if new:
                        variables |= new
                        grown = True
                for rule, d in deps:
                    if id(rule) not in chosen and d & variables:
                        chosen.add(id(rule))
                        variables |= d
                        grown = True
            self._linked[names] = [rule for rule, _ in deps if id(rule) in chosen]
        return self._linked[names]


def _pin_key(pins: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, describe_value(v)) for k, v in pins.items()))


def _read_by(rule: Rule, hard: bool) -> set[str]:
    """Flags a rule reads, including those whose being set (`is_set`) it asks about."""
    exprs = [e for e in (rule.when, rule.require) if e is not None] if hard else rule.expressions()
    return set().union(*(e.flags | e.set_checks for e in exprs))


def _holds(rule: Rule, env: Env) -> bool:
    """A rule that cannot be checked (an unknown fact) does not exclude anything."""
    try:
        return check(rule, env)
    except UnknownFact:
        return True


# -- the dry run ----------------------------------------------------------------------------------

def selected_flags(plan: Plan, only: list[str] | None) -> list[str]:
    """The flags to report: every backend-like one, or the ones `--flag` names (any with values)."""
    names = backend_like(plan)
    if not only:
        return names
    wanted = []
    for raw in only:
        name = raw.lstrip("-").replace("-", "_")
        if name not in plan.catalog:
            hint = difflib.get_close_matches(name, list(plan.catalog.flags), n=1)
            raise UsageError(f"--flag {raw}: no such {plan.catalog.system} flag"
                             + (f"; did you mean {hint[0]}?" if hint else ".")
                             + " Without --flag the dry run lists every backend-like flag.")
        if not values_of(plan, name):
            raise UsageError(f"--flag {raw}: {name} takes open-ended values, so there is no list of "
                             f"legal ones to show; pick a choice flag such as {names[0]}.")
        if name not in wanted:
            wanted.append(name)
    return wanted


def dry_run(system: str, user: Mapping[str, Any], facts: Mapping[str, Any],
            only: list[str] | None = None) -> tuple[ResolvedConfig, list[Choice]]:
    """The resolved config (raises ConflictError if the command itself is illegal) and each choice."""
    plan = plan_for(system)
    names = selected_flags(plan, only)
    config = resolve(system, user, facts)
    pinning = Pinning(plan, user, facts, config)
    choices = []
    for name in names:
        legal, excluded = [], []
        for value in values_of(plan, name):
            rules = None if value == config.values[name] else pinning.verdict({name: value})
            if rules is None:
                legal.append(value)
            else:
                excluded.append((value, tuple((r.id, r.reason) for r in rules)))
        prov = config.provenance[name]
        choices.append(Choice(name, config.values[name], prov.get("rule") or prov["source"],
                              tuple(legal), tuple(excluded)))
    return config, choices


def render(choices: list[Choice]) -> str:
    """A readable table: the chosen value and its source, the legal values, each exclusion's rules."""
    lines = []
    width = max((len(describe_value(v)) for c in choices for v, _ in c.excluded), default=0)
    for choice in choices:
        lines.append(f"{choice.flag} = {describe_value(choice.chosen)}   ({choice.source})")
        lines.append(f"  legal     {', '.join(describe_value(v) for v in choice.legal) or '(none)'}")
        for value, rules in choice.excluded:
            first, *rest = [f"{rid}: {reason}" for rid, reason in rules]
            lines.append(f"  excluded  {describe_value(value):<{width}}  {first}")
            lines.extend(f"            {'':<{width}}  {more}" for more in rest)
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
