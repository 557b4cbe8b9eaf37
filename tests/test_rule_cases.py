"""Every rule, tested from data: one case where it decides the outcome, one where it must not fire.

Cases live in tests/rule_cases/<system>/<area>.yaml (format: tests/rule_cases/README.md). "fires" means: a require/conflict rule makes resolution fail with a
conflict naming it; a default/prefer rule is the provenance of its flag; a warn rule adds its
warning. "quiet" means the opposite, on a command close to the firing one.
"""

import shlex
from pathlib import Path

import pytest
import yaml

from accord.resolver.api import ConflictError, resolve
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.facts.machine import load_facts
from accord.resolver.language.catalog import SYSTEMS
from accord.resolver.language.ruleset import load_rules

CASES_DIR = Path(__file__).parent / "rule_cases"
REPO_ROOT = Path(__file__).resolve().parents[1]  # cases name files relative to the checkout


def _fact_arg(key, value):
    if value is None:
        text = "none"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = str(value)
    return f"{key}={text}"


def _load_cases():
    cases = []
    for system in SYSTEMS:
        for path in sorted((CASES_DIR / system).glob("*.yaml")):
            for entry in yaml.safe_load(path.read_text()) or ():
                for mode in ("fires", "quiet"):
                    items = entry.get(mode) or []
                    for i, case in enumerate(items if isinstance(items, list) else [items]):
                        cases.append(pytest.param(system, entry["rule"], mode, case,
                                                  id=f"{system}:{entry['rule']}:{mode}:{i}"))
    return cases


CASES = _load_cases()


def _outcome(system, case):
    argv = shlex.split(case.get("flags", ""))
    _, parsed = parse_flags(argv, system=system)
    facts = load_facts(case.get("facts", "cpu"), [_fact_arg(k, v) for k, v in (case.get("fact") or {}).items()],
                       model_path=parsed.user.get("model_path"), system=system)
    try:
        return resolve(system, parsed.user, facts, parsed.sources), None
    except ConflictError as err:
        return None, err


@pytest.mark.parametrize("system, rule_id, mode, case", CASES)
def test_rule_case(system, rule_id, mode, case, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    rule = load_rules(system).by_id().get(rule_id)
    assert rule is not None, f"case names unknown rule {rule_id}"
    config, conflict = _outcome(system, case)
    if rule.is_hard:
        named = conflict is not None and any(rule_id in c.rules for c in conflict.conflicts)
        detail = conflict.text() if conflict else "resolved without conflict"
    elif conflict is not None:
        pytest.fail(f"expected a resolved config, got: {conflict.text()}")
    elif rule.kind in ("warn", "known_bad"):
        named = any(w.startswith(f"[{rule_id}]") for w in config.warnings)
        detail = "; ".join(config.warnings) or "no warnings"
    else:
        named = config.provenance[rule.flag].get("rule") == rule_id
        detail = f"{rule.flag} = {config.values[rule.flag]!r} from {dict(config.provenance[rule.flag])}"
    assert named == (mode == "fires"), f"{rule_id} expected to {'fire' if mode == 'fires' else 'stay quiet'}: {detail}"
    values = config.to_dict()["values"] if config is not None else {}
    for flag, value in (case.get("expect") or {}).items():
        assert config is not None and values[flag] == value, f"{flag}: {detail}"


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_rule_has_a_firing_and_a_quiet_case(system):
    modes = {}
    for param in CASES:
        case_system, rule_id, mode, _ = param.values
        if case_system == system:
            modes.setdefault(rule_id, set()).add(mode)
    missing = [r.id for r in load_rules(system) if modes.get(r.id) != {"fires", "quiet"}]
    assert not missing, f"{len(missing)} {system} rules lack a fires or quiet case: {missing[:20]}"


def test_the_equal_phase_backend_rule_lists_every_canonical_backend():
    """attn.backend.equal_phases carries one literal candidate per backend (prefer candidates are
    literals): a backend added to the catalog but not to the rule would leave typed equal phases
    without an attention backend, and attn.backend.equal_phases_typed would then report a false
    conflict. Aliases arrive as their canonical value and need no candidate."""
    from accord.resolver.api import plan_for

    plan = plan_for("llm")
    flag = plan.catalog["prefill_attention_backend"]
    (rule,) = [r for r in plan.prefer_rules["attention_backend"] if r.id == "attn.backend.equal_phases"]
    aliases = {alias for alias, _ in flag.value_aliases}
    assert {c.value for c in rule.values} == set(flag.choices) - aliases
