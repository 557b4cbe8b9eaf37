"""Which rows of an `accord matrix` are legal: the search space, its exclusions and its nogoods.

`Space` holds the axes, the fixed flags and each context's facts (a preset, with a model's facts
on top when there is a model axis), judges partial rows against the rules (`Launch.pinned`), and finds
the legal full rows extending one, depth first. It is separate from the row generators
(`matrix_rows`) because it answers only "can this combination be in a legal row, and if not,
which rules say so"; how rows are picked to cover the legal combinations is another question.

Legality is not monotone: pinning one more flag can make a combination legal again (a pinned KV
cache dtype changes the derived prefill backend, say). So a partial row is only dropped when an
exclusion is *settled*: a rule set that is unsatisfiable by itself and that no remaining axis can
influence (see `Launch.repair_flags`). Otherwise the search goes on, starting with the axes that
could undo the exclusion. Settled exclusions are remembered as nogoods (the preset plus the values
the rules can see), so no later row, and no coverage target, chases them again. Rows a known-bad
rule marks (publicly reported to fail at run time) are excluded like illegal ones unless asked for.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator, Mapping

from accord.resolver.api import ConflictError, plan_for, resolve
from accord.resolver.exploring.matrix_axes import (
    CONTEXT_AXES,
    FACTS_AXIS,
    MODEL_AXIS,
    MODEL_FLAG,
    Axis,
    row_items,
    row_key,
)
from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving.launch import Launch


class Space:
    """The axes, the fixed flags and the presets' facts; finds legal rows and judges partial ones.

    A row's *context* is its preset and, with a model axis, its model: `models[model][preset]` are
    then the facts it is judged with (the preset's, with the model's on top), and the model is its
    `--model-path`. The fixed flags are resolved once per context; a partial row is a set of pinned
    values on top of that resolve (`Launch.pinned`, resolver/solving/launch.py), so most checks need no search.
    With `respect_rules=False` every row is legal: the unconstrained baseline.
    """

    def __init__(self, system: str, presets: Mapping[str, Mapping[str, Any]], axes: list[Axis],
                 fixed: Mapping[str, Any], respect_rules: bool = True,
                 models: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
                 include_known_bad: bool = False):
        self.system = system
        # Rows a CI would run: a combination publicly reported to hang or produce garbage at run
        # time (a known_bad rule) is excluded like an illegal one, unless asked for.
        self.strict = not include_known_bad
        self.plan = plan_for(system, strict=self.strict)
        self.presets = presets
        self.models = models
        self.axes = axes
        self.fixed = dict(fixed)
        self.respect_rules = respect_rules
        self.context_axes = [a.name for a in axes if a.name in CONTEXT_AXES]
        self._launches: dict[tuple, Launch] = {}
        self._freed: dict[tuple, dict[str, Any]] = {}  # per context, the defaults given another value
        self._exclusions: dict[tuple, list[tuple[Rule, ...]] | None] = {}
        self._completable: dict[tuple, bool] = {}
        self.nogoods: list[frozenset] = []          # combinations no legal row can hold
        self._nogood_set: set[frozenset] = set()
        # by the nogood's flag items, the context items (preset, model) each comes with: a row's
        # flag items are few, so `doomed` looks up each subset of them instead of scanning
        # (sorted tuples: the subsets `combinations` yields of a row's sorted items), and the sizes
        # of those flag parts, so no lookup is made for a size no nogood has
        self._nogoods_by_flags: dict[tuple, list[frozenset]] = {}
        self._nogood_sizes: set[int] = set()

    def user(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The launch flags of a (partial) row: the fixed ones, its model's path, its pinned values."""
        return {**self.context_flags(row), **self.pins(row)}

    def context_flags(self, row: Mapping[str, Any]) -> dict[str, Any]:
        model = row.get(MODEL_AXIS)
        flags = {**self.fixed, MODEL_FLAG: model} if model is not None else dict(self.fixed)
        return {**flags, **self.freed(row, flags)} if self.respect_rules else flags

    def freed(self, row: Mapping[str, Any], flags: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults are free: flags to add in this context when its fixed flags (and model) are
        illegal only because of a default nobody typed (tp 1 for a 70B model): the best fix (the
        preference ranking's first) that only adds flags neither fixed nor an axis. The model is
        kept, with the smallest change that serves it, instead of being left out of the matrix."""
        context = tuple(row.get(name) for name in CONTEXT_AXES)
        if context not in self._freed:
            self._freed[context] = {}
            facts = self.facts(row)
            if not self.plan.satisfiable(flags, facts):
                from accord.resolver.explaining.diagnose import find_conflicts
                conflicts = find_conflicts(self.plan, flags, facts)
                axes = {a.name for a in self.axes}
                for fix in (conflicts[0].fixes if len(conflicts) == 1 else ()):
                    added = dict(fix.changes)
                    if not fix.drops and not fix.fill_in and not (set(added) & (set(flags) | axes)):
                        self._freed[context] = added
                        break
        return self._freed[context]

    def facts(self, row: Mapping[str, Any]) -> Mapping[str, Any]:
        """The facts a row (which names its context) is judged and resolved with."""
        if MODEL_AXIS in row and self.models is not None:
            return self.models[row[MODEL_AXIS]][row[FACTS_AXIS]]
        return self.presets[row[FACTS_AXIS]]

    def has_context(self, row: Mapping[str, Any]) -> bool:
        return all(name in row for name in self.context_axes)

    @staticmethod
    def pins(row: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in row.items() if k not in CONTEXT_AXES}

    def launch(self, row: Mapping[str, Any]) -> Launch:
        """The fixed flags in the row's context, resolved (a row is that launch pinned)."""
        context = tuple(row.get(name) for name in CONTEXT_AXES)
        if context not in self._launches:
            facts, user = self.facts(row), self.context_flags(row)
            try:
                resolved = resolve(self.system, user, facts, strict=self.strict).values
            except ConflictError:
                resolved = None
            self._launches[context] = Launch(self.plan, user, facts, resolved=resolved)
        return self._launches[context]

    def exclusions(self, row: Mapping[str, Any], every: bool = False) -> list[tuple[Rule, ...]] | None:
        """None if the row (which names its context) is legal as pinned, else rule groups that
        exclude it: the first one found (possibly none) for the search, every one with `every`
        (for the report, which names all the rules)."""
        if not self.respect_rules:
            return None
        key = row_key(row)
        if (key, True) in self._exclusions:
            return self._exclusions[key, True]
        if (key, every) not in self._exclusions:
            pinned = self.launch(row).pinned(self.pins(row))
            found = pinned.exclusions if every else pinned.first_exclusion
            self._exclusions[key, every] = found
        return self._exclusions[key, every]

    def settled(self, row: Mapping[str, Any], groups: list[tuple[Rule, ...]]) -> bool:
        """Some exclusion of `row` cannot be undone by any axis the row leaves open.

        Such an exclusion only depends on the context and on the row's values of flags the rules
        can see, so that part of the row is remembered as a nogood: no legal row holds it.
        """
        launch = self.launch(row)
        open_flags = {a.name for a in self.axes if a.name not in row}
        settled = False
        for group in groups:
            repairs = launch.repair_flags(group)
            if not repairs & open_flags:
                settled = True
                self._learn(frozenset(item for item in row_items(row) if item[0] in CONTEXT_AXES or item[0] in repairs))
        return settled

    def _learn(self, nogood: frozenset) -> None:
        if nogood in self._nogood_set:
            return
        self.nogoods.append(nogood)
        self._nogood_set.add(nogood)
        flags = tuple(sorted(item for item in nogood if item[0] not in CONTEXT_AXES))
        self._nogoods_by_flags.setdefault(flags, []).append(nogood.difference(flags))
        self._nogood_sizes.add(len(flags))

    def doomed(self, row: Mapping[str, Any]) -> bool:
        """The row holds a known nogood."""
        items = row_items(row)
        context = frozenset(item for item in items if item[0] in CONTEXT_AXES)
        flags = sorted(item for item in items if item[0] not in CONTEXT_AXES)
        by_flags = self._nogoods_by_flags
        for size in self._nogood_sizes:
            if size <= len(flags):
                for group in itertools.combinations(flags, size):
                    contexts = by_flags.get(group)
                    if contexts is not None and any(c <= context for c in contexts):
                        return True
        return False

    def hopeless(self, row: Mapping[str, Any]) -> bool:
        """No legal row extends this one (which names its context): it holds a known nogood, or
        a settled exclusion."""
        if self.doomed(row):
            return True
        groups = self.exclusions(row)
        return bool(groups) and self.settled(row, groups)

    def next_axis(self, row: Mapping[str, Any], order: list[Axis]) -> Axis:
        """The context (preset, model) first; then, for an excluded row, an axis that could undo
        the exclusion."""
        open_axes = [a for a in order if a.name not in row]
        context = [a for a in open_axes if a.name in CONTEXT_AXES]
        if context:
            return context[0]
        groups = self.exclusions(row)
        if groups:
            launch = self.launch(row)
            repairs = [[a for a in open_axes if a.name in launch.repair_flags(g)] for g in groups]
            return min(repairs, key=len)[0]
        return open_axes[0]

    def completions(self, row: Mapping[str, Any], order: list[Axis],
                    rank=None) -> Iterator[dict[str, Any]]:
        """Legal full rows extending `row`, depth first; `rank(row, axis)` orders an axis' values.

        A row whose every extension was searched and failed is remembered as a nogood: the next
        search through it (from another start tuple) stops at once.
        """
        if len(row) == len(self.axes):
            if self.exclusions(row) is None:
                yield {a.name: row[a.name] for a in self.axes}
            return
        if self.has_context(row) and self.hopeless(row):
            return
        axis = self.next_axis(row, order)
        values = rank(row, axis) if rank else axis.values
        found = False
        for value in values:
            for full in self.completions({**row, axis.name: value}, order, rank):
                found = True
                yield full
        if not found and self.has_context(row):
            self._learn(frozenset(row_items(row)))

    def completable(self, tp: tuple) -> bool:
        """Some legal row contains this combination."""
        if tp not in self._completable:
            self._completable[tp] = next(self.completions(dict(tp), self.axes), None) is not None
        return self._completable[tp]

    def excluding_rules(self, tp: tuple) -> list[str]:
        """Rules that exclude a combination as pinned, in every context it could run in: per
        context the first proof the search found (or, when it found none, the minimal rule set)."""
        row = dict(tp)
        choices = [[row[a.name]] if a.name in row else list(a.values)
                   for a in self.axes if a.name in CONTEXT_AXES]
        found: list[str] = []
        for context in itertools.product(*choices):
            full = {**row, **dict(zip(self.context_axes, context))}
            groups = self.exclusions(full)
            for group in (self.exclusions(full, every=True) if groups == [] else groups) or ():
                found.extend(r.id for r in group if r.id not in found)
        return found
