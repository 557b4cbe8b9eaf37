"""Rule files: load `rules/<system>/<area>.yaml` into typed, pre-parsed rules.

Six kinds (see rules/README.md): `require` and `conflict` are hard constraints, `default` computes
the value of an unset flag, `prefer` orders candidate values for an unset choice, `warn` attaches a
message, and `known_bad` names a combination that passes resolution but is publicly reported to
hang, crash or produce garbage at run time (a warning, or a conflict in a strict rule set). Every expression is parsed here, once, so a malformed rule fails at load time with its file
and id, never in the middle of a resolve.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accord.resolver.errors import UsageError
from accord.resolver.language import plancache
from accord.resolver.language.catalog import RULES_DIR, SYSTEMS, catalog_files, load_catalog
from accord.resolver.language.expr import Expr, constant, parse
from accord.resolver.language.expr_compiler import ExpressionError
from accord.resolver.language.yamlcache import bulk_load, read_yaml_files

KINDS = ("require", "conflict", "default", "prefer", "warn", "known_bad")
HARD_KINDS = ("require", "conflict")
KNOWN_BAD = "known_bad"
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


# The classes below are plain classes with slots rather than dataclasses: a cold `accord resolve`
# builds hundreds of each from the plan cache, and a dataclass costs a compile at import and a slow
# frozen __init__. Treat instances as read-only.

class Candidate:
    """One value a `prefer` rule offers, with the condition under which it is offered."""

    __slots__ = ("value", "when")

    def __init__(self, value: Any, when: Expr | None = None):
        self.value = value
        self.when = when

    def __repr__(self) -> str:
        return f"Candidate({self.value!r}, when={self.when!r})"


class Rule:
    """One rule of a rule file (see rules/README.md for the kinds and their fields).

    `reads_flags`, `reads_facts` and `constrained_flags` are what its expressions read, computed once
    when the rule is built: the solver asks them of every rule on the first solve.
    """

    FIELDS = ("id", "kind", "area", "reason", "ref", "when", "require", "flag", "value", "values",
              "message", "fix", "fix_fill_in", "seed", "file")
    __slots__ = FIELDS + ("reads_flags", "reads_facts", "constrained_flags", "is_hard")

    def __init__(self, id: str, kind: str, area: str, reason: str, ref: str = "",
                 when: Expr | None = None, require: Expr | None = None, flag: str | None = None,
                 value: Expr | None = None, values: tuple[Candidate, ...] = (), message: str = "",
                 fix: tuple[tuple[str, Expr], ...] = (),
                 fix_fill_in: tuple[tuple[str, str], ...] = (),  # fix flags whose value is a placeholder, and what to fill in
                 seed: tuple[str, ...] = (), file: str = "",
                 reads: tuple[frozenset[str], frozenset[str], frozenset[str]] | None = None):
        self.id = id
        self.kind = kind
        # A plain attribute, not a property: explanations ask it of every rule thousands of times.
        self.is_hard = kind in HARD_KINDS
        self.area = area
        self.reason = reason
        self.ref = ref
        self.when = when
        self.require = require
        self.flag = flag
        self.value = value
        self.values = values
        self.message = message
        self.fix = fix
        self.fix_fill_in = fix_fill_in
        self.seed = seed
        self.file = file
        if reads is None:  # `reads` is given by the plan cache, which stored what this computes
            exprs = self.expressions()
            reads = (frozenset().union(*(e.flags for e in exprs)), frozenset().union(*(e.facts for e in exprs)),
                     frozenset().union(*(e.flags for e in (when, require) if e is not None)))
        # Flags this rule reads (not counting the flag it sets), facts it reads, and the flags a hard
        # rule constrains (the ones in its condition and requirement).
        self.reads_flags, self.reads_facts, self.constrained_flags = reads

    def __repr__(self) -> str:
        return f"Rule({self.id!r}, kind={self.kind!r})"

    def expressions(self) -> list[Expr]:
        exprs = [e for e in (self.when, self.require, self.value) if e is not None]
        exprs += [c.when for c in self.values if c.when is not None]
        exprs += [e for _, e in self.fix]
        return exprs


DERIVED_TYPES = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,),
                 "list": (list, tuple)}


class Derived:
    """A hidden, prompt-less variable (Kconfig style): the first `value` whose `when` holds.

    Rules read it by name like a flag. It is not a solver variable: a reader depends on the flags and
    facts the derived value reads, so solving is unchanged by naming a sub-expression.
    """

    __slots__ = ("id", "type", "cases", "reason", "notes", "expr")

    def __init__(self, id: str, type: str, cases: tuple[tuple[Expr, Expr | None], ...], reason: str,
                 notes: str = "", expr: Expr | None = None):
        self.id = id
        self.type = type
        self.cases = cases      # (value, when); when None = otherwise
        self.reason = reason
        self.notes = notes
        self.expr = expr        # the whole derived value as one expression

    def __repr__(self) -> str:
        return f"Derived({self.id!r})"

    def deciding_case(self, env) -> int | None:
        """Index of the case that gives the value in `env` (None: no case held)."""
        for index, (_, when) in enumerate(self.cases):
            if when is None or when(env):
                return index
        return None


class NamedSet:
    """A named constant set of values (say, the NVIDIA attention backends)."""

    __slots__ = ("id", "values", "reason")

    def __init__(self, id: str, values: tuple, reason: str):
        self.id = id
        self.values = values
        self.reason = reason

    def __repr__(self) -> str:
        return f"NamedSet({self.id!r})"


class RuleSet:
    """A system's rules in the order they are consulted, with its derived values and named sets."""

    __slots__ = ("system", "rules", "derived", "sets")

    def __init__(self, system: str, rules: tuple[Rule, ...], derived: tuple[Derived, ...] = (),
                 sets: tuple[NamedSet, ...] = ()):
        self.system = system
        self.rules = rules
        self.derived = derived
        self.sets = sets

    def __iter__(self):
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def by_id(self) -> dict[str, Rule]:
        return {r.id: r for r in self.rules}


