"""`accord rules --lint`: find rule-set mistakes before a user does.

It lives beside the `rules` command, not in the rule language: its preset check asks the whole
resolver (a conflict explained), which the language layer underneath must not import.

Checks, each a function returning problems as strings:
- names: every flag a rule reads or sets is in the catalog, every fact is in the fact schema;
- values: every literal a rule compares a flag with, offers as a candidate, or sets, is in that
  flag's domain (a typo like `attention_backend == 'fa-3'` would make a rule that never fires);
- derived: derived values and named sets shadow no flag and read only known names;
- choice metadata: a literal compared with `meta(flag).prop` is a value that property takes, and
  every declared property is read by some rule (an unknown flag or property in `meta()` already
  fails when the rules load, naming it);
- governance: a flag is governed by `prefer` rules or by `default` rules, not both;
- cycles: no default depends on itself through other defaults;
- presets: with no user flags, every fact preset has a legal configuration;
- readability: an expression is at most 160 characters with at most one conditional, a reason is at
  most 200 characters and cites no source lines (those go to `notes:`), and every rule id starts
  with a prefix its file declares. There is no exception list: a long condition names its parts
  in derived.yaml.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, Iterable

import networkx as nx

from accord.resolver.explaining.diagnose import find_conflicts
from accord.resolver.language.catalog import RULES_DIR, Catalog
from accord.resolver.language.expr import Expr
from accord.resolver.language.expr_compiler import META, meta_read
from accord.resolver.language.graph import build_graph
from accord.resolver.language.ruleset import rule_files
from accord.resolver.language.ruletypes import RuleSet
from accord.resolver.language.yamlcache import read_yaml_files
from accord.resolver.solving.solve import Plan

MAX_EXPRESSION_CHARS = 160
MAX_CONDITIONALS = 1
MAX_REASON_CHARS = 200
# A source citation (`L1097`, `args.py`) in a reason: archaeology, which belongs in `notes:`.
_CITATION = re.compile(r"\bL\d{3,}\b|\b\w+\.py\b")
# Words about where a rule came from rather than about the user's machine ("the seed says ..."):
# a user never saw the seed, so they read as noise; the history belongs in `notes:`.
_ARCHAEOLOGY = re.compile(r"\bthe seed\b|\bseed's\b", re.IGNORECASE)


def check_names(catalog: Catalog, ruleset: RuleSet, fact_keys: Iterable[str]) -> list[str]:
    fact_keys = set(fact_keys)
    problems = []
    for rule in ruleset:
        checked = set().union(*(e.set_checks for e in rule.expressions()))
        for name in sorted(rule.reads_flags | checked | ({rule.flag} if rule.flag else set())
                           | {f for f, _ in rule.fix}):
            if name not in catalog:
                problems.append(f"{rule.file}: rule {rule.id} names unknown flag {name!r}")
        for key in sorted(rule.reads_facts):
            if key not in fact_keys and not key.startswith("packages."):
                problems.append(f"{rule.file}: rule {rule.id} reads unknown fact {key!r}")
    return problems


def _literal_comparisons(expr: Expr, sets: dict[str, tuple] | None = None) -> list[tuple[str, Any]]:
    """(flag, literal) pairs from `flag == lit`, `flag != lit`, `flag in (lits)` and `flag in
    named_set` in an expression."""
    if expr.tree is None:
        return []
    sets = sets or {}
    pairs = []
    for node in ast.walk(expr.tree):
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            continue
        left, right, op = node.left, node.comparators[0], node.ops[0]
        if isinstance(left, ast.Name) and left.id in expr.flags:
            if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant):
                pairs.append((left.id, right.value))
            elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                pairs += [(left.id, e.value) for e in right.elts if isinstance(e, ast.Constant)]
            elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, ast.Name) and right.id in sets:
                pairs += [(left.id, value) for value in sets[right.id]]
    return pairs


def check_values(catalog: Catalog, ruleset: RuleSet) -> list[str]:
    problems = []
    sets = {s.id: s.values for s in ruleset.sets}
    for rule in ruleset:
        pairs = [p for e in rule.expressions() for p in _literal_comparisons(e, sets)]
        if rule.kind == "prefer":
            pairs += [(rule.flag, c.value) for c in rule.values]
        if rule.kind == "default" and rule.value is not None and not (rule.value.flags or rule.value.facts or rule.value.set_checks):
            pairs.append((rule.flag, rule.value(None)))
        for name, value in pairs:
            if name not in catalog:
                continue
            flag = catalog[name]
            domain = flag.finite_domain
            if domain is not None and value not in domain and not flag.extensible:
                problems.append(f"{rule.file}: rule {rule.id} uses {name} = {value!r}, which is not one of "
                                f"its values {list(domain)}; the rule can never fire as written")
    return problems


def check_derived(catalog: Catalog, ruleset: RuleSet, fact_keys: Iterable[str]) -> list[str]:
    """Derived values and named sets: no name shadows a flag; what they read exists and is in domain."""
    fact_keys = set(fact_keys)
    problems = [f"derived.yaml: the name {item.id!r} is also a flag; rename the derived value or set"
                for item in (*ruleset.sets, *ruleset.derived) if item.id in catalog]
    for item in ruleset.derived:
        for name in sorted(item.expr.flags | item.expr.set_checks):
            if name not in catalog:
                problems.append(f"derived.yaml: {item.id} names unknown flag {name!r}")
        for key in sorted(item.expr.facts):
            if key not in fact_keys and not key.startswith("packages."):
                problems.append(f"derived.yaml: {item.id} reads unknown fact {key!r}")
        exprs = [e for case in item.cases for e in case if e is not None]
        sets = {s.id: s.values for s in ruleset.sets}
        for name, value in (p for e in exprs for p in _literal_comparisons(e, sets)):
            domain = catalog[name].finite_domain if name in catalog else None
            if domain is not None and value not in domain and not catalog[name].extensible:
                problems.append(f"derived.yaml: {item.id} uses {name} = {value!r}, which is not one of "
                                f"its values {list(domain)}")
    return problems


def _meta_node(node: ast.AST) -> tuple[str, str] | None:
    """`meta(flag).prop` in a tree -> (flag, prop)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call):
        call = node.value
        if isinstance(call.func, ast.Name) and call.func.id == META and len(call.args) == 1 \
                and isinstance(call.args[0], ast.Name):
            return call.args[0].id, node.attr
    return None


