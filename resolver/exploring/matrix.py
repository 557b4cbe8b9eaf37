"""`accord matrix`: CI matrices of legal configurations, for GPUs the CI owner may not have.

    accord matrix --system llm --facts h100,b200,mi300x --axes attention_backend,kv_cache_dtype \
                  --strategy pairwise --format github

The fact preset is always an axis (the `facts` column). Several models (`--model-path A,B`) make a
`model` axis: a row's model is its `--model-path`, and its facts are the preset's with that model's
facts on top, so each row is judged, and resolved again, with its own model. A combination of axis
values is *legal* when some legal row (one value per axis, resolved on its preset and model)
contains it. Strategies:
- `all`: every legal row;
- `pairwise` / `3-wise`: a greedy covering array: each row starts from an uncovered legal t-tuple
  and takes, axis by axis, the value covering the most uncovered t-tuples, backtracking when no
  value keeps the row completable. Every legal t-tuple ends up in some row.
Every emitted row is verified by a full resolve. The smallest illegal combinations (a value or a
pair no legal row contains) are reported with the rules that exclude them. Ties are broken by a
seeded random generator, so a seed always gives the same matrix.

Legality is not monotone: pinning one more flag can make a combination legal again (a pinned KV
cache dtype changes the derived prefill backend, say). So a partial row is only dropped when an
exclusion is *settled*: a rule set that is unsatisfiable by itself and that no remaining axis can
influence (see `Pinning.repair_flags`). Otherwise the search goes on, starting with the axes that
could undo the exclusion. Settled exclusions are remembered as nogoods (the preset plus the values
the rules can see), so no later row, and no coverage target, chases them again.
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import io
import itertools
import json
import random
import shlex
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from accord.resolver.api import ConflictError, plan_for, resolve
from accord.resolver.commandline.flagvalues import BadValue, convert_text, usage_error
from accord.resolver.errors import EXIT_CONFLICT, AccordError, UsageError
from accord.resolver.explaining.report import describe_value, flag_arg
from accord.resolver.exploring.dryrun import CANDIDATE_TYPES, candidate_values, mentioned_values
from accord.resolver.language.catalog import SYSTEMS
from accord.resolver.language.ruletypes import Rule
from accord.resolver.solving.pinning import Pinning
from accord.resolver.solving.preference import speed_rank
from accord.resolver.solving.solve import Env

FACTS_AXIS = "facts"
MODEL_AXIS = "model"
CONTEXT_AXES = (FACTS_AXIS, MODEL_AXIS)   # they pick the facts a row is judged with; not flags
MODEL_FLAG = "model_path"
GITHUB_MAX_JOBS = 256
STRATEGIES = {"all": None, "pairwise": 2, "3-wise": 3}


@dataclasses.dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[Any, ...]


@dataclasses.dataclass
class Matrix:
    system: str
    strategy: str
    axes: list[Axis]
    rows: list[dict[str, Any]]
    legal_tuples: int = 0
    covered_tuples: int = 0
    illegal: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def coverage(self) -> dict[str, Any]:
        return {"legal": self.legal_tuples, "covered": self.covered_tuples,
                "percent": round(100.0 * self.covered_tuples / self.legal_tuples, 1) if self.legal_tuples else 100.0}


class Space:
    """The axes, the fixed flags and the presets' facts; finds legal rows and judges partial ones.

    A row's *context* is its preset and, with a model axis, its model: `models[model][preset]` are
    then the facts it is judged with (the preset's, with the model's on top), and the model is its
    `--model-path`. The fixed flags are resolved once per context; a partial row is a set of pinned
    values on top of that resolve (see `accord.resolver.solving.pinning.Pinning`), so most checks need no search.
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
        self._pinnings: dict[tuple, Pinning] = {}
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

    def pinning(self, row: Mapping[str, Any]) -> Pinning:
        """The fixed flags resolved in the row's context (no example when they conflict there)."""
        context = tuple(row.get(name) for name in CONTEXT_AXES)
        if context not in self._pinnings:
            facts, user = self.facts(row), self.context_flags(row)
            try:
                config = resolve(self.system, user, facts, strict=self.strict)
            except ConflictError:
                config = None
            self._pinnings[context] = Pinning(self.plan, user, facts, config)
        return self._pinnings[context]

    def exclusions(self, row: Mapping[str, Any], every: bool = False) -> list[tuple[Rule, ...]] | None:
        """None if the row (which names its context) is legal as pinned, else rule groups that
        exclude it: the first one found (possibly none) for the search, every one with `every`
        (for the report, which names all the rules)."""
        if not self.respect_rules:
            return None
        key = _key(row)
        if (key, True) in self._exclusions:
            return self._exclusions[key, True]
        if (key, every) not in self._exclusions:
            pinning, pins = self.pinning(row), self.pins(row)
            found = pinning.exclusions(pins) if every else pinning.first_exclusion(pins)
            self._exclusions[key, every] = found
        return self._exclusions[key, every]

    def settled(self, row: Mapping[str, Any], groups: list[tuple[Rule, ...]]) -> bool:
        """Some exclusion of `row` cannot be undone by any axis the row leaves open.

        Such an exclusion only depends on the context and on the row's values of flags the rules
        can see, so that part of the row is remembered as a nogood: no legal row holds it.
        """
        pinning = self.pinning(row)
        open_flags = {a.name for a in self.axes if a.name not in row}
        settled = False
        for group in groups:
            repairs = pinning.repair_flags(group)
            if not repairs & open_flags:
                settled = True
                self._learn(frozenset(item for item in _items(row) if item[0] in CONTEXT_AXES or item[0] in repairs))
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
        items = _items(row)
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
            pinning = self.pinning(row)
            repairs = [[a for a in open_axes if a.name in pinning.repair_flags(g)] for g in groups]
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
            self._learn(frozenset(_items(row)))

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


