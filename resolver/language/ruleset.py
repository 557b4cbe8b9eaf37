"""Rule files: load `rules/<system>/<area>.yaml` into typed, pre-parsed rules.

Six kinds (see rules/README.md): `require` and `conflict` are hard constraints, `default` computes
the value of an unset flag, `prefer` orders candidate values for an unset choice, `warn` attaches a
message, and `known_bad` names a combination that passes resolution but is publicly reported to
hang, crash or produce garbage at run time (a warning, or a conflict in a strict rule set). Every expression is parsed here, once, so a malformed rule fails at load time with its file
and id, never in the middle of a resolve.

This module is the entry point (`load_rules`): it finds the rule files, checks each rule's fields
and builds the rule set. The rule classes are in `ruletypes`, derived values and named sets in
`derived`, and the plan cache's form of a rule set in `ruledata`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accord.resolver.errors import UsageError
from accord.resolver.language import plancache
from accord.resolver.language.catalog import RULES_DIR, SYSTEMS, catalog_files, load_catalog
from accord.resolver.language.derived import DERIVED_FILE, load_derived, parse_at
from accord.resolver.language.expr import Expr, constant
from accord.resolver.language.ruledata import ruleset_from_data, ruleset_to_data
from accord.resolver.language.ruletypes import KINDS, KNOWN_BAD, Candidate, Rule, RuleSet
from accord.resolver.language.yamlcache import bulk_load, read_yaml_files

# A public report is a GitHub issue or pull request of the project whose runtime misbehaves.
REPORT_PREFIX = "https://github.com/"
_COMMON_KEYS = {"id", "kind", "when", "reason", "ref", "seed", "fix", "notes"}
_KIND_KEYS = {
    "require": {"require"},
    "conflict": set(),
    "default": {"flag", "value"},
    "prefer": {"flag", "values"},
    "warn": {"message"},
    KNOWN_BAD: {"when", "message", "report", "affects"},
}

UPSTREAM_SPELLINGS_FILE = "upstream_spellings.yaml"
# What `accord launch` knows of upstream's command line (resolver/commandline/emit.py): data, not rules.
UPSTREAM_PARSER_FILE = "upstream_parser.yaml"
UPSTREAM_LAUNCH_FILE = "upstream_launch.yaml"
NOT_RULE_FILES = ("coverage.yaml", DERIVED_FILE, UPSTREAM_SPELLINGS_FILE, UPSTREAM_PARSER_FILE, UPSTREAM_LAUNCH_FILE)


def rule_files(system: str, root: Path = RULES_DIR) -> list[Path]:
    """Rule files of a system: every YAML beside the catalog except the catalog and coverage notes."""
    root = root / system
    return sorted(p for p in root.glob("*.yaml")
                  if not p.name.startswith("flags") and p.name not in NOT_RULE_FILES)


def _fix_hint(raw: Any, where: str, names: dict[str, Expr], meta: dict):
    """A rule's `fix:` map: flag -> expression, or -> {value: expression, fill_in: text} for a
    placeholder the user must replace (a host address, say). Returns (flag, expr) pairs and the
    (flag, fill_in) pairs of the placeholders, both sorted by flag."""
    if raw is None:
        return (), ()
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: 'fix' must map flag names to values (expressions).")
    fix, fill_in = [], []
    for flag, spec in sorted(raw.items()):
        if isinstance(spec, dict):
            if set(spec) != {"value", "fill_in"} or not isinstance(spec["fill_in"], str) or not spec["fill_in"]:
                raise UsageError(f"{where}: fix {flag!r} as a map needs exactly 'value' (an expression) "
                                 f"and 'fill_in' (what the user must replace the placeholder with).")
            fill_in.append((flag, spec["fill_in"]))
            spec = spec["value"]
        fix.append((flag, parse_at(spec, where, names, meta)))
    return tuple(fix), tuple(fill_in)


def _known_bad_entry(entry: dict, where: str) -> dict:
    """A known-bad rule as the fields every rule has: the report and the affected versions become
    part of its message and its `ref`, so a warning, a strict conflict and `accord why` all cite them."""
    report, affects = entry.get("report"), entry.get("affects")
    reports = [report] if isinstance(report, str) else report
    if not reports or not all(isinstance(r, str) and r.startswith(REPORT_PREFIX) for r in reports):
        raise UsageError(f"{where}: 'report' must be the public report(s) it comes from, "
                         f"{REPORT_PREFIX}OWNER/REPO/issues/N (a string or a list).")
    if not isinstance(affects, str) or not affects.strip():
        raise UsageError(f"{where}: 'affects' must name the SGLang versions the report covers, e.g. '0.4.10'.")
    cited = ", ".join(reports)
    out = dict(entry)
    out["message"] = f"{str(entry['message']).rstrip('.')}. Reported for SGLang {affects}: {cited}."
    out["ref"] = "; ".join(filter(None, [cited, str(entry.get("ref") or "")]))
    for key in ("report", "affects"):
        del out[key]
    return out


def strict(ruleset: RuleSet) -> RuleSet:
    """The rule set with every known-bad combination refused (a conflict citing its report), for
    `accord resolve --strict` and the matrix's rows."""
    if not any(rule.kind == KNOWN_BAD for rule in ruleset):
        return ruleset
    rules = tuple(
        Rule(id=r.id, kind="conflict", area=r.area, reason=r.message, ref=r.ref, when=r.when,
             fix=r.fix, fix_fill_in=r.fix_fill_in, seed=r.seed, file=r.file)
        if r.kind == KNOWN_BAD else r for r in ruleset.rules)
    return RuleSet(system=ruleset.system, rules=rules, derived=ruleset.derived, sets=ruleset.sets)


