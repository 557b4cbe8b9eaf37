"""The typed forms of rules: `Rule`, `Candidate`, `Derived`, `NamedSet` and the `RuleSet` holding them.

Every layer above the rule files (the solver, explanations, fixes, the matrix, lint) reads rules
through these classes and nothing else, so they live apart from the code that builds them from
YAML (`ruleset`, `derived`) or from the plan cache (`ruledata`): a reader imports the shapes
without the loaders.
"""

from __future__ import annotations

from typing import Any

from accord.resolver.language.expr import Expr

KINDS = ("require", "conflict", "default", "prefer", "warn", "known_bad")
HARD_KINDS = ("require", "conflict")
KNOWN_BAD = "known_bad"


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


class FixAlternative:
    """One of the alternative fixes a rule declares as a `fix:` list: how many consecutive pairs of
    the rule's `fix` it owns, its `when` (None: always), its `note` ("" for none) and its fill-in
    pairs. Equal when declared alike (a `when` compares by its source)."""

    __slots__ = ("count", "when", "note", "fill_in")

    def __init__(self, count: int, when: Expr | None = None, note: str = "",
                 fill_in: tuple[tuple[str, str], ...] = ()):
        self.count = count
        self.when = when
        self.note = note
        self.fill_in = fill_in

    def _key(self) -> tuple:
        return (self.count, None if self.when is None else self.when.source, self.note, self.fill_in)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FixAlternative) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"FixAlternative{self._key()!r}"


class Rule:
    """One rule of a rule file (see rules/README.md for the kinds and their fields).

    `reads_flags`, `reads_facts` and `constrained_flags` are what its expressions read, computed once
    when the rule is built: the solver asks them of every rule on the first solve.
    """

    FIELDS = ("id", "kind", "area", "reason", "ref", "when", "require", "flag", "value", "values",
              "message", "fix", "fix_fill_in", "fix_alternatives", "seed", "file")
    __slots__ = FIELDS + ("reads_flags", "reads_facts", "constrained_flags", "is_hard")

    def __init__(self, id: str, kind: str, area: str, reason: str, ref: str = "",
                 when: Expr | None = None, require: Expr | None = None, flag: str | None = None,
                 value: Expr | None = None, values: tuple[Candidate, ...] = (), message: str = "",
                 fix: tuple[tuple[str, Expr], ...] = (),
                 fix_fill_in: tuple[tuple[str, str], ...] = (),  # fix flags whose value is a placeholder, and what to fill in
                 fix_alternatives: tuple[FixAlternative | tuple, ...] = (),
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
        # A `fix:` written as a list of alternatives (rules/README.md "Fix hints"), in the declared
        # order; (count, when, note, fill_in) tuples are taken too. Empty: `fix` is one hint.
        self.fix_alternatives = tuple(a if isinstance(a, FixAlternative) else FixAlternative(*a)
                                      for a in fix_alternatives)
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
        exprs += [a.when for a in self.fix_alternatives if a.when is not None]
        return exprs

    def fix_hints(self) -> list[tuple[tuple[tuple[str, Expr], ...], Expr | None, str, tuple[tuple[str, str], ...]]]:
        """The rule's fix hints in the declared order: (flag, expression) pairs, `when`, `note`,
        fill-in pairs. A plain `fix:` map is one hint without a condition or a note."""
        if not self.fix_alternatives:
            return [(self.fix, None, "", self.fix_fill_in)] if self.fix else []
        out, start = [], 0
        for a in self.fix_alternatives:
            out.append((self.fix[start:start + a.count], a.when, a.note, a.fill_in))
            start += a.count
        return out



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