def _constants(node: ast.AST) -> list[Any] | None:
    """The literal(s) a comparison operand holds: one constant, or a tuple/list/set of them."""
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(isinstance(e, ast.Constant) for e in node.elts):
        return [e.value for e in node.elts]
    return None


def _meta_lists(ruleset: RuleSet) -> dict[str, list[tuple[str, str]]]:
    """Derived values that are a tuple of metadata reads (`(meta(a).vendor, meta(b).vendor)`), so
    `'x' in that_name` is checked like a comparison with each read."""
    found = {}
    for item in ruleset.derived:
        if len(item.cases) == 1 and item.cases[0][1] is None and item.cases[0][0].tree is not None:
            tree = item.cases[0][0].tree
            reads = [_meta_node(e) for e in tree.elts] if isinstance(tree, (ast.Tuple, ast.List)) else []
            if reads and all(reads):
                found[item.id] = reads
    return found


def _meta_compared(expr: Expr, lists: dict[str, list[tuple[str, str]]]) -> list[tuple[str, str, Any, bool]]:
    """(flag, prop, literal, as_element) for each literal an expression compares a metadata read
    with; as_element: the literal is asked to be an element of the (list) property's value."""
    if expr.tree is None:
        return []
    out = []
    for node in ast.walk(expr.tree):
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            continue
        left, right, op = node.left, node.comparators[0], node.ops[0]
        if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
            continue
        membership = isinstance(op, (ast.In, ast.NotIn))
        read, literals = _meta_node(left), _constants(right)
        if read and literals is not None:   # meta(f).p == 'x', meta(f).p in ('x', 'y')
            out += [(*read, v, False) for v in literals]
            continue
        read, literals = _meta_node(right), _constants(left)
        if read and literals is not None:   # 'x' == meta(f).p, 16 in meta(f).page_sizes
            out += [(*read, v, membership) for v in literals]
        elif membership and isinstance(right, ast.Name) and right.id in lists and literals is not None:
            out += [(*r, v, False) for r in lists[right.id] for v in literals]   # 'x' in reads_list
    return out


