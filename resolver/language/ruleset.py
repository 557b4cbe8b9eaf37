"""Rule files: load `rules/<system>/<area>.yaml` into typed, pre-parsed rules.

Six kinds (see rules/README.md): `require` and `conflict` are hard constraints, `default` computes
the value of an unset flag, `prefer` orders candidate values for an unset choice, `warn` attaches a
message, and `known_bad` names a known SGLang issue: a combination that passes resolution but is
publicly reported to hang, crash or produce garbage at run time in the releases it names (a
warning, or a conflict in a strict rule set; `known_issues` reads them as data). Every expression
is parsed here, once, so a malformed rule fails at load time with its file and id, never in the
middle of a resolve.

This module is the entry point (`load_rules`): it finds the rule files, checks each rule's fields
and builds the rule set. The rule classes are in `ruletypes`, derived values and named sets in
`derived`, and the plan cache's form of a rule set in `ruledata`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from accord.resolver.errors import UsageError
from accord.resolver.language import plancache
from accord.resolver.language.catalog import RULES_DIR, SYSTEMS, catalog_files, load_catalog
from accord.resolver.language.derived import DERIVED_FILE, combine, load_derived, parse_at
from accord.resolver.language.expr import Expr, constant
from accord.resolver.language.ruledata import ruleset_from_data, ruleset_to_data
from accord.resolver.language.ruletypes import KINDS, KNOWN_BAD, Candidate, Derived, Rule, RuleSet
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
    KNOWN_BAD: {"when", "message", "releases", "issue", "fixed_by", "symptom"},
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
    (flag, fill_in) pairs of the placeholders, both sorted by flag, and no alternatives.

    A list of such maps declares alternative fixes, best first; each may add `when:` (an
    expression: offered only when it holds) and `note:` (a word for the user, "slower: ...").
    Its flags keep the written order, and the third item lists, per alternative, (pair count,
    when, note, fill_in pairs)."""
    if raw is None:
        return (), (), ()
    if isinstance(raw, list):
        fix, fill_in, alternatives = [], [], []
        for number, item in enumerate(raw, 1):
            if not isinstance(item, dict) or not set(item) - {"when", "note"}:
                raise UsageError(f"{where}: fix alternative {number} must map flag names to values.")
            note = item.get("note", "")
            if not isinstance(note, str):
                raise UsageError(f"{where}: fix alternative {number}: 'note' must be text.")
            when = parse_at(item["when"], where, names, meta) if "when" in item else None
            pairs, own_fill_in = _fix_pairs({k: v for k, v in item.items() if k not in ("when", "note")},
                                            where, names, meta, ordered=True)
            fix += pairs
            fill_in += [pair for pair in own_fill_in if pair[0] not in dict(fill_in)]
            alternatives.append((len(pairs), when, " ".join(note.split()), tuple(own_fill_in)))
        return tuple(fix), tuple(fill_in), tuple(alternatives)
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: 'fix' must map flag names to values (expressions), or be a list of such maps.")
    fix, fill_in = _fix_pairs(raw, where, names, meta)
    return tuple(fix), tuple(fill_in), ()


def _fix_pairs(raw: dict, where: str, names: dict[str, Expr], meta: dict, ordered: bool = False):
    fix, fill_in = [], []
    for flag, spec in (raw.items() if ordered else sorted(raw.items())):
        if isinstance(spec, dict):
            if set(spec) != {"value", "fill_in"} or not isinstance(spec["fill_in"], str) or not spec["fill_in"]:
                raise UsageError(f"{where}: fix {flag!r} as a map needs exactly 'value' (an expression) "
                                 f"and 'fill_in' (what the user must replace the placeholder with).")
            fill_in.append((flag, spec["fill_in"]))
            spec = spec["value"]
        fix.append((flag, parse_at(spec, where, names, meta)))
    return fix, fill_in


