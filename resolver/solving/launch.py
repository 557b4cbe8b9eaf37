"""A launch and its answers: every question Accord asks about a command is asked of a `Launch`.

`Launch(plan, user, facts)` is one command. Its answers are attributes computed on first use and
kept for the object's life: the verdict of each hard rule that reads no decision, the decisions the
solver makes, whether it is satisfiable, the warnings that fire, what a subset of the rules says.

Explanations, fixes, the dry-run, the CI matrix and `tune` ask about many commands that differ from
one command in a few flags. `launch.changed(values)` and `launch.pinned(pins)` return such a
command as a child `Launch` that answers from its parent: only what the change reaches, through the
plan's dependency graph (resolver/solving/depgraph.py), is computed again.

- A changed child (a fix applied, a conflict's flags dropped) shares the parent's decision-free
  verdicts and derived values that the changed flags cannot reach; a broken rule the change leaves
  alone proves it unsatisfiable with no solve; decision groups that read nothing the change reaches
  keep the parent's decisions; warnings are read again only for rules whose inputs may differ.
- A pinned child (a dry-run value, a matrix row, a `tune` candidate) is judged by the parent's
  `Pinning` (resolver/solving/pinning.py): the resolved values with the pins swapped in, the rules
  the pins can reach, and the solver only for the rules linked to them.

What a rule reads is taken widely (every expression of a rule, `is_set` questions too), so sharing
is never wrong, only sometimes more cautious than needed. Each answer is what a plain question to
the core about that command gives (its `plan.decisions`, `plan.satisfiable`, the warnings of its
`plan.solve`); tests/test_solver_queries.py holds every answer, with the cache layer on and off, to
those full solves (tests/reference_solver.py, the oracle). `Launches` keeps the launches of one
question (an explanation: one plan, one set of facts) so each command is solved once.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable, Mapping

from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving.depgraph import Layout, Reach, layout_of
from accord.resolver.solving.env import Assignment, Env, RelaxedValues, Shared, check, holds
from accord.resolver.solving.pinning import Pinning
from accord.resolver.solving.quickxplain import quickxplain
from accord.resolver.solving.solve import Plan


# `Launch(resolved=...)` left out: the launch resolves itself when its pinned children first ask.
SOLVE_ON_DEMAND: Any = object()


@dataclasses.dataclass
class _ChildAnswer:
    """What a changed child's parent found: the child's decisions, the flags whose value may differ
    from the parent's under the parent's decisions (None: any of them), its decision-reading rules,
    and whether every one of them is known to hold under these decisions."""

    decided: Assignment
    differ: frozenset[str] | None
    constrained: frozenset[int]
    held: bool = False


class Launch:
    """One command (plan, user values, facts) and its answers, each computed on first use."""

    def __init__(self, plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any],
                 family: Launches | None = None, resolved: Mapping[str, Any] | None = SOLVE_ON_DEMAND):
        # A copy: callers go on changing theirs (find_conflicts drops the flags of each conflict).
        self.user = RelaxedValues(user, user.relaxed) if isinstance(user, RelaxedValues) else dict(user)
        self.plan, self.facts, self.family = plan, facts, family
        # The values a resolve of it gave, when the caller has them (None: it does not resolve).
        self._resolved = resolved
        self._parent: Launch | None = None
        self._change: frozenset[str] = frozenset()  # a changed child: the flags that differ from its parent's
        self._pins: dict[str, Any] | None = None  # a pinned child: the pins on its parent
        self._all: tuple | None = None            # (its decisions, all decision-reading rules held)
        self._decided: tuple | None = None        # (decisions under its decision-reading rules alone, all held)
        self._broken: set[int] | None = None      # ids of the broken decision-free rules
        self._final: dict[int, Any] | None = None  # id(rule) -> its reading under those decisions
        self._rejecters: list[Rule] = []          # rules that proved children unsatisfiable, latest first
        self._reached: dict[frozenset, tuple] = {}  # changed flags -> (flags reached, rules reading them)
        self._warned: tuple | None = None         # (decisions, warnings) of the command itself

    # -- children ------------------------------------------------------------------------------

    def changed(self, values: Mapping[str, Any], flags: Iterable[str] | None = None) -> Launch:
        """The command `values`, which differs from this one in `flags` (set, unset or given another
        value; by default every flag whose value differs), answering from this one."""
        child = Launch(self.plan, values, self.facts, self.family)
        child._parent = self
        if flags is None:
            missing = object()
            flags = {k for k in {*values, *self.user} if values.get(k, missing) != self.user.get(k, missing)}
        child._change = frozenset(flags)
        return child

    def pinned(self, pins: Mapping[str, Any]) -> Launch:
        """This command with `pins` set on top, judged by this one's `Pinning`."""
        child = Launch(self.plan, {**self.user, **pins}, self.facts, self.family)
        child._parent, child._pins = self, dict(pins)
        return child

    # -- answers -------------------------------------------------------------------------------

    @property
    def decisions(self) -> Assignment | None:
        """The decisions `plan.decisions(user, facts)` makes (None: unsatisfiable)."""
        if self._pins is not None:
            return self.plan.decisions(self.user, self.facts)
        if self._parent is not None:
            found = self._from_parent
            return None if found is None else found.decided
        if self._all is None:
            if any(self.verdict(rule) is False for rule in self.plan.hard_rules):
                self._all = (None, False)
            else:
                found = _preferred(self.plan, self.user, self.facts, self._layout.groups)
                self._all = (found, True) if found is not None else (self.plan.decisions(self.user, self.facts), False)
        return self._all[0]

    @property
    def satisfiable(self) -> bool:
        """Whether some configuration of the command holds every hard rule (`plan.satisfiable`)."""
        if self._pins is not None:
            return self._parent._pinning.legal(self._pins)
        return self.decisions is not None

    @functools.cached_property
    def warnings(self) -> frozenset[str]:
        """Ids of the warn rules that fire, as `plan.solve` and a pass over the warn rules give them
        (none for an unsatisfiable command, or one failing `solve`'s final check)."""
        if self._parent is not None and self._pins is None:
            found = self._from_parent
            if found is None:
                return frozenset()
            if found.differ is not None:
                return frozenset(self._parent._warnings(self.user, found))
            return self._parent.sibling(self.user).own_warnings(found.decided)
        decided = self.decisions
        return frozenset() if decided is None else self.own_warnings(decided)

    @property
    def exclusions(self) -> list[tuple[Rule, ...]] | None:
        """None when legal; else groups of rules, each unsatisfiable by itself with the pins."""
        pinning, pins = self._judged_by()
        return pinning.exclusions(pins)

    @property
    def first_exclusion(self) -> list[tuple[Rule, ...]] | None:
        """None when legal; else at most one group of `exclusions` (none when no single proof is at
        hand): cheaper, for searches that only need to know whether and roughly why."""
        pinning, pins = self._judged_by()
        return pinning.first_exclusion(pins)

    @property
    def excluded_by(self) -> tuple[Rule, ...] | None:
        """None when legal, else the rules of every exclusion, each once."""
        groups = self.exclusions
        return None if groups is None else tuple(dict.fromkeys(r for g in groups for r in g))

    @property
    def environment(self) -> Env:
        """The pinned command's values as the legality check saw them (see `Pinning.environment`)."""
        pinning, pins = self._judged_by()
        return pinning.environment(pins)

    def _judged_by(self) -> tuple[Pinning, dict[str, Any]]:
        """The parent's `Pinning` and this launch's pins (a pinned launch's answers only)."""
        if self._pins is None:
            raise ValueError("exclusions and environment are answers of a pinned launch: ask launch.pinned(pins)")
        return self._parent._pinning, self._pins

    def verdict(self, rule: Rule) -> Any:
        """True, False or the missing fact's key for a decision-free rule; None for the others."""
        if id(rule) in self._layout.constrained:
            return None
        if id(rule) in self._anyway:
            return True
        return _verdict(rule, self._env, self.shared)

    @functools.cached_property
    def verdicts(self) -> dict[int, Any]:
        """The verdict of every decision-free hard rule, by rule id."""
        found = ((id(rule), self.verdict(rule)) for rule in self.plan.hard_rules)
        return {rid: verdict for rid, verdict in found if verdict is not None}

    def base_decisions(self) -> Assignment | None:
        """The decisions under its decision-reading rules alone (None when those rules have no
        solution together)."""
        if self._decided is None:
            found = _preferred(self.plan, self.user, self.facts, self._layout.groups)
            if found is not None:
                self._decided = (found, True)
            else:
                rules = [rule for _, group in self._layout.groups for rule in group]
                self._decided = (self.plan.decisions(self.user, self.facts, rules), False)
        return self._decided[0]

    def rules_unsatisfiable(self, rules: list[Rule]) -> bool:
        """`not plan.satisfiable(user, facts, rules)` under a subset of the hard rules (QuickXplain's
        question). A broken decision-free rule decides it; without one, the subset is satisfiable when
        the decision-reading rules all together are (fewer rules never remove a solution: the
        decision search is complete, its look-ahead exact); anything else is solved."""
        known, constrained, decision_free = self.shared.verdicts, self._layout.constrained, True
        for rule in rules:  # a plain loop: QuickXplain asks this about hundreds of rules at a time
            rid = id(rule)
            if rid in constrained:
                decision_free = False
                continue
            verdict = known.get(rid)
            if verdict is None and rid not in self._anyway:
                verdict = _verdict(rule, self._env, self.shared)
            if verdict is False:
                return True
        if decision_free or self.base_decisions() is not None:
            return False
        return not self.plan.satisfiable(self.user, self.facts, rules)

    def minimal_rules(self, rules: Iterable[Rule] | None = None) -> list[Rule]:
        """A minimal set of hard rules (from `rules`, default all) unsatisfiable with this command
        ([] when it is satisfiable under them), in rule order."""
        pool = list(self.plan.hard_rules if rules is None else rules)
        core = {id(r) for r in quickxplain(pool, self.rules_unsatisfiable)}
        return [r for r in pool if id(r) in core]

    def repair_flags(self, rules: Iterable[Rule]) -> frozenset[str]:
        """Flags whose pinning could change what these rules say: only they can undo an exclusion."""
        return frozenset().union(*(self._graph.rule_reach(r) for r in rules))

    def own_warnings(self, decided: Assignment) -> frozenset[str]:
        """The warnings of this command with these decisions (`plan.decisions` of it), read once."""
        if self._warned is None or self._warned[0] != decided:
            held = self._all is not None and self._all[0] == decided and self._all[1]
            found = self._warnings(self.user, _ChildAnswer(decided, None, self._layout.constrained, held))
            self._warned = (dict(decided), frozenset(found))
        return self._warned[1]

    # -- what is kept --------------------------------------------------------------------------

    @functools.cached_property
    def shared(self) -> Shared:
        return self.plan.shared(self.user, self.facts)

    @functools.cached_property
    def _env(self) -> Env:
        return Env(self.plan, self.user, self.facts, {}, self.shared)

    @functools.cached_property
    def _anyway(self) -> frozenset[int]:
        """Ids of the decision-free rules that hold whatever the values (`Plan.holds_anyway`)."""
        return self.plan.holds_anyway(self.user, self.facts)[0]

    @functools.cached_property
    def _graph(self) -> Reach:
        return self.plan.reach(self.user)

    @functools.cached_property
    def _layout(self) -> Layout:
        return layout_of(self.plan, self.user)

    @functools.cached_property
    def _pinning(self) -> Pinning:
        """Judges this command's pinned children, from its resolved values (none: every question
        goes to the solver)."""
        values = self._resolved
        if values is SOLVE_ON_DEMAND:
            values = self.plan.solve(self.user, self.facts).values if self.satisfiable else None
        return Pinning(self.plan, self.user, self.facts, values, self._graph,
                       lambda pinned, rules: Launch(self.plan, pinned, self.facts).minimal_rules(rules))

    @functools.cached_property
    def _from_parent(self) -> _ChildAnswer | None:
        """A changed child's decisions as its parent works them out (None: unsatisfiable)."""
        return self._parent._solve_child(self.user, self._change)

    # -- a changed child, from its parent ------------------------------------------------------

    def seed(self, values: Mapping[str, Any]) -> None:
        """Copy into the solver's memo for `values` (`Plan.shared`) the decision-free verdicts and
        derived values of this command that the flags in which they differ cannot reach, so no
        solve of `values` computes them again (with the cache layer off that memo is not kept,
        and a solve of `values` computes them afresh)."""
        if getattr(values, "relaxed", None) or getattr(self.user, "relaxed", None):
            return  # `is_set` reads relaxed flags differently: not worth the care
        missing = object()
        changed = {k for k in {*values, *self.user} if values.get(k, missing) != self.user.get(k, missing)}
        flags, touched = self._reach(changed)
        shared = self.plan.shared(values, self.facts)
        self._seed_derived(shared, flags)
        self._seed_verdicts(shared, touched)

    def _reach(self, changed: Iterable[str]) -> tuple[frozenset[str], dict[int, Rule]]:
        key = frozenset(changed)
        found = self._reached.get(key)
        if found is None:
            flags = self._graph.affected(key)
            found = self._reached[key] = (flags, self._graph.touched(flags))
        return found

    def _seed_derived(self, shared: Shared, flags: frozenset[str]) -> None:
        for name, value in self.shared.derived.items():
            if name not in flags:
                shared.derived.setdefault(name, value)

    def _seed_verdicts(self, shared: Shared, touched: dict[int, Rule]) -> None:
        for rid, verdict in self.shared.verdicts.items():
            if rid not in touched:
                shared.verdicts.setdefault(rid, verdict)

    def _solve_child(self, values: Mapping[str, Any], changed: frozenset[str]) -> _ChildAnswer | None:
        """What `plan.decisions(values, facts)` says of a child differing in `changed`: None when it
        is unsatisfiable, else its decisions."""
        plan = self.plan
        known = self.family.solved(values) if self.family is not None else None
        if known is not None:  # solved in full already (say, a drop that two conflicts share)
            decided, held = known._all
            return None if decided is None else _ChildAnswer(decided, None, known._layout.constrained, held)
        if self._broken is None:
            self._broken = {rid for rid, verdict in self.verdicts.items() if verdict is False}
        flags, touched = self._reach(changed)
        if any(rid not in touched for rid in self._broken):
            return None  # a broken rule reads nothing the change reaches
        layout = layout_of(plan, values)
        if self._rejected(values, touched, layout, flags):
            return None
        decided = self.base_decisions()
        if decided is None:
            other = self.sibling(values)
            again = other.decisions
            return None if again is None else _ChildAnswer(again, None, layout.constrained, other._all[1])
        return self._redecide(values, changed, flags, touched, layout, decided)

    def _rejected(self, values: Mapping[str, Any], touched: dict[int, Rule], layout: Layout,
                  flags: frozenset[str]) -> bool:
        """Whether a decision-free rule the change touches fails for `values` (then it is
        unsatisfiable); otherwise its verdicts are left in the solver's memo for `values`. The rules
        that rejected earlier children are the likeliest to reject this one: they are tried first,
        in a bare Env (most children stop here, and need no solver memo)."""
        plan = self.plan
        quick = Env(plan, values, self.facts, {})
        for rule in self._rejecters:
            if id(rule) in touched and id(rule) not in layout.constrained and _reading(rule, quick) is False:
                self._rejected_by(rule)
                return True
        shared = plan.shared(values, self.facts)
        self._seed_derived(shared, flags)
        env = Env(plan, values, self.facts, {}, shared)
        anyway = plan.holds_anyway(values, self.facts)[0]
        for rule in touched.values():
            if rule.is_hard and id(rule) not in layout.constrained and id(rule) not in anyway \
                    and _verdict(rule, env, shared) is False:
                self._rejected_by(rule)
                return True
        self._seed_verdicts(shared, touched)
        return False

    def _redecide(self, values: Mapping[str, Any], changed: frozenset[str], flags: frozenset[str],
                  touched: dict[int, Rule], layout: Layout, decided: Assignment) -> _ChildAnswer | None:
        """Every decision-free rule holds. A decision group that is also one of this command's and
        reads nothing the change reaches decides as here; the others are decided again (other
        flags set can merge or split groups)."""
        plan = self.plan
        kept: Assignment = {}
        redo: list[tuple] = []
        for names, rules in layout.groups:
            if (names, tuple(map(id, rules))) in self._layout.keys and not any(var in flags for var in names) \
                    and not any(id(rule) in touched for rule in rules):
                kept.update((var, decided[var]) for var in names)
            else:
                redo.append((names, rules))
        if not redo:
            return _ChildAnswer(kept, flags, layout.constrained, self._decided[1])
        again, held = _preferred(plan, values, self.facts, redo), self._decided[1]
        if again is None:
            again, held = plan.decisions(values, self.facts, [rule for _, rules in redo for rule in rules]), False
        if again is None:
            return None
        redone = [var for names, _ in redo for var in names]
        return _ChildAnswer({**kept, **again}, self._graph.affected([*changed, *redone]), layout.constrained, held)

    def _warnings(self, values: Mapping[str, Any], found: _ChildAnswer) -> set[str]:
        """The warnings of `values` (this command, or a changed child) under `found`'s decisions;
        like `solve`, the decision-reading hard rules are checked once more on the result, and a
        command failing that has no warnings."""
        plan = self.plan
        env = Env(plan, values, self.facts, found.decided, plan.shared(values, self.facts))
        final = self._base_final() if found.differ is not None else {}
        touched = self._graph.touched(found.differ) if found.differ is not None else None
        anyway = plan.holds_anyway(values, self.facts)[1]
        fired = set()
        # Decisions found as the preferred completion were checked against every rule that reads
        # them on exactly these values: `solve`'s final check can only agree.
        for rule in plan.warn_rules if found.held else (*plan.hard_rules, *plan.warn_rules):
            if rule.is_hard and (id(rule) not in found.constrained or id(rule) in anyway):
                continue  # decision-free: already held before the decisions were made; or holds anyway
            if touched is not None and id(rule) not in touched:
                # (a hard rule is absent when the base decisions were checked against all of them)
                reading = final.get(id(rule), True) if rule.is_hard else final[id(rule)]
            else:
                reading = _reading(rule, env)
            if rule.is_hard and reading is False:
                return set()
            if not rule.is_hard and reading is True:
                fired.add(rule.id)
        return fired

    def _rejected_by(self, rule: Rule) -> None:
        if self._rejecters[:1] != [rule]:
            self._rejecters = [rule, *(r for r in self._rejecters if r is not rule)]

    def sibling(self, values: Mapping[str, Any]) -> Launch:
        """The launch of another command under the same plan and facts (the family's, if there is one)."""
        return self.family.of(values) if self.family is not None else Launch(self.plan, values, self.facts)

    def _base_final(self) -> dict[int, Any]:
        """Every decision-reading hard rule's verdict and every warn rule's condition under this
        command's own decisions (what a changed child copies for the rules it does not touch)."""
        if self._final is None:
            env = Env(self.plan, self.user, self.facts, self.base_decisions(), self.shared)
            held = self._decided[1]
            anyway = self.plan.holds_anyway(self.user, self.facts)[1]  # read as holding, below
            rules = [] if held else [r for r in self.plan.hard_rules
                                     if id(r) in self._layout.constrained and id(r) not in anyway]
            self._final = {id(rule): _reading(rule, env) for rule in (*rules, *self.plan.warn_rules)}
        return self._final