def check_choice_meta(catalog: Catalog, ruleset: RuleSet) -> list[str]:
    """Literals compared with `meta(flag).prop` are values the property takes; no property is dead."""
    problems = []
    lists = _meta_lists(ruleset)
    items = [(f"{r.file}: rule {r.id}", r.expressions()) for r in ruleset]
    items += [(f"derived.yaml: {d.id}", [e for case in d.cases for e in case if e is not None])
              for d in ruleset.derived]
    read: set[tuple[str, str]] = set()
    for where, exprs in items:
        for expr in exprs:
            read.update(r for r in map(meta_read, expr.names) if r)
            for flag, prop, literal, as_element in _meta_compared(expr, lists):
                values = catalog[flag].meta_property(prop)
                taken = [values.default] + [v for _, v in values.values]
                if as_element:
                    taken = [e for v in taken if isinstance(v, tuple) for e in v]
                if literal not in taken:
                    shown = sorted({"null" if v is None else str(v) for v in taken})
                    problems.append(f"{where} compares {META}({flag}).{prop} with {literal!r}, which no choice "
                                    f"of {flag} has (its values: {', '.join(shown)}); the comparison is constant")
    seen: list[tuple] = []
    for flag in catalog:
        if not flag.choice_meta or flag.choice_meta in seen:
            continue
        seen.append(flag.choice_meta)
        sharing = [f.name for f in catalog if f.choice_meta == flag.choice_meta]
        for prop in flag.choice_meta:
            if not any((name, prop.name) in read for name in sharing):
                problems.append(f"catalog: choice_meta property {prop.name!r} of {flag.name} is read by no rule; "
                                f"remove it or read it as {META}({flag.name}).{prop.name}")
    return problems


def check_governance(ruleset: RuleSet) -> list[str]:
    prefer = {r.flag for r in ruleset if r.kind == "prefer"}
    default = {r.flag for r in ruleset if r.kind == "default"}
    return [f"flag {name!r} has both prefer and default rules; use one kind per flag"
            for name in sorted(prefer & default)]


def check_cycles(catalog: Catalog, ruleset: RuleSet) -> list[str]:
    graph = build_graph(catalog, ruleset)
    if nx.is_directed_acyclic_graph(graph):
        return []
    return ["cycle among defaults: " + " -> ".join(cycle) for cycle in nx.simple_cycles(graph)][:10]


def check_presets(plan: Plan, presets: dict[str, dict]) -> list[str]:
    problems = []
    for name in sorted(presets):
        outcome = plan.solve({}, presets[name])
        if not outcome.satisfiable:
            rules = sorted({r for c in find_conflicts(plan, {}, presets[name]) for r in c.rules})
            problems.append(f"preset {name}: the catalog defaults have no legal configuration "
                            f"(rules {', '.join(rules) or '?'})")
    return problems


def expression_problem(expr: Expr) -> str | None:
    """Why an expression is too hard to read (too long, or nested conditionals), or None."""
    if expr.tree is None:
        return None
    length = len(" ".join(expr.source.split()))
    conditionals = sum(isinstance(node, ast.IfExp) for node in ast.walk(expr.tree))
    if length > MAX_EXPRESSION_CHARS:
        return (f"an expression of {length} characters (at most {MAX_EXPRESSION_CHARS}); "
                f"name its parts in derived.yaml")
    if conditionals > MAX_CONDITIONALS:
        return (f"an expression with {conditionals} conditionals (at most {MAX_CONDITIONALS}); "
                f"use a derived value with ordered value/when pairs")
    return None