def _rule_from_yaml(entry: dict, area: str, path: Path, names: dict[str, Expr], meta: dict) -> Rule:
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
    if kind == KNOWN_BAD:
        entry = _known_bad_entry(entry, where)
    values = tuple(
        Candidate(v["value"], parse_at(v["when"], where, names, meta) if "when" in v else None) if isinstance(v, dict)
        else Candidate(v)
        for v in entry.get("values", ())
    )
    fix, fill_in = _fix_hint(entry.get("fix"), where, names, meta)
    seed = entry.get("seed") or ()
    return Rule(
        id=rid, kind=kind, area=area, reason=str(entry.get("reason") or entry.get("message") or ""),
        ref=str(entry.get("ref") or ""),
        when=parse_at(entry["when"], where, names, meta) if "when" in entry else None,
        require=parse_at(entry["require"], where, names, meta) if "require" in entry else None,
        flag=entry.get("flag"),
        value=parse_at(entry["value"], where, names, meta) if "value" in entry else None,
        values=values, message=str(entry.get("message") or ""), fix=fix, fix_fill_in=fill_in,
        seed=tuple([seed] if isinstance(seed, str) else seed), file=path.name,
    )


def plan_sources(system: str, root: Path = RULES_DIR) -> list[Path]:
    """The files a compiled rule set depends on: derived values, rule files and the catalog (its
    choice metadata is compiled into the code of `meta(flag).prop`), so editing any of them rebuilds it."""
    derived_file = root / system / DERIVED_FILE
    return ([derived_file] if derived_file.exists() else []) + rule_files(system, root) + catalog_files(system, root)


def load_rules(system: str, root: Path = RULES_DIR) -> RuleSet:
    """A system's rule set, from the plan cache when its files are unchanged (see `plancache`)."""
    if system not in SYSTEMS:
        raise UsageError(f"unknown system {system!r}; use one of: {', '.join(SYSTEMS)}.")
    entry = plancache.entry_path(system, plan_sources(system, root))
    with bulk_load():
        data = plancache.load(entry)
        if data is not None:
            try:
                return ruleset_from_data(system, data)
            except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                pass  # an entry that unmarshals but is not a rule set: build it again
        ruleset = _read_rules(system, root)
    plancache.store(entry, ruleset_to_data(ruleset))
    return ruleset


def _read_rules(system: str, root: Path) -> RuleSet:
    """Parse and compile a system's rule files (derived values and sets first)."""
    meta = load_catalog(system, root).choice_metadata() if catalog_files(system, root) else {}
    derived, sets = load_derived(system, root, meta)
    names = {s.id: constant(s.id, s.values) for s in sets} | {d.id: d.expr for d in derived}
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
            rule = _rule_from_yaml(entry, area, path, names, meta)
            if rule.id in seen:
                raise UsageError(f"rule id {rule.id!r} is used twice ({seen[rule.id]} and {path.name}).")
            seen[rule.id] = path.name
            into.append(rule)
    return RuleSet(system=system, rules=tuple(first + rules), derived=derived, sets=sets)