# What a known issue does when it strikes (`symptom:` of a known_bad rule).
SYMPTOMS = ("crash", "hang", "wrong-output", "slowdown", "startup-error")
# The derived value holding the release a command is for, named by the known-issues file's
# top-level `release_value:` (rules/<system>/known_issues.yaml; defined in derived.yaml).
RELEASE_VALUE_KEY = "release_value"
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$")
_BOUND = re.compile(r"^(>=|<=|==|>|<)\s*(\S+)$")


def release_key(text: str) -> tuple[int, int, int, int] | None:
    """'0.4.10.post2' -> (0, 4, 10, 2); '0.5.23' -> (0, 5, 23, 0). None for anything else (an rc,
    a dev build, a local tag): a known issue's range is written in released versions only."""
    match = _RELEASE.match(str(text).strip())
    if not match:
        return None
    major, minor, patch, post = match.groups()
    return int(major), int(minor), int(patch), int(post or 0)


def parse_releases(text: Any, where: str) -> tuple[tuple[str, tuple[int, int, int, int]], ...]:
    """A known issue's `releases:` (">=0.4.4.post1, <0.4.8") as (operator, release key) bounds."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"{where}: 'releases' must be the SGLang releases the issue affects, a range "
                         f"such as \">=0.4.4.post1, <0.4.8\" (bounds >=, >, <=, <, == joined by commas).")
    bounds = []
    for part in text.split(","):
        match = _BOUND.match(part.strip())
        key = release_key(match.group(2)) if match else None
        if key is None:
            raise UsageError(
                f"{where}: 'releases' bound {part.strip()!r} is not an operator (>=, >, <=, <, ==) "
                f"followed by an SGLang release such as 0.5.6 or 0.4.10.post2 (no rc or dev builds); "
                f"the whole range was {text!r}.")
        bounds.append((match.group(1), key))
    lows = [k for op, k in bounds if op in (">=", ">", "==")]
    highs = [k for op, k in bounds if op in ("<", "<=", "==")]
    if not highs or not lows:
        raise UsageError(f"{where}: 'releases' {text!r} must bound the range on both sides (a first and a "
                         f"last affected release, or == one release); an issue still open in the newest "
                         f"release checked is written '<=' that release, with the evidence in 'notes'.")
    if not any(release_in_bounds(k, bounds) for low in lows for k in (low, (*low[:3], low[3] + 1))):
        raise UsageError(f"{where}: 'releases' {text!r} holds no release at all; check the bounds.")
    return tuple(bounds)


def release_in_bounds(key: tuple[int, int, int, int] | None, bounds) -> bool:
    """Whether a release key lies inside every bound."""
    if key is None:
        return False
    checks = {">=": key.__ge__, ">": key.__gt__, "<=": key.__le__, "<": key.__lt__, "==": key.__eq__}
    return all(checks[op](bound) for op, bound in bounds)


def release_in(release: str, releases: str) -> bool:
    """Whether SGLang `release` (e.g. '0.4.10.post2') is inside a `releases:` range."""
    return release_in_bounds(release_key(release), parse_releases(releases, "releases"))


def _text(key: tuple[int, int, int, int]) -> str:
    major, minor, patch, post = key
    return f"{major}.{minor}.{patch}" + (f".post{post}" if post else "")


def _bound(op: str, key: tuple[int, int, int, int], release: str) -> str:
    """One bound of a range as a condition on the derived value `release`. `version()` reads the numeric part
    only (a .postN is dropped), so within one base release the post releases are told apart by
    comparing the text ('0.4.4' < '0.4.4.post1' < ... < '0.4.4.post9' in string order)."""
    base = _text((*key[:3], 0))
    if op in (">", "<="):  # > X is >= the next post release; <= X is < it
        op, key = {">": ">=", "<=": "<"}[op], (*key[:3], key[3] + 1)
    if key[3] == 0:
        return f"version({release}) {op} version('{base}')"
    strict = ">" if op == ">=" else "<"
    return (f"(version({release}) {strict} version('{base}') or "
            f"version({release}) == version('{base}') and {release} {op} '{_text(key)}')")


def release_conditions(bounds, release: str) -> list[str]:
    """The rule-language conditions (one a bound) that all hold exactly for the releases inside `bounds`."""
    pairs = [pair for op, key in bounds for pair in ([(">=", key), ("<=", key)] if op == "==" else [(op, key)])]
    return [_bound(op, key, release) for op, key in pairs]


def _urls(value: Any) -> list[str] | None:
    """A URL or a list of URLs, each a GitHub issue or pull request; None when malformed."""
    urls = [value] if isinstance(value, str) else value
    if not isinstance(urls, list) or not urls:
        return None
    ok = all(isinstance(u, str) and u.startswith(REPORT_PREFIX) and ("/issues/" in u or "/pull/" in u)
             for u in urls)
    return urls if ok else None


def affects_text(releases: str, fixed_by: str | None) -> str:
    """The `affects` prose of a known issue, from its range and its fix."""
    fix = f"fixed by {fixed_by}" if fixed_by else "no fix merged as of the releases checked"
    return f"SGLang {releases} ({fix})"


def known_issue_fields(entry: dict, where: str) -> dict:
    """The structured fields of a known issue, checked: releases (text and bounds), issue URLs,
    fixed_by (a URL or None), symptom."""
    bounds = parse_releases(entry.get("releases"), where)
    issues = _urls(entry.get("issue"))
    if issues is None:
        raise UsageError(f"{where}: 'issue' must be the public report(s) the entry comes from, "
                         f"{REPORT_PREFIX}OWNER/REPO/issues/N or .../pull/N (a URL or a list).")
    if "fixed_by" not in entry:
        raise UsageError(f"{where} lacks 'fixed_by': the pull request that fixed it, or null when none is merged.")
    fixed_by = entry["fixed_by"]
    if fixed_by is not None and (_urls(fixed_by) is None or not isinstance(fixed_by, str)):
        raise UsageError(f"{where}: 'fixed_by' must be one pull request URL ({REPORT_PREFIX}OWNER/REPO/pull/N) "
                         f"or null when no fix is merged.")
    if entry.get("symptom") not in SYMPTOMS:
        raise UsageError(f"{where} has symptom {entry.get('symptom')!r}; use one of {', '.join(SYMPTOMS)}.")
    return {"releases": str(entry["releases"]).strip(), "bounds": bounds, "issue": issues,
            "fixed_by": fixed_by, "symptom": entry["symptom"]}


def _conjuncts(when: Any, where: str) -> list[str]:
    """A known issue's trigger: one condition, or a list of conditions that must all hold."""
    parts = [when] if isinstance(when, (str, bool)) else when
    if not isinstance(parts, list) or not parts or not all(isinstance(p, (str, bool)) for p in parts):
        raise UsageError(f"{where}: 'when' must be the trigger, a condition over flags and facts or a "
                         f"list of conditions that must all hold.")
    return [str(p) for p in parts]