DERIVED_FILE = "derived.yaml"
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


def _expr(text: Any, where: str, names: dict[str, Expr] | None = None, meta: dict | None = None) -> Expr:
    try:
        return parse(text, names, meta)
    except ExpressionError as err:
        raise UsageError(f"{where}: {err}") from None


def _combine(name: str, cases: tuple[tuple[Expr, Expr | None], ...], reads: tuple | None = None) -> Expr:
    """One expression for a derived value: the first case whose condition holds, else None.
    `reads` (flags, facts, set checks, names) is what the plan cache stored of an earlier combine.

    The value is kept in the environment's `named_values` when it has one (the solver's `Env`): a
    derived value is read by many rules and by other derived values (the memory budget reads the
    per-GPU weight size in several cases), and without the memo each read evaluates its whole
    chain again. An environment gives every flag one value for its lifetime, so the memo is never
    stale; an unknown fact is not kept, and is met again by the next read."""
    pairs = [(value._fn, when._fn if when is not None else None) for value, when in cases]

    def evaluate(env):
        memo = getattr(env, "named_values", None)
        if memo is not None and name in memo:
            return memo[name]
        result = None
        for value, when in pairs:
            if when is None or when(env):
                result = value(env)
                break
        if memo is not None:
            memo[name] = result
        return result
    if reads is None:
        parts = [e for value, when in cases for e in (value, when) if e is not None]
        reads = tuple(frozenset().union(*(getattr(e, key) for e in parts))
                      for key in ("flags", "facts", "set_checks", "names"))
    flags, facts, set_checks, names = reads
    return Expr(name, flags, facts, evaluate, set_checks, names)


def _derived_from_yaml(entry: dict, names: dict[str, Expr], path: Path, meta: dict) -> Derived:
    did = entry.get("id")
    where = f"{path.name}: derived value {did!r}"
    if not did or not isinstance(did, str):
        raise UsageError(f"{path}: a derived value has no string 'id'; give each one a unique name.")
    unknown = sorted(set(entry) - {"id", "type", "values", "reason", "notes"})
    if unknown:
        raise UsageError(f"{where} has unknown keys {unknown}; allowed: id, type, values, reason, notes.")
    if entry.get("type") not in DERIVED_TYPES:
        raise UsageError(f"{where} has type {entry.get('type')!r}; use one of {', '.join(DERIVED_TYPES)}.")
    if not entry.get("reason"):
        raise UsageError(f"{where} has no 'reason': say in one line what it means.")
    raw = entry.get("values")
    if not isinstance(raw, list) or not raw or not all(isinstance(c, dict) and "value" in c for c in raw):
        raise UsageError(f"{where}: 'values' must be a list of {{value: ..., when: ...}} pairs.")
    if any("when" not in c for c in raw[:-1]) or any(set(c) - {"value", "when"} for c in raw):
        raise UsageError(f"{where}: every pair but the last needs a 'when' (the last may be the "
                         f"fallback), and a pair has only 'value' and 'when'.")
    cases = tuple((_expr(c["value"], where, names, meta),
                   _expr(c["when"], where, names, meta) if "when" in c else None) for c in raw)
    return Derived(id=did, type=entry["type"], cases=cases, reason=str(entry["reason"]),
                   notes=str(entry.get("notes") or ""), expr=_combine(did, cases))