def _items(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(k, describe_value(v)) for k, v in row.items()]


def _key(row: Mapping[str, Any]) -> tuple:
    return tuple(sorted(_items(row)))


def _tuples(axes: list[Axis], t: int) -> Iterable[tuple]:
    """Every combination of t axis values: ((axis name, value), ...) in axis order."""
    for group in itertools.combinations(axes, t):
        for values in itertools.product(*(a.values for a in group)):
            yield tuple(zip((a.name for a in group), values))


def _tuples_of(row: Mapping[str, Any], t: int, axes: list[Axis], must: str | None = None) -> Iterator[tuple]:
    """The t-tuples a (partial) row covers, in the same axis order as `_tuples`."""
    names = [a.name for a in axes if a.name in row]
    for group in itertools.combinations(names, t):
        if must is None or must in group:
            yield tuple((n, row[n]) for n in group)


def _verify(space: Space, row: dict[str, Any]) -> dict[str, Any]:
    """Resolve the row for real, with its own context's facts; returns the row with its launch
    arguments (fixed flags and model path included) as a list (`argv`) and as one shell-quoted
    string (`args`), and the first 16 hex digits of its config hash."""
    user = space.user(row)
    config = resolve(space.system, user, space.facts(row), strict=space.strict)
    argv = [word for name, value in user.items() for word in launch_words(space.plan.catalog, name, value)]
    return {**row, "argv": argv, "args": shlex.join(argv), "hash": config.hash[:16]}


def launch_words(catalog, name: str, value: Any) -> list[str]:
    """The argv words that set `name` to `value` (none for an unset value or an unnegatable false)."""
    text = flag_arg(catalog, name, value)
    return [] if text.startswith("(omit ") else shlex.split(text)


def all_rows(space: Space, max_rows: int | None = None) -> list[dict[str, Any]]:
    """Every legal row, in the order of the axes' product."""
    found = itertools.islice(space.completions({}, space.axes), max_rows)
    index = {a.name: {describe_value(v): i for i, v in enumerate(a.values)} for a in space.axes}
    ordered = sorted(found, key=lambda row: [index[n][describe_value(v)] for n, v in row.items()])
    return [_verify(space, row) for row in ordered]


