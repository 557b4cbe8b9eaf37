"""The search of `accord tune`: the stages, their axes, and the solver's verdict on every candidate.

The search never evaluates an illegal candidate: the solver judges every combination before the
cost model (accord.resolver.exploring.costmodel) predicts it. It runs in stages listed in
`search:` in rules/<system>/data/costs.yaml, each on top of the best of the one before, because the
speed axes multiply into millions of combinations: first the layout (every combination of the
parallel sizes, judged against the baseline's resolve), then for a beam of the best layouts the
later stages' values (each value on its own first, then every combination of the values legal on
their own). Every excluded combination is counted against the rule families of the rules that
exclude it. Ranking what was found is `tune_ranking`'s job.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Mapping

from accord.resolver.api import ConflictError, plan_for, resolve
from accord.resolver.deploy.nodes import HOST_PLACEHOLDER
from accord.resolver.deploy.spec import DEPLOY_DIR, load_deploy_spec
from accord.resolver.errors import UsageError
from accord.resolver.explaining.ranking import slowness
from accord.resolver.explaining.report import describe_value
from accord.resolver.exploring.costmodel import CostModel, Workload, model_config_extra
from accord.resolver.exploring.dryrun import candidate_values, values_of
from accord.resolver.exploring.matrix_rows import launch_words
from accord.resolver.exploring.tune_candidates import SLA, Candidate, TuneResult, pins_key, without_unset
from accord.resolver.exploring.tune_ranking import rank
from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.solving.launch import Launch
from accord.resolver.solving.solve import Env, Plan

MODEL_FLAG = "model_path"
GPU_COUNT = "gpu.count"   # the fact: GPUs of one node


class Search:
    """One tuning run: the user's flags, the facts, the workload, the cost model."""

    def __init__(self, system: str, user: Mapping[str, Any], facts: Mapping[str, Any], workload: Workload,
                 sla: SLA = SLA(), allow_quantization: bool = False, cost_model: CostModel | None = None,
                 beam: Mapping[str, int] | None = None, max_nodes: int = 1):
        self.system = system
        self.plan: Plan = plan_for(system)
        self.user = dict(user)
        self.facts = facts
        self.workload = workload
        self.sla = sla
        self.costs = cost_model or CostModel.for_system(system)
        self.device, _ = self.costs.device(facts)   # an unknown GPU fails before any search
        self.allow_quantization = allow_quantization
        self.max_nodes = max(1, int(max_nodes))
        self.beam = {**self.costs.data["search"]["beam"], **(beam or {})}
        self.stages = [name for name in self.costs.data["search"] if name != "beam"]
        if self.stages[:1] != ["layout"]:
            raise UsageError("costs.yaml: the first search stage must be `layout` (the parallel sizes).")
        self.deploy = load_deploy_spec(system) if (DEPLOY_DIR / f"{system}.yaml").is_file() else None
        self.model_extra = model_config_extra(self.user.get(MODEL_FLAG), system, self.user.get("revision"))
        self._derived = {d.id: d for d in self.plan.ruleset.derived}
        self.judged = 0
        self.excluded = 0
        self.legal = 0
        self.no_fit = 0
        self.pruned: dict[str, int] = {}
        self.judged_keys: set[tuple] = set()
        self.combine_all: set[str] = set()   # axes whose every legal value meets the others' (`combine: all`)

    # -- axes ---------------------------------------------------------------------------------
    def axes(self, stage: str, baseline: Mapping[str, Any]) -> dict[str, list[Any]]:
        """The flags a stage varies and their values (the baseline's own value among them)."""
        spec = self.costs.data["search"][stage]
        moe = bool(self.facts.get("model.moe_experts"))
        draft = self.user.get(self.costs.roles["draft_model"]) is not None
        found: dict[str, list[Any]] = {}
        for name, entry in spec.items():
            entry = entry if isinstance(entry, dict) else {"values": entry}
            if name in self.user or name not in self.plan.catalog:
                continue
            if (entry.get("moe_only") and not moe) or (entry.get("draft_only") and not draft) \
                    or (entry.get("quantization_only") and not self.allow_quantization):
                continue
            values = entry["values"]
            if entry.get("combine") == "all":
                self.combine_all.add(name)
            if values == "nodes":   # 1 .. --max-nodes: no axis on one node
                if self.max_nodes <= 1:
                    continue
                values = list(range(1, self.max_nodes + 1))
            elif values == "candidates":
                values = candidate_values(self.plan, name, self.node_facts())
            elif values == "choices":
                values = [v for v in values_of(self.plan, name) if v is not None]
            values = list(values)
            if name in baseline and describe_value(baseline[name]) not in map(describe_value, values):
                values.append(baseline[name])
            if entry.get("quantization_only") and None not in values:
                values.insert(0, None)   # unquantized stays a candidate
            found[name] = list({describe_value(v): v for v in values}.values())
        return found

    def node_facts(self) -> list[Mapping[str, Any]]:
        """The facts the parallel sizes' candidates come from: this machine's, and with
        `--max-nodes N` the same machine N times over (its GPU count times each node count)."""
        count = self.facts.get(GPU_COUNT)
        if self.max_nodes <= 1 or not isinstance(count, int):
            return [self.facts]
        return [{**self.facts, GPU_COUNT: count * n} for n in range(1, self.max_nodes + 1)]

    def over_nodes(self, pins: Mapping[str, Any]) -> dict[str, Any]:
        """`pins` with the rendezvous address a launch over several nodes needs: the typed one, else
        node 0's address as a placeholder to fill in (as `accord launch --emit commands` writes it)."""
        spec = self.deploy
        if spec is None or int(pins.get(spec.name("nodes")) or 1) <= 1 or spec.name("init_addr") in self.user:
            return dict(pins)
        return {**pins, spec.name("init_addr"): f"{HOST_PLACEHOLDER}:{spec.deployment['init_port']}"}

    def node_argvs(self, pins: Mapping[str, Any]) -> list[list[str]]:
        """Every node's command for a launch over several nodes (node 0 first), each with its
        --node-rank; empty for one node."""
        spec = self.deploy
        nodes = int({**self.user, **pins}.get(spec.name("nodes")) or 1) if spec is not None else 1
        if nodes <= 1:
            return []
        rank = spec.name("rank")   # a typed rank names one node: each node gets its own
        argv = self.argv({k: v for k, v in pins.items() if k != rank}, skip=rank)
        return [argv + launch_words(self.plan.catalog, rank, r) for r in range(nodes)]

    def fill_in(self, pins: Mapping[str, Any]) -> str | None:
        """What the placeholder of a launch over several nodes stands for (None: nothing to fill in)."""
        spec = self.deploy
        if spec is None or not str(pins.get(spec.name("init_addr")) or "").startswith(HOST_PLACEHOLDER + ":"):
            return None
        spelled = lambda role: self.plan.catalog[spec.name(role)].primary
        return (f"{HOST_PLACEHOLDER} in {spelled('init_addr')} is node 0's address, reachable from every node "
                f"(e.g. 10.0.0.1); node N runs the command with {spelled('rank')} N")

    # -- judging ------------------------------------------------------------------------------
    def judge(self, launch: Launch, pins: Mapping[str, Any], base: Mapping[str, Any] = {}) -> bool:
        """Ask the solver; count the verdict (an exclusion against its rule families)."""
        pins = without_unset(pins)
        key = pins_key({**base, **pins})
        self.judged += 1
        self.judged_keys.add(key)
        groups = launch.pinned(pins).first_exclusion
        if groups is None:
            return True
        self.excluded += 1
        families = sorted({_family(rule.id) for group in groups for rule in group}) or ["(joint)"]
        for family in families:
            self.pruned[family] = self.pruned.get(family, 0) + 1
        return False

    def reader(self, env: Env) -> Callable[[str], Any]:
        def read(name: str) -> Any:
            derived = self._derived.get(name)
            if derived is not None:
                try:
                    return derived.expr(env)
                except UnknownFact:  # the cost model treats an unknown size as absent
                    return None
            return env.flag(name)
        return read

    def predict(self, env: Env, pins: Mapping[str, Any], stage: str) -> Candidate | None:
        read = self.reader(env)
        predicted = self.costs.predict(read, self.facts, self.workload, self.model_extra)
        self.legal += 1
        if predicted is None:
            self.no_fit += 1
            return None
        effective = self.effective(read)
        family = read(self.costs.roles["decode_attention"]) or read(self.costs.roles["attention"]) or "default"
        nodes = int(read(self.costs.roles["nodes"]) or 1) if "nodes" in self.costs.roles else 1
        return Candidate(dict(pins), predicted, stage, effective, family=str(family), nodes=nodes)

    def effective(self, read: Callable[[str], Any]) -> tuple:
        """The values of every flag the cost model reads, in one fixed order."""
        return tuple(describe_value(read(name)) for name in sorted(set(self.costs.roles.values()))
                     if name in self.plan.catalog)

    def config_env(self, config: ResolvedConfig, user: Mapping[str, Any]) -> Env:
        return Env(self.plan, dict(user), self.facts, dict(config.values))

    # -- the stages -----------------------------------------------------------------------------
    def run(self) -> TuneResult:
        baseline_config, source = self.baseline_config()
        relaxed = {n: baseline_config.values[n] for n, p in baseline_config.provenance.items()
                   if p.get("source") == "relax"}
        base_user = {**self.user, **relaxed}
        base_values = dict(baseline_config.values)
        stage_axes = {stage: self.axes(stage, base_values) for stage in self.stages}
        layout_axes = stage_axes["layout"]
        # The baseline as a candidate: every axis at its resolved value, judged like the others.
        baseline_pins = {n: base_values[n] for axes in stage_axes.values() for n in axes}
        baseline_pins.update(relaxed)
        root = Launch(self.plan, self.user, self.facts, resolved=baseline_config.values)

        pool: list[Candidate] = []
        base_layout = {n: base_values[n] for n in layout_axes}
        base_layout.update({n: v for n, v in relaxed.items() if n not in layout_axes})
        layouts = self.layouts(root, layout_axes, base_layout, pool)

        # Later stages: each expands the best of the one before (and the baseline's values); the
        # layouts chosen are resolved for real first (their candidates are judged as that launch pinned).
        must = dict(base_layout)
        chosen = {id(c) for c in self.best(layouts, self.beam["layout"], must=must)}
        parents = [(c, self.launch(c.pins)) for c in layouts if id(c) in chosen]
        parents = [(c, p) for c, p in parents if p is not None]
        previous = "layout"
        for stage in self.stages[1:]:
            axes = stage_axes[stage]
            if previous != "layout":
                chosen = {id(c) for c in self.best([c for c, _ in parents], self.beam[previous], must=must)}
                parents = [(c, p) for c, p in parents if id(c) in chosen]
            parents = self.expand(parents, axes, stage, pool) + parents
            must.update({n: base_values[n] for n in axes})
            previous = stage
        # The baseline's prediction comes from its own resolve; None: no KV room at this workload.
        predicted = self.costs.predict(self.reader(self.config_env(baseline_config, base_user)), self.facts,
                                       self.workload, self.model_extra)
        read = self.reader(self.config_env(baseline_config, base_user))
        baseline = Candidate(baseline_pins, predicted or {}, "baseline", self.effective(read),
                             warnings=tuple(baseline_config.warnings))
        baseline.argv = self.argv(relaxed)
        baseline.nodes = int(base_values.get(self.costs.roles.get("nodes", ""), 1) or 1)
        baseline.node_argv, baseline.fill_in = self.node_argvs(relaxed), self.fill_in(relaxed)
        if pins_key(baseline_pins) not in self.judged_keys:  # always judged, like every candidate
            self.judge(root, baseline_pins)
        return rank(self, pool, baseline, source)

    def layouts(self, root: Launch, axes: Mapping[str, list[Any]], base_layout: Mapping[str, Any],
                pool: list[Candidate]) -> list[Candidate]:
        """Every legal combination of the parallel sizes, predicted from the baseline's resolve with
        the sizes pinned (the baseline's own layout always among them)."""
        found: list[Candidate] = []
        for combo in map(self.over_nodes, _product(axes)):
            if not self.judge(root, combo):
                continue
            candidate = self.predict(root.pinned(without_unset(combo)).environment, combo, "layout")
            if candidate is not None:
                found.append(candidate)
                pool.append(candidate)
        if not any(_same(c.pins, base_layout) for c in found):
            config = resolve(self.system, {**self.user, **base_layout}, self.facts)
            candidate = self.predict(self.config_env(config, {**self.user, **base_layout}), dict(base_layout), "layout")
            if candidate is not None:
                found.append(candidate)
        return found

    def launch(self, pins: Mapping[str, Any]) -> Launch | None:
        """The command with `pins` typed, with its own resolve (None: it conflicts)."""
        user = {**self.user, **without_unset(pins)}
        try:
            return Launch(self.plan, user, self.facts, resolved=resolve(self.system, user, self.facts).values)
        except ConflictError:
            return None

    def expand(self, parents: list[tuple[Candidate, Launch]], axes: Mapping[str, list[Any]], stage: str,
               pool: list[Candidate]) -> list[tuple[Candidate, Launch]]:
        """Each parent with every legal combination of the stage's values: each value is judged on
        its own first, values the cost model predicts alike on their own are tried once (the first:
        the parent's own, then the axis's order), then every combination of the rest is judged."""
        found: list[tuple[Candidate, Launch]] = []
        if not axes:
            return found
        for parent, launch in parents:
            fixed = {k: v for k, v in parent.pins.items() if k in launch.user}
            extra = {k: v for k, v in parent.pins.items() if k not in launch.user}
            # A value the parent already runs with is left unset (None): the command stays short,
            # and the prediction still reads what it resolves to.
            env = launch.pinned(without_unset(extra)).environment
            singles = {}
            for name, values in axes.items():
                current = describe_value(env.flag(name))
                tried = list({describe_value(v): (None if describe_value(v) == current else v) for v in values}.values())
                legal = [v for v in tried if v is None or self.judge(launch, {**extra, name: v}, fixed)]
                singles[name] = (legal if name in self.combine_all
                                 else self.distinct(launch, extra, name, legal, parent.predicted))
            for combo in _product(singles):
                pins = {**extra, **combo}
                if sum(v is not None for v in combo.values()) > 1 and not self.judge(launch, pins, fixed):
                    continue
                candidate = self.predict(launch.pinned(without_unset(pins)).environment, {**parent.pins, **combo}, stage)
                if candidate is not None:
                    found.append((candidate, launch))
                    pool.append(candidate)
        return found

    def distinct(self, launch: Launch, extra: Mapping[str, Any], name: str, values: list[Any],
                 own: Mapping[str, Any]) -> list[Any]:
        """The values of one axis worth combining with the other axes' values: of values the cost
        model predicts alike on their own, the first (None, the parent's own value, first, then the
        order the final tie-break uses: the preference ranking, then the alphabetically first); and
        no value another one beats on its own in throughput per GPU, tokens/s per user and TTFT
        alike. A value leaving no KV room is dropped."""
        env = launch.pinned(without_unset(extra)).environment
        values = sorted(values, key=lambda v: (v is not None, 0 if v is None else slowness(self.plan, [(name, v)], env),
                                               describe_value(v)))
        found: list[tuple[Any, Mapping[str, Any]]] = []
        seen: set[tuple] = set()
        for value in values:
            if value is None:
                predicted: Mapping[str, Any] | None = own
            else:
                read = self.reader(launch.pinned(without_unset({**extra, name: value})).environment)
                predicted = self.costs.predict(read, self.facts, self.workload, self.model_extra)
            key = _alike(predicted) if predicted else None
            if key is None or key in seen:
                continue
            seen.add(key)
            found.append((value, predicted))
        return [v for v, p in found if v is None or not any(_beats(q, p) for _, q in found)]

    def baseline_config(self) -> tuple[ResolvedConfig, str]:
        """What `accord resolve` picks for the user's command; with `--relax` when it conflicts."""
        try:
            return resolve(self.system, self.user, self.facts), "resolve"
        except ConflictError as err:
            try:
                return resolve(self.system, self.user, self.facts, relax=True), "resolve --relax"
            except ConflictError:
                raise err from None

    def best(self, found: list[Candidate], width: int, must: Mapping[str, Any]) -> list[Candidate]:
        """The beam: the best `width` by the ranking's objective (half by throughput, half by
        tokens/s per user) and the candidate holding the baseline's values."""
        meets = (lambda c: self.sla.met(c.predicted)) if self.sla else (lambda c: True)
        by_total = sorted(found, key=lambda c: (not meets(c), -c.predicted["throughput_per_gpu"]))
        by_user = sorted(found, key=lambda c: (not meets(c), -c.predicted["tok_s_per_user"]))
        half = max(1, width // 2)
        chosen = _unique(by_total[:half] + by_user[:width - half])
        chosen += [c for c in found if _same({k: c.pins.get(k) for k in must}, must)][:1]
        return _unique(chosen)

    def argv(self, pins: Mapping[str, Any], skip: str | None = None) -> list[str]:
        """The launch command: the user's flags as typed, then the search's (without `skip`)."""
        words: list[str] = []
        for name, value in {**self.user, **pins}.items():
            if name == skip or (name not in self.user and (value is None or self._plain_default(name, value))):
                continue
            words += launch_words(self.plan.catalog, name, value)
        return words

    def _plain_default(self, name: str, value: Any) -> bool:
        """The value is the flag's catalog default and no rule computes the flag: typing it
        changes nothing, so the command leaves it out."""
        return name not in self.plan.computed and describe_value(value) == describe_value(self.plan.catalog[name].default)


def _family(rule_id: str) -> str:
    """`par.tp.divides_heads` -> `par.`: what the pruning counts are grouped by."""
    return rule_id.split(".", 1)[0] + "."


def _product(axes: Mapping[str, list[Any]]) -> Iterable[dict[str, Any]]:
    """Every combination of the axes' values, as pins, in the axes' order."""
    names = list(axes)
    for values in itertools.product(*(axes[n] for n in names)):
        yield dict(zip(names, values))


def _alike(predicted: Mapping[str, Any]) -> tuple:
    """What the cost model predicts a candidate to run like (equal: the model cannot tell them apart)."""
    return tuple(predicted.get(k) for k in ("throughput_tok_s", "ttft_ms", "tpot_ms", "gpus", "kv_capacity_tokens"))


def _beats(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """`a` is predicted at least as good as `b` in throughput per GPU, tokens/s per user and TTFT,
    and better in one of them."""
    ttft = lambda p: float("inf") if p.get("ttft_ms") is None else p["ttft_ms"]
    at_least = (a["throughput_per_gpu"] >= b["throughput_per_gpu"] and a["tok_s_per_user"] >= b["tok_s_per_user"]
                and ttft(a) <= ttft(b))
    return at_least and _alike(a) != _alike(b)


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return pins_key(a) == pins_key(b)


def _unique(found: list[Candidate]) -> list[Candidate]:
    """The candidates in order, each object once."""
    seen: set[int] = set()
    return [c for c in found if not (id(c) in seen or seen.add(id(c)))]