def _release_value(doc: dict, name: str) -> str:
    """The derived value a file's known issues compare their ranges with (its `release_value:`)."""
    value = doc.get(RELEASE_VALUE_KEY)
    if not isinstance(value, str) or not value.isidentifier():
        raise UsageError(f"{name}: a file of known issues needs a top-level `{RELEASE_VALUE_KEY}: NAME` naming the "
                         f"derived value that holds the release a command is for (rules/<system>/derived.yaml).")
    return value


def known_issue_name(rule_id: str, part: str) -> str:
    """The name of a derived value the loader makes for a known issue ('bad.x.y', 'releases' ->
    'bad_x_y_releases'): `accord why` and proofs show it with its value."""
    return f"{rule_id.replace('.', '_')}_{part}"


def known_issue_derived(entry: dict, where: str, names: dict[str, Expr], meta: dict,
                        release_value: str) -> list[Derived]:
    """Two named values for a known issue: `<id>_releases` (the command's release is in its range)
    and `<id>_trigger` (its launch setting holds), each the AND of short conditions, so that the
    rule reads `<id>_releases and <id>_trigger` and every condition stays readable."""
    fields = known_issue_fields(entry, where)
    out = []
    for part, conditions, reason in (
            ("releases", release_conditions(fields["bounds"], release_value),
             f"The command is for an SGLang release in {fields['releases']}, where {entry['id']} occurs."),
            ("trigger", _conjuncts(entry.get("when"), where),
             f"The launch setting that triggers known issue {entry['id']}.")):
        name = known_issue_name(entry["id"], part)
        cases = tuple((parse_at("False", where), parse_at(f"not ({c})", where, names, meta)) for c in conditions)
        cases += ((parse_at("True", where), None),)
        item = Derived(id=name, type="bool", cases=cases, reason=reason, expr=combine(name, cases))
        names[name] = item.expr
        out.append(item)
    return out