def covering_rows(space: Space, t: int, seed: int, max_rows: int | None,
                  respect_rules: bool = True) -> tuple[list[dict[str, Any]], set, set]:
    """Greedy t-wise covering array over the legal t-tuples (over all of them if not respect_rules:
    the unconstrained baseline a constrained matrix is compared with).

    Returns the rows (verified by a resolve when the rules are respected), the legal t-tuples and
    the covered ones. A start tuple without a legal completion is proved illegal by the search.
    """
    if not respect_rules and space.respect_rules:
        space = Space(space.system, space.presets, space.axes, space.fixed, respect_rules=False,
                      models=space.models)
    rng = random.Random(seed)
    every = list(_tuples(space.axes, t))
    order = {tp: i for i, tp in enumerate(every)}
    items = {tp: frozenset(_items(dict(tp))) for tp in every}
    uncovered = set(every)
    legal: set = set()
    rows: list[dict[str, Any]] = []

    def rank(row: Mapping[str, Any], axis: Axis) -> list[Any]:
        # Most new coverage first; among equals, the preference ranking's fastest backend
        # (resolver/solving/preference.py), then the seeded shuffle.
        env = Env(space.plan, {}, space.facts(row), {}) if space.has_context(row) else None
        scored = []
        for value in axis.values:
            trial = {**row, axis.name: value}
            gain = sum(1 for tp in _tuples_of(trial, t, space.axes, axis.name) if tp in uncovered)
            speed = speed_rank(space.plan, axis.name, value, env) if env is not None else 0
            scored.append((-gain, speed, rng.random(), value))
        return [value for *_, value in sorted(scored, key=lambda s: s[:3])]

    learned = 0
    while uncovered and (max_rows is None or len(rows) < max_rows):
        start = min(uncovered, key=order.__getitem__)
        axis_order = list(space.axes)
        rng.shuffle(axis_order)
        row = next(space.completions(dict(start), axis_order, rank), None)
        for nogood in space.nogoods[learned:]:  # tuples holding a nogood are illegal: stop chasing them
            if len(nogood) <= t:  # a larger nogood is in no t-tuple
                uncovered -= {tp for tp in uncovered if nogood <= items[tp]}
        learned = len(space.nogoods)
        if row is None:
            uncovered.discard(start)  # no legal row holds it: illegal
            continue
        new = set(_tuples_of(row, t, space.axes))
        legal |= new
        uncovered -= new
        rows.append(_verify(space, row) if space.respect_rules else row)
    covered = set(legal)
    legal |= {tp for tp in uncovered if space.completable(tp)}  # left open by --max-rows
    return rows, legal, covered


def minimal_illegal(space: Space, t: int, rows: list[dict[str, Any]], complete: bool) -> list[tuple]:
    """Combinations of up to t values that no legal row holds and that hold no smaller such one.

    With full coverage every legal combination of up to t values appears in some row, so absence
    from the rows proves illegality; otherwise each absent one is searched for.
    """
    present = {tp for row in rows for size in range(1, t + 1) for tp in _tuples_of(row, size, space.axes)}
    found: list[tuple] = []
    known: set[frozenset] = set()
    for size in range(1, t + 1):
        for tp in _tuples(space.axes, size):
            if tp in present or any(frozenset(p) in known for k in range(1, size)
                                    for p in itertools.combinations(tp, k)):
                continue
            if complete or not space.completable(tp):
                found.append(tp)
                known.add(frozenset(tp))
    return found


def generate(system: str, presets: Mapping[str, Mapping[str, Any]], axes: list[Axis],
             fixed: Mapping[str, Any], strategy: str = "pairwise", max_rows: int | None = None,
             seed: int = 0, models: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
             include_known_bad: bool = False) -> Matrix:
    """The matrix over the presets (and, given `models` = {model path: {preset: facts}}, a model
    axis) and the flag axes, with `fixed` flags in every row; known-bad runtime combinations are
    excluded from the rows unless `include_known_bad`."""
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}.")
    full_axes = [Axis(FACTS_AXIS, tuple(presets))] + ([Axis(MODEL_AXIS, tuple(models))] if models else [])
    full_axes += list(axes)
    space = Space(system, presets, full_axes, fixed, models=models, include_known_bad=include_known_bad)
    t = STRATEGIES[strategy]
    if t is None:
        return Matrix(system, strategy, full_axes, all_rows(space, max_rows))
    t = min(t, len(full_axes))
    rows, legal, covered = covering_rows(space, t, seed, max_rows)
    illegal = minimal_illegal(space, t, rows, complete=len(covered) == len(legal))
    report = [{"values": dict(tp), "rules": space.excluding_rules(tp)} for tp in illegal]
    return Matrix(system, strategy, full_axes, rows, len(legal), len(covered), report)


# -- output -------------------------------------------------------------------------------

def job_name(matrix: Matrix, row: Mapping[str, Any]) -> str:
    """A readable CI job name: `h100 / DeepSeek-V3 / attention_backend=triton, kv_cache_dtype=auto`
    (a model is named by the last part of its path)."""
    parts = [describe_value(row[FACTS_AXIS])]
    if MODEL_AXIS in row:
        parts.append(Path(str(row[MODEL_AXIS]).rstrip("/")).name or str(row[MODEL_AXIS]))
    flags = ", ".join(f"{a.name}={describe_value(row[a.name])}" for a in matrix.axes if a.name not in CONTEXT_AXES)
    return " / ".join(parts + ([flags] if flags else []))