def reason_problem(reason: str) -> str | None:
    """Why a reason is not a short plain sentence for a user, or None."""
    length = len(" ".join(reason.split()))
    if length > MAX_REASON_CHARS:
        return f"a reason of {length} characters (at most {MAX_REASON_CHARS}); move history to `notes:`"
    if _CITATION.search(reason):
        return f"a reason citing source ({_CITATION.search(reason).group()!r}); move it to `notes:` or `ref:`"
    if _ARCHAEOLOGY.search(reason):
        return f"a reason about the rule's origin ({_ARCHAEOLOGY.search(reason).group()!r}); move it to `notes:`"
    return None


def readability_problems(ruleset: RuleSet) -> dict[str, list[str]]:
    """Rule or derived-value id -> what makes it hard to read (ids with no problem are left out)."""
    found: dict[str, list[str]] = {}
    # A warn rule without a reason of its own reads its message, which may be longer.
    items = [(r.id, r.file, r.expressions(), "" if r.kind == "warn" and r.reason == r.message else r.reason)
             for r in ruleset]
    items += [(d.id, "derived.yaml", [e for case in d.cases for e in case if e is not None], d.reason)
              for d in ruleset.derived]
    for item_id, file, exprs, reason in items:
        problems = sorted({p for p in map(expression_problem, exprs) if p})
        if reason_problem(reason):
            problems.append(reason_problem(reason))
        if problems:
            found[item_id] = [f"{file}: {item_id} has {p}" for p in problems]
    return found


def check_readability(ruleset: RuleSet) -> list[str]:
    """Readability limits of every rule and derived value, in id order."""
    found = readability_problems(ruleset)
    return [p for item_id in sorted(found) for p in found[item_id]]


def _prefixes(doc: dict) -> tuple[str, ...]:
    declared = doc.get("prefix")
    if isinstance(declared, str):
        return (declared,)
    if isinstance(declared, list) and declared and all(isinstance(p, str) for p in declared):
        return tuple(declared)
    return ()


def check_prefixes(ruleset: RuleSet, root: Path = RULES_DIR) -> list[str]:
    """Each rule file declares the id prefix(es) of its rules, and no two files share one, so an id
    says which file holds it."""
    problems = []
    owner: dict[str, str] = {}
    paths = rule_files(ruleset.system, root)
    for path, documents in zip(paths, read_yaml_files(paths)):
        doc = (documents[0] if documents else None) or {}
        prefixes = _prefixes(doc)
        if not prefixes:
            problems.append(f"{path.name}: declares no id prefix; add a top-level `prefix: <area>.` line")
            continue
        for prefix in prefixes:
            if prefix in owner:
                problems.append(f"{path.name}: prefix {prefix!r} is also declared by {owner[prefix]}")
            owner.setdefault(prefix, path.name)
        for entry in doc.get("rules") or ():
            rid = str(entry.get("id"))
            if not rid.startswith(prefixes):
                problems.append(f"{path.name}: rule {rid} does not start with the file's prefix "
                                f"{' or '.join(prefixes)}")
    return problems


def lint(catalog: Catalog, ruleset: RuleSet, fact_keys: Iterable[str], presets: dict[str, dict],
         root: Path = RULES_DIR) -> list[str]:
    """Every problem found, in a stable order; an empty list means the rule set is clean."""
    problems = check_names(catalog, ruleset, fact_keys)
    problems += check_values(catalog, ruleset)
    problems += check_derived(catalog, ruleset, fact_keys)
    problems += check_choice_meta(catalog, ruleset)
    problems += check_governance(ruleset)
    problems += check_cycles(catalog, ruleset)
    problems += check_prefixes(ruleset, root)
    problems += check_readability(ruleset)
    if not problems:
        problems += check_presets(Plan(catalog, ruleset), presets)
    return problems