def _known_bad_entry(entry: dict, where: str) -> dict:
    """A known issue as the fields every rule has: it holds when its two named values do (see
    `known_issue_derived`), so it says nothing for a release outside its range; its issue, fix and
    releases become part of its message and `ref`, so a warning, a strict conflict and `accord why`
    all cite them."""
    fields = known_issue_fields(entry, where)
    _conjuncts(entry.get("when"), where)
    cited = ", ".join(fields["issue"])
    out = {k: v for k, v in entry.items() if k not in ("releases", "issue", "fixed_by", "symptom")}
    out["when"] = " and ".join(known_issue_name(entry["id"], p) for p in ("releases", "trigger"))
    out["message"] = (f"{str(entry['message']).rstrip('.')}. Known issue ({fields['symptom']}) in "
                      f"{affects_text(fields['releases'], fields['fixed_by'])}: {cited}.")
    out["ref"] = "; ".join(filter(None, [cited, fields["fixed_by"] or "", str(entry.get("ref") or "")]))
    return out


def known_issues(system: str, root: Path = RULES_DIR) -> list[dict]:
    """Every known issue of a system as data, in file order: id, symptom, releases, issue, fixed_by,
    message (the entry's own, one line), fix, and the bounds of its range (for `release_in_bounds`)."""
    out = []
    paths = rule_files(system, root)
    for path, documents in zip(paths, read_yaml_files(paths)):
        doc = documents[0] if documents else {}
        for entry in doc.get("rules") or ():
            if entry.get("kind") != KNOWN_BAD:
                continue
            fields = known_issue_fields(entry, f"{path.name}: rule {entry.get('id')!r}")
            out.append({"id": entry["id"], **fields, "message": " ".join(str(entry["message"]).split()),
                        "fix": dict(entry.get("fix") or {}), "file": path.name})
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
    fix, fill_in, fix_alternatives = _fix_hint(entry.get("fix"), where, names, meta)
    seed = entry.get("seed") or ()
    return Rule(
        id=rid, kind=kind, area=area, reason=str(entry.get("reason") or entry.get("message") or ""),
        ref=str(entry.get("ref") or ""),
        when=parse_at(entry["when"], where, names, meta) if "when" in entry else None,
        require=parse_at(entry["require"], where, names, meta) if "require" in entry else None,
        flag=entry.get("flag"),
        value=parse_at(entry["value"], where, names, meta) if "value" in entry else None,
        values=values, message=str(entry.get("message") or ""), fix=fix, fix_fill_in=fill_in,
        fix_alternatives=fix_alternatives,
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
    files = list(zip(paths, read_yaml_files(paths)))
    derived = list(derived)
    for path, documents in files:  # known issues name their release range and trigger first
        doc = (documents[0] if documents else None) or {}
        for entry in doc.get("rules") or ():
            if isinstance(entry, dict) and entry.get("kind") == KNOWN_BAD and isinstance(entry.get("id"), str):
                where = f"{path.name}: rule {entry['id']!r}"
                derived += known_issue_derived(entry, where, names, meta, _release_value(doc, path.name))
    derived = tuple(derived)
    for path, documents in files:
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