def github_shards(matrix: Matrix) -> list[list[dict[str, Any]]]:
    """The rows with their job names, in shards of at most 256 (GitHub's jobs-per-matrix limit)."""
    rows = [{**row, "name": job_name(matrix, row)} for row in matrix.rows]
    return [rows[i:i + GITHUB_MAX_JOBS] for i in range(0, len(rows), GITHUB_MAX_JOBS)] or [[]]


def render(matrix: Matrix, fmt: str) -> str:
    names = [a.name for a in matrix.axes]
    if fmt == "github":
        shards = github_shards(matrix)
        if len(shards) == 1:
            return json.dumps({"include": shards[0]}, sort_keys=True)
        return "\n".join(json.dumps({"shard": i, "of": len(shards), "include": rows}, sort_keys=True)
                         for i, rows in enumerate(shards))
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names + ["args"])  # the row's launch flags, shell-quoted
        for row in matrix.rows:
            writer.writerow([describe_value(row[n]) for n in names] + [row.get("args", "")])
        return out.getvalue().rstrip("\n")
    data = {"system": matrix.system, "strategy": matrix.strategy,
            "axes": {a.name: list(a.values) for a in matrix.axes}, "rows": matrix.rows}
    if matrix.strategy != "all":
        data["coverage"] = matrix.coverage()
        data["illegal"] = matrix.illegal
    if fmt == "yaml":
        import yaml
        return yaml.safe_dump(data, sort_keys=True).rstrip("\n")
    return json.dumps(data, indent=2, sort_keys=True)


def workflow(matrix: Matrix, command: str, runs_on: str, invocation: Sequence[str]) -> tuple[str, int]:
    """A GitHub Actions workflow (YAML text) running `command` once per row, and its job count.

    Each job runs one shard of at most 256 rows as its matrix; a row's job is named by `job_name`
    and sees the row as environment variables (ACCORD_FACTS, ACCORD_MODEL, ACCORD_ARGS: the launch
    flags, shell-quoted, ACCORD_HASH), so `command` needs no GitHub expression syntax.
    """
    import yaml

    env = {"ACCORD_FACTS": "${{ matrix.facts }}", "ACCORD_ARGS": "${{ matrix.args }}",
           "ACCORD_HASH": "${{ matrix.hash }}"}
    if any(a.name == MODEL_AXIS for a in matrix.axes):
        env["ACCORD_MODEL"] = "${{ matrix.model }}"
    else:
        env["ACCORD_MODEL"] = str(matrix.rows[0].get(MODEL_AXIS, "")) if matrix.rows else ""
    shards = github_shards(matrix)
    jobs = {}
    for i, rows in enumerate(shards):
        jobs[f"matrix-{i}" if len(shards) > 1 else "matrix"] = {
            "name": "${{ matrix.name }}",
            "runs-on": runs_on,
            "strategy": {"fail-fast": False, "matrix": {"include": rows}},
            "steps": [{"uses": "actions/checkout@v4"},
                      {"name": "run the row", "env": dict(sorted(env.items())), "run": command}],
        }
    head = ("# Generated by Accord; every row is a legal, resolved configuration. Regenerate with:\n"
            f"#   {shlex.join(invocation)}\n")
    body = {"name": f"accord matrix ({matrix.system}, {matrix.strategy})",
            "on": {"workflow_dispatch": {}, "pull_request": {}}, "jobs": jobs}
    return head + yaml.safe_dump(body, sort_keys=False, width=120), len(shards)


def write_text_atomically(path: str, text: str) -> None:
    """Write the whole file or nothing: a temporary file beside it, renamed over it."""
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"--emit-workflow {path} is a folder; give the workflow file to write, "
                         f"e.g. {target / 'accord-matrix.yml'}.")
    if not target.parent.is_dir():
        raise UsageError(f"--emit-workflow {path}: folder {target.parent} does not exist; create it "
                         "(e.g. .github/workflows) or write the file elsewhere.")
    temp = target.with_name(f".{target.name}.accord-tmp")
    try:
        temp.write_text(text, encoding="utf-8")
        temp.replace(target)
    except OSError as err:
        temp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {err.strerror or err}.") from None