class Launches:
    """The launches one question asks about, under one plan and one set of facts: each command's
    `Launch` made once (an explanation asks about the user's command, the command without each
    conflict's flags, and the fixes of each), and a new command seeded from those already solved."""

    def __init__(self, plan: Plan, facts: Mapping[str, Any]):
        self.plan, self.facts = plan, facts
        self._by_command: dict[tuple, Launch] = {}

    def of(self, user: Mapping[str, Any]) -> Launch:
        key = _key(user)
        found = self._by_command.get(key)
        if found is None:
            found = self._by_command[key] = Launch(self.plan, user, self.facts, self)
        return found

    def solved(self, values: Mapping[str, Any]) -> Launch | None:
        """The launch of `values` if this family has one that solved it in full."""
        found = self._by_command.get(_key(values))
        return found if found is not None and found._all is not None else None

    def seed(self, values: Mapping[str, Any]) -> None:
        """Seed `values` from every command solved so far (each copies what the flags in which it
        differs cannot reach; together they leave little to compute)."""
        for launch in list(self._by_command.values()):
            launch.seed(values)


def _preferred(plan: Plan, values: Mapping[str, Any], facts: Mapping[str, Any], groups) -> Assignment | None:
    """The decisions of these groups when every decision's most preferred eligible value already
    satisfies their rules, else None (then the caller solves). The greedy search would pick exactly
    these: at each step the first candidate closes its rules and the preferred completion is its
    own look-ahead witness. Each value is kept as it is read (in decision order, so a decision
    whose eligibility others read comes first): an undecided value is otherwise recomputed on
    every read."""
    decided: Assignment = {}
    env = Env(plan, values, facts, decided, plan.shared(values, facts))
    for names, _ in groups:
        for var in names:
            decided[var] = env.flag(var)
    anyway = plan.holds_anyway(values, facts)[1]  # hold whatever the decisions: not checked
    if all(holds(rule, env) for _, rules in groups for rule in rules if id(rule) not in anyway):
        return decided
    return None


def _key(user: Mapping[str, Any]) -> tuple:
    return repr(sorted(user.items())), frozenset(getattr(user, "relaxed", ()))


def _reading(rule: Rule, env: Env) -> Any:
    """A hard rule's verdict or a warn rule's condition in `env`; None when a fact is unknown (an
    unchecked rule is not violated, and an unknown fact silences a warning)."""
    try:
        if rule.is_hard:
            return check(rule, env)
        return rule.when is None or bool(rule.when(env))
    except UnknownFact:
        return None


def _verdict(rule: Rule, env: Env, shared: Shared) -> Any:
    """A decision-free rule's verdict (True, False or the missing fact's key), kept in `shared`
    where the solver looks for it."""
    verdict = shared.verdicts.get(id(rule))
    if verdict is None:
        try:
            verdict = check(rule, env)
        except UnknownFact as missing:
            verdict = missing.key
        shared.verdicts[id(rule)] = verdict
    return verdict