def load_derived(system: str, root: Path = RULES_DIR,
                 meta: dict | None = None) -> tuple[tuple[Derived, ...], tuple[NamedSet, ...]]:
    """Named sets and derived values of a system, in file order (a name reads only earlier names).
    `meta` is the catalog's choice metadata (`Catalog.choice_metadata`), which `meta(flag).p` reads."""
    path = root / system / DERIVED_FILE
    if not path.exists():
        return (), ()
    documents = read_yaml_files([path])[0]
    doc = documents[0] if documents else {}
    names: dict[str, Expr] = {}
    sets: list[NamedSet] = []
    derived: list[Derived] = []
    for entry in doc.get("sets") or ():
        sid, values = entry.get("id"), entry.get("values")
        if not sid or not isinstance(values, list) or not entry.get("reason"):
            raise UsageError(f"{path.name}: named set {sid!r} needs an 'id', a 'values' list and a 'reason'.")
        if sid in names:
            raise UsageError(f"{path.name}: the name {sid!r} is defined twice.")
        sets.append(NamedSet(sid, tuple(values), str(entry["reason"])))
        names[sid] = constant(sid, tuple(values))
    for entry in doc.get("derived") or ():
        item = _derived_from_yaml(entry, names, path, meta or {})
        if item.id in names:
            raise UsageError(f"{path.name}: the name {item.id!r} is defined twice.")
        derived.append(item)
        names[item.id] = item.expr
    return tuple(derived), tuple(sets)


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
        fix.append((flag, _expr(spec, where, names, meta)))
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
        Candidate(v["value"], _expr(v["when"], where, names, meta) if "when" in v else None) if isinstance(v, dict)
        else Candidate(v)
        for v in entry.get("values", ())
    )
    fix, fill_in = _fix_hint(entry.get("fix"), where, names, meta)
    seed = entry.get("seed") or ()
    return Rule(
        id=rid, kind=kind, area=area, reason=str(entry.get("reason") or entry.get("message") or ""),
        ref=str(entry.get("ref") or ""),
        when=_expr(entry["when"], where, names, meta) if "when" in entry else None,
        require=_expr(entry["require"], where, names, meta) if "require" in entry else None,
        flag=entry.get("flag"),
        value=_expr(entry["value"], where, names, meta) if "value" in entry else None,
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
                return _ruleset_from_data(system, data)
            except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                pass  # an entry that unmarshals but is not a rule set: build it again
        ruleset = _read_rules(system, root)
    plancache.store(entry, _ruleset_to_data(ruleset))
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


# -- the plan cache's form of a rule set ---------------------------------------------------------------
# Tuples of plain values in a fixed field order; expressions as `Expr.to_data`. Loading links each
# expression's code to the named values defined before it, exactly as parsing did.

def _data(expr: Expr | None) -> tuple | None:
    return None if expr is None else expr.to_data()


def _ruleset_to_data(ruleset: RuleSet) -> tuple:
    sets = tuple((s.id, s.values, s.reason) for s in ruleset.sets)
    derived = tuple((d.id, d.type, tuple((_data(v), _data(w)) for v, w in d.cases), d.reason, d.notes,
                     (d.expr.flags, d.expr.facts, d.expr.set_checks, d.expr.names))
                    for d in ruleset.derived)
    rules = tuple(
        (r.id, r.kind, r.area, r.reason, r.ref, _data(r.when), _data(r.require), r.flag, _data(r.value),
         tuple((c.value, _data(c.when)) for c in r.values), r.message,
         tuple((flag, _data(e)) for flag, e in r.fix), r.fix_fill_in, r.seed, r.file,
         (r.reads_flags, r.reads_facts, r.constrained_flags))
        for r in ruleset.rules)
    return sets, derived, rules


def _ruleset_from_data(system: str, data: tuple) -> RuleSet:
    sets_data, derived_data, rules_data = data
    names: dict[str, Expr] = {}

    def expr(item: tuple | None) -> Expr | None:
        return None if item is None else Expr.from_data(item, names)

    sets = []
    for sid, values, reason in sets_data:
        sets.append(NamedSet(sid, values, reason))
        names[sid] = constant(sid, values)
    derived = []
    for did, dtype, cases_data, reason, notes, reads in derived_data:
        cases = tuple((expr(v), expr(w)) for v, w in cases_data)
        item = Derived(id=did, type=dtype, cases=cases, reason=reason, notes=notes,
                       expr=_combine(did, cases, reads))
        derived.append(item)
        names[did] = item.expr
    rules = tuple(
        Rule(id=rid, kind=kind, area=area, reason=reason, ref=ref, when=expr(when), require=expr(require),
             flag=flag, value=expr(value), values=tuple(Candidate(v, expr(w)) for v, w in values),
             message=message, fix=tuple((f, expr(e)) for f, e in fix), fix_fill_in=fill_in, seed=seed,
             file=file, reads=reads)
        for rid, kind, area, reason, ref, when, require, flag, value, values, message, fix, fill_in, seed, file,
        reads in rules_data)
    return RuleSet(system=system, rules=rules, derived=tuple(derived), sets=tuple(sets))