def summary(matrix: Matrix) -> str:
    """One line for stderr: rows, coverage of the legal t-tuples, how many combinations are illegal."""
    if matrix.strategy == "all":
        return f"{len(matrix.rows)} legal rows"
    cov = matrix.coverage()
    kind = {"pairwise": "pairs", "3-wise": "triples"}[matrix.strategy]
    return (f"{len(matrix.rows)} rows; {matrix.strategy} coverage {cov['covered']}/{cov['legal']} legal {kind} "
            f"({cov['percent']}%); {len(matrix.illegal)} illegal combinations excluded")


def describe_illegal(item: Mapping[str, Any]) -> str:
    """`facts=h100 attention_backend=aiter (attn.vendor.amd)`."""
    values = " ".join(f"{k}={describe_value(v)}" for k, v in item["values"].items())
    return f"{values} ({', '.join(item['rules']) or 'no listed value of the other axes completes it'})"


# -- command line -------------------------------------------------------------------------

class EmptyMatrix(AccordError):
    """No row is legal: exit 3, naming the combinations that rule everything out."""

    exit_code = EXIT_CONFLICT
    SHOWN = 5

    def __init__(self, matrix: Matrix):
        reasons = [describe_illegal(item) for item in matrix.illegal]
        more = f"; and {len(reasons) - self.SHOWN} more" if len(reasons) > self.SHOWN else ""
        super().__init__("no legal row: every combination of the axes is excluded, for example "
                         + "; ".join(reasons[:self.SHOWN]) + more
                         + ". Check the fixed flags with `accord resolve`, or widen --facts / --values.")


def parse_axes(system: str, axes_text: str, values: list[str],
               facts: Sequence[Mapping[str, Any]] = ()) -> list[Axis]:
    """`--axes a,b` (flag names or spellings) with `--values a=v1,v2` overriding an axis' values.

    An axis without explicit values takes its catalog choices; an integer or list flag its
    candidate set over every fact set of the matrix (`accord.resolver.exploring.dryrun.candidate_values`: the
    solver then keeps, per row, only the legal ones); an open string flag the values the rules
    name (as the dry run does).
    """
    plan = plan_for(system)
    explicit: dict[str, list[str]] = {}
    for item in values:
        name, sep, rest = item.partition("=")
        if not sep or not rest:
            raise UsageError(f"--values {item!r}: write FLAG=v1,v2,... (e.g. --values tp_size=1,2,4,8).")
        explicit[_flag_name(plan, name, "--values")] = rest.split(",")
    axes: list[Axis] = []
    for raw in [a for a in axes_text.split(",") if a.strip()]:
        name = _flag_name(plan, raw.strip(), "--axes")
        flag = plan.catalog[name]
        if name in explicit:
            axis_values = [_typed(flag, v) for v in explicit.pop(name)]
        elif flag.finite_domain is not None:
            axis_values = [v for v in flag.finite_domain if v is not None]
        elif flag.type in CANDIDATE_TYPES:
            axis_values = candidate_values(plan, name, facts)
        else:
            axis_values = sorted(mentioned_values(plan, name), key=str)
        if not axis_values:
            raise UsageError(f"--axes {raw}: {name} ({flag.type}) has no finite set of values; list the "
                             f"ones to try with --values {name}=v1,v2,...")
        if name in [a.name for a in axes]:
            raise UsageError(f"--axes names {name} twice; list each flag once.")
        unique = {describe_value(v): v for v in axis_values}  # list values are not hashable
        axes.append(Axis(name, tuple(unique.values())))
    if explicit:
        raise UsageError(f"--values gives values for {', '.join(sorted(explicit))}, which --axes does not "
                         "list; add it to --axes or drop the --values.")
    if not axes:
        raise UsageError("--axes needs at least one flag, e.g. --axes attention_backend,kv_cache_dtype.")
    return axes


def _flag_name(plan, raw: str, option: str) -> str:
    """A flag name from a name or an option spelling (`kv-cache-dtype`, `--kv-cache-dtype`)."""
    name = raw.strip().lstrip("-").replace("-", "_")
    if name in plan.catalog:
        return name
    hint = difflib.get_close_matches(name, list(plan.catalog.flags), n=1)
    raise UsageError(f"{option} names unknown {plan.catalog.system} flag {raw!r}"
                     + (f"; did you mean {hint[0]}?" if hint else f"; see `accord flags --system {plan.catalog.system}`."))


def _typed(flag, text: str) -> Any:
    """A `--values` word as the flag's type, checked the way the launch parser checks it."""
    try:
        value, _ = convert_text(flag, text)
    except BadValue as err:
        raise usage_error(flag.primary, text, err, prefix="--values: ") from None
    return value
