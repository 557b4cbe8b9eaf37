"""The plan cache's form of a rule set: tuples of plain values, and back.

`load_rules` stores a compiled rule set in the plan cache (`plancache`) so a cold `accord resolve`
skips parsing YAML and expressions. The form is tuples of plain values in a fixed field order, with
expressions as `Expr.to_data`; loading links each expression's code to the named values defined
before it, exactly as parsing did. Separate from `ruleset` because it is the one place that must
change in step with the fields of the classes in `ruletypes`, and it reads no files.
"""

from __future__ import annotations

from accord.resolver.language.derived import combine
from accord.resolver.language.expr import Expr, constant
from accord.resolver.language.ruletypes import Candidate, Derived, NamedSet, Rule, RuleSet


def _data(expr: Expr | None) -> tuple | None:
    return None if expr is None else expr.to_data()


def ruleset_to_data(ruleset: RuleSet) -> tuple:
    sets = tuple((s.id, s.values, s.reason) for s in ruleset.sets)
    derived = tuple((d.id, d.type, tuple((_data(v), _data(w)) for v, w in d.cases), d.reason, d.notes,
                     (d.expr.flags, d.expr.facts, d.expr.set_checks, d.expr.names))
                    for d in ruleset.derived)
    rules = tuple(
        (r.id, r.kind, r.area, r.reason, r.ref, _data(r.when), _data(r.require), r.flag, _data(r.value),
         tuple((c.value, _data(c.when)) for c in r.values), r.message,
         tuple((flag, _data(e)) for flag, e in r.fix), r.fix_fill_in,
         tuple((a.count, _data(a.when), a.note, a.fill_in) for a in r.fix_alternatives), r.seed, r.file,
         (r.reads_flags, r.reads_facts, r.constrained_flags))
        for r in ruleset.rules)
    return sets, derived, rules


def ruleset_from_data(system: str, data: tuple) -> RuleSet:
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
                       expr=combine(did, cases, reads))
        derived.append(item)
        names[did] = item.expr
    rules = tuple(
        Rule(id=rid, kind=kind, area=area, reason=reason, ref=ref, when=expr(when), require=expr(require),
             flag=flag, value=expr(value), values=tuple(Candidate(v, expr(w)) for v, w in values),
             message=message, fix=tuple((f, expr(e)) for f, e in fix), fix_fill_in=fill_in,
             fix_alternatives=tuple((count, expr(w), note, alt_fill) for count, w, note, alt_fill in alternatives),
             seed=seed, file=file, reads=reads)
        for rid, kind, area, reason, ref, when, require, flag, value, values, message, fix, fill_in, alternatives,
        seed, file, reads in rules_data)
    return RuleSet(system=system, rules=rules, derived=tuple(derived), sets=tuple(sets))
