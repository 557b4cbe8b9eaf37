"""Rule files: load `rules/<system>/<area>.yaml` into typed, pre-parsed rules.

Five kinds (see rules/README.md): `require` and `conflict` are hard constraints, `default` computes
the value of an unset flag, `prefer` orders candidate values for an unset choice, `warn` attaches a
message. Every expression is parsed here, once, so a malformed rule fails at load time with its file
and id, never in the middle of a resolve.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from resolver.catalog import RULES_DIR, SYSTEMS
from resolver.errors import UsageError
from resolver.expr import Expr, ExpressionError, parse
from resolver.yamlcache import read_yaml_files

KINDS = ("require", "conflict", "default", "prefer", "warn")
HARD_KINDS = ("require", "conflict")
_COMMON_KEYS = {"id", "kind", "when", "reason", "ref", "seed", "fix", "notes"}
_KIND_KEYS = {
    "require": {"require"},
    "conflict": set(),
    "default": {"flag", "value"},
    "prefer": {"flag", "values"},
    "warn": {"message"},
}


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One value a `prefer` rule offers, with the condition under which it is offered."""

    value: Any
    when: Expr | None = None


@dataclasses.dataclass(frozen=True)
class Rule:
    id: str
    kind: str
    area: str
    reason: str
    ref: str = ""
    when: Expr | None = None
    require: Expr | None = None
    flag: str | None = None
    value: Expr | None = None
    values: tuple[Candidate, ...] = ()
    message: str = ""
    fix: tuple[tuple[str, Expr], ...] = ()
    seed: tuple[str, ...] = ()
    file: str = ""

    @property
    def is_hard(self) -> bool:
        return self.kind in HARD_KINDS

    def expressions(self) -> list[Expr]:
        exprs = [e for e in (self.when, self.require, self.value) if e is not None]
        exprs += [c.when for c in self.values if c.when is not None]
        exprs += [e for _, e in self.fix]
        return exprs

    @functools.cached_property
    def reads_flags(self) -> frozenset[str]:
        """Flags this rule reads (not counting the flag it sets)."""
        return frozenset().union(*(e.flags for e in self.expressions()))

    @functools.cached_property
    def reads_facts(self) -> frozenset[str]:
        return frozenset().union(*(e.facts for e in self.expressions()))

    @functools.cached_property
    def constrained_flags(self) -> frozenset[str]:
        """Flags a hard rule constrains: the ones in its condition and requirement."""
        exprs = [e for e in (self.when, self.require) if e is not None]
        return frozenset().union(*(e.flags for e in exprs))


@dataclasses.dataclass(frozen=True)
class RuleSet:
    system: str
    rules: tuple[Rule, ...]

    def __iter__(self):
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def by_id(self) -> dict[str, Rule]:
        return {r.id: r for r in self.rules}


NOT_RULE_FILES = ("coverage.yaml",)


def rule_files(system: str, root: Path = RULES_DIR) -> list[Path]:
    """Rule files of a system: every YAML beside the catalog except the catalog and coverage notes."""
    root = root / system
    return sorted(p for p in root.glob("*.yaml")
                  if not p.name.startswith("flags") and p.name not in NOT_RULE_FILES)


def _expr(text: Any, where: str) -> Expr:
    try:
        return parse(text)
    except ExpressionError as err:
        raise UsageError(f"{where}: {err}") from None


def _rule_from_yaml(entry: dict, area: str, path: Path) -> Rule:
    rid = entry.get("id")
    where = f"{path.name}: rule {rid!r}"
    if not rid or not isinstance(rid, str):
        raise UsageError(f"{path}: a rule has no string 'id'; every rule needs a unique id.")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise UsageError(f"{where} has kind {kind!r}; use one of {', '.join(KINDS)}.")
    allowed = _COMMON_KEYS | _KIND_KEYS[kind]
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise UsageError(f"{where} has unknown keys {unknown}; a {kind} rule allows {sorted(allowed)}.")
    missing = sorted(_KIND_KEYS[kind] - set(entry))
    if missing:
        raise UsageError(f"{where} lacks {missing}.")
    if not entry.get("reason") and kind != "warn":
        raise UsageError(f"{where} has no 'reason': say in one line why the rule exists.")
    if kind == "conflict" and "when" not in entry:
        raise UsageError(f"{where}: a conflict rule needs 'when' (the illegal combination).")
    values = tuple(
        Candidate(v["value"], _expr(v["when"], where) if "when" in v else None) if isinstance(v, dict)
        else Candidate(v)
        for v in entry.get("values", ())
    )
    fix = tuple((flag, _expr(text, where)) for flag, text in sorted((entry.get("fix") or {}).items()))
    seed = entry.get("seed") or ()
    return Rule(
        id=rid, kind=kind, area=area, reason=str(entry.get("reason") or entry.get("message") or ""),
        ref=str(entry.get("ref") or ""),
        when=_expr(entry["when"], where) if "when" in entry else None,
        require=_expr(entry["require"], where) if "require" in entry else None,
        flag=entry.get("flag"),
        value=_expr(entry["value"], where) if "value" in entry else None,
        values=values, message=str(entry.get("message") or ""), fix=fix,
        seed=tuple([seed] if isinstance(seed, str) else seed), file=path.name,
    )


def load_rules(system: str, root: Path = RULES_DIR) -> RuleSet:
    if system not in SYSTEMS:
        raise UsageError(f"unknown system {system!r}; use one of: {', '.join(SYSTEMS)}.")
    rules: list[Rule] = []
    first: list[Rule] = []
    seen: dict[str, str] = {}
    paths = rule_files(system, root)
    for path, documents in zip(paths, read_yaml_files(paths)):
        doc = documents[0] if documents else {}
        area = doc.get("area", path.stem)
        # A file marked `consulted_first` (an engine profile) narrows the other files' choices: its
        # prefer and default rules are tried before theirs, whatever the file names.
        into = first if doc.get("consulted_first") else rules
        for entry in doc.get("rules") or ():
            rule = _rule_from_yaml(entry, area, path)
            if rule.id in seen:
                raise UsageError(f"rule id {rule.id!r} is used twice ({seen[rule.id]} and {path.name}).")
            seen[rule.id] = path.name
            into.append(rule)
    return RuleSet(system=system, rules=tuple(first + rules))
