"""Realistic wrong launch commands (tests/data/operator_fixes.yaml) judged as an operator would:
is the first fix offered the one they would apply, does the combined fix keep the served model and
resolve when pasted, and does `--relax` pick no slower backend than the fastest legal one.

Shared by tests/test_operator_fixes.py (which asserts) and benchmarks/operator_fixes.py (which
prints the figures).
"""

from __future__ import annotations

import dataclasses
import functools
import shlex
from pathlib import Path
from typing import Any

import yaml

from accord.resolver import api
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.explaining.ranking import preferences_for, speed_rank
from accord.resolver.facts.machine import load_facts
from accord.resolver.solving.solve import Env

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "data" / "operator_fixes.yaml"
MODELS = ROOT / "tests" / "differential" / "fixtures" / "models"


@functools.lru_cache(maxsize=None)
def cases() -> tuple[dict, ...]:
    return tuple(yaml.safe_load(CASES.read_text())["cases"])


def argv_of(case: dict) -> list[str]:
    words = shlex.split(case["argv"].replace("{models}", str(MODELS)))
    system = case.get("system", "llm")
    return (["--system", system] if system != "llm" else []) + words


def parse(argv: list[str], facts_preset: str):
    _, parsed = parse_flags(argv, prog="accord resolve")
    facts = load_facts(facts_preset, [], model_path=parsed.user.get("model_path"), system=parsed.system)
    return parsed, facts


@dataclasses.dataclass
class Verdict:
    id: str
    first: dict | None              # {"set": {...}, "drop": [...]} of the first fix offered
    matches: bool                   # the first fix is one the operator would apply
    combined: list[str] | None      # the combined fix's command
    combined_keeps_model: bool
    combined_resolves: bool
    relax_keeps_model: bool
    relax_slower: list[str]         # backend flags --relax set slower than the fastest legal value
    conflicts: int


def _as_change(fix) -> dict:
    return {"set": {k: v for k, v in fix.changes}, "drop": sorted(fix.drops)}


def _matches(first: dict | None, wanted: list[dict]) -> bool:
    if first is None:
        return False
    for want in wanted:
        if first["set"] == dict(want.get("set") or {}) and first["drop"] == sorted(want.get("drop") or []):
            return True
    return False


def judge(case: dict) -> Verdict:
    argv = argv_of(case)
    parsed, facts = parse(argv, case["facts"])
    system = parsed.system
    try:
        api.resolve(system, parsed.user, facts)
    except api.ConflictError as err:
        conflicts = err.conflicts
        report = err.to_dict()
    else:
        return Verdict(case["id"], None, False, None, False, False, False, [], 0)
    fixes = [fix for c in conflicts for fix in c.fixes]
    first = _as_change(conflicts[0].fixes[0]) if conflicts and conflicts[0].fixes else None
    model = parsed.user.get("model_path")
    combined = (report.get("fix_all") or {}).get("command")
    keeps = resolves = False
    if combined is not None:
        again, _ = parse((["--system", system] if system != "llm" else []) + combined, case["facts"])
        keeps = again.user.get("model_path") == model
        try:
            api.resolve(system, again.user, facts)
            resolves = True
        except api.ConflictError:
            resolves = False
    elif len(conflicts) == 1 and fixes:
        keeps = resolves = True  # one conflict: its first fix is the combined fix (checked below)
    relax_keeps, slower = False, []
    try:
        relaxed = api.resolve(system, parsed.user, facts, relax=True)
    except api.ConflictError:
        relaxed = None
    if relaxed is not None:
        relax_keeps = relaxed.values.get("model_path") == model
        slower = _slower_than_fastest(system, relaxed, facts)
    return Verdict(case["id"], first, _matches(first, case["operator"]), combined, keeps, resolves,
                   relax_keeps, slower, len(conflicts))


def _slower_than_fastest(system: str, config, facts) -> list[str]:
    """Backend flags `--relax` set whose value is slower, by the preference data, than another
    value that is legal with everything else `--relax` left in place."""
    plan = api.plan_for(system)
    env = Env(plan, {}, facts, {})
    user = {name: config.values[name] for name, prov in config.provenance.items()
            if prov.get("source") in ("user", "relax") and config.values[name] is not None}
    slower = []
    for name, prov in config.provenance.items():
        if prov.get("source") != "relax" or name not in preferences_for(plan).speed:
            continue
        chosen = config.values[name]
        mine = speed_rank(plan, name, chosen, env)
        for value in plan.catalog[name].finite_domain or ():
            if value is None or speed_rank(plan, name, value, env) >= mine:
                continue
            if plan.satisfiable({**user, name: value}, facts):
                slower.append(f"{name}={chosen} (legal and faster: {value})")
                break
    return slower


def judge_all() -> list[Verdict]:
    return [judge(case) for case in cases()]
