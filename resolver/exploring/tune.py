"""`accord tune`: the fastest legal launch for a model, a machine and a workload.

The search never evaluates an illegal candidate: the solver judges every combination before the
cost model (accord.resolver.exploring.costmodel) predicts it. It runs in three stages, each on top
of the best of the one before, because the speed axes multiply into millions of combinations:

1. layout: every combination of the parallel sizes (tp, dp, pp, ep, DP attention), judged against
   the baseline's resolve (`Pinning`); each legal one is resolved and predicted as resolved;
2. attention: for the best layouts (a beam: half by throughput per GPU, half by tokens/s per user,
   plus the baseline's), the attention backend, KV dtype and page size, each value first on its
   own, then every combination of the values legal on their own;
3. weights: the MoE runner backend (models with experts) and quantization (when allowed);
4. scheduling: chunked prefill, the running-request cap, the CUDA-graph batch cap (and the
   speculative steps when a draft is given).

What the axes are and which values they try is data (`search:` in rules/<system>/data/costs.yaml);
a flag the user typed is no axis: it stays as typed in every candidate, and the model path is never
changed. Every excluded combination is counted against the rule families (`par.`, `attn.`, ...) of
the rules that exclude it. The baseline is what `accord resolve` picks for the user's command (with
`--relax` when the command alone has no legal configuration), and it is always among the judged.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import shlex
from typing import Any, Callable, Iterable, Mapping

from accord.resolver.api import ConflictError, plan_for, resolve
from accord.resolver.errors import EXIT_CONFLICT, AccordError, UsageError
from accord.resolver.explaining.report import describe_value
from accord.resolver.exploring.costmodel import CostModel, Workload, model_config_extra
from accord.resolver.exploring.dryrun import candidate_values, values_of
from accord.resolver.exploring.matrix import launch_words
from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.solving.pinning import Pinning
from accord.resolver.solving.preference import slowness
from accord.resolver.solving.solve import Env, Plan

MODEL_FLAG = "model_path"


@dataclasses.dataclass(frozen=True)
class SLA:
    max_ttft_ms: float | None = None
    max_tpot_ms: float | None = None

    def __bool__(self) -> bool:
        return self.max_ttft_ms is not None or self.max_tpot_ms is not None

    def met(self, predicted: Mapping[str, Any]) -> bool:
        if predicted.get("saturated"):
            return False
        if self.max_ttft_ms is not None and (predicted["ttft_ms"] is None or predicted["ttft_ms"] > self.max_ttft_ms):
            return False
        return self.max_tpot_ms is None or predicted["tpot_ms"] <= self.max_tpot_ms


@dataclasses.dataclass
class Candidate:
    pins: dict[str, Any]            # the flags the search set (the user's stay in `user`)
    predicted: dict[str, Any]
    stage: str
    effective: tuple = ()           # the values the cost model read: two pin sets that run alike are one
    argv: list[str] = dataclasses.field(default_factory=list)
    why: str = ""
    family: str = "default"         # the decode attention backend: what a calibration factor is fitted per

    def to_dict(self) -> dict[str, Any]:
        return {"argv": self.argv, "args": shlex.join(self.argv), "predicted": self.predicted, "why": self.why}


class NoCandidate(AccordError):
    """Every judged candidate was illegal, did not fit, or missed the SLA (exit 3)."""

    exit_code = EXIT_CONFLICT


@dataclasses.dataclass
class TuneResult:
    baseline: Candidate
    baseline_source: str            # "resolve" or "resolve --relax"
    candidates: list[Candidate]     # ranked, best first (all that qualify; the caller shows the top N)
    judged: int                     # combinations the solver judged
    excluded: int                   # of them illegal
    legal: int                      # legal candidates predicted
    pruned: dict[str, int]          # by rule family: combinations excluded
    no_fit: int                     # legal, but no KV room for one request
    missed_sla: int
    device: str
    workload: Workload
    sla: SLA
    versus: str = ""                # why the winner beats the runner-up
    user_argv: list[str] = dataclasses.field(default_factory=list)   # the user's own flags, the head of every argv
    facts: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self, top: int) -> dict[str, Any]:
        return {
            "baseline": {**self.baseline.to_dict(), "source": self.baseline_source},
            "candidates": [c.to_dict() for c in self.candidates[:top]],
            "evaluated": self.judged,
            "excluded": self.excluded,
            "legal": self.legal,
            "pruned": dict(sorted(self.pruned.items())),
            "no_fit": self.no_fit,
            "missed_sla": self.missed_sla,
            "ranking": "sla" if self.sla else "pareto",
            "device": self.device,
            "workload": dataclasses.asdict(self.workload),
            "sla": dataclasses.asdict(self.sla),
            "winner_vs_runner_up": self.versus,
        }


# -- the tie-break ----------------------------------------------------------------------------

def tie_break(candidate: Candidate, baseline: Candidate, env: Env) -> tuple:
    """Between candidates the cost model cannot tell apart: the shorter command (fewest flags the
    search sets), then the project's shared preference ranking (upstream's own fastest-first
    auto-selection order for backends here, `rules/preferences/`: the same data that orders fixes,
    `--relax` and the dry run), then the one closest to the baseline (fewest settings the cost model
    reads that run differently from what `accord resolve` picks), then the alphabetically first
    settings. `env` is the user's launch on this machine, which the preference orders read."""
    pins = _set(candidate.pins)
    runs_differently = sum(1 for a, b in zip(candidate.effective, baseline.effective) if a != b)
    return (len(pins), slowness(env.plan, sorted(pins.items()), env), runs_differently, _key(pins))


# -- the search -------------------------------------------------------------------------------

class Search:
    """One tuning run: the user's flags, the facts, the workload, the cost model."""

    def __init__(self, system: str, user: Mapping[str, Any], facts: Mapping[str, Any], workload: Workload,
                 sla: SLA = SLA(), allow_quantization: bool = False, cost_model: CostModel | None = None,
                 beam: Mapping[str, int] | None = None):
        self.system = system
        self.plan: Plan = plan_for(system)
        self.user = dict(user)
        self.facts = facts
        self.workload = workload
        self.sla = sla
        self.costs = cost_model or CostModel.for_system(system)
        self.device, _ = self.costs.device(facts)   # an unknown GPU fails before any search
        self.allow_quantization = allow_quantization
        self.beam = {**self.costs.data["search"]["beam"], **(beam or {})}
        self.stages = [name for name in self.costs.data["search"] if name != "beam"]
        if self.stages[:1] != ["layout"]:
            raise UsageError("costs.yaml: the first search stage must be `layout` (the parallel sizes).")
        self.model_extra = model_config_extra(self.user.get(MODEL_FLAG), system)
        self._derived = {d.id: d for d in self.plan.ruleset.derived}
        self.judged = 0
        self.excluded = 0
        self.legal = 0
        self.no_fit = 0
        self.pruned: dict[str, int] = {}
        self.judged_keys: set[tuple] = set()

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
            if values == "candidates":
                values = candidate_values(self.plan, name, [self.facts])
            elif values == "choices":
                values = [v for v in values_of(self.plan, name) if v is not None]
            values = list(values)
            if name in baseline and describe_value(baseline[name]) not in map(describe_value, values):
                values.append(baseline[name])
            if entry.get("quantization_only") and None not in values:
                values.insert(0, None)   # unquantized stays a candidate
            found[name] = list({describe_value(v): v for v in values}.values())
        return found

    # -- judging ------------------------------------------------------------------------------
    def judge(self, pinning: Pinning, pins: Mapping[str, Any], base: Mapping[str, Any] = {}) -> bool:
        """Ask the solver; count the verdict (an exclusion against its rule families)."""
        pins = _set(pins)
        key = _key({**base, **pins})
        self.judged += 1
        self.judged_keys.add(key)
        groups = pinning.first_exclusion(pins)
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
        return Candidate(dict(pins), predicted, stage, effective, family=str(family))

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
        root = Pinning(self.plan, self.user, self.facts, baseline_config)

        pool: list[Candidate] = []
        layouts: list[tuple[Candidate, ResolvedConfig]] = []
        base_layout = {n: base_values[n] for n in layout_axes}
        base_layout.update({n: v for n, v in relaxed.items() if n not in layout_axes})
        for combo in _product(layout_axes):
            if not self.judge(root, combo):
                continue
            try:
                config = resolve(self.system, {**self.user, **combo}, self.facts)
            except ConflictError:
                continue
            found = self.predict(self.config_env(config, {**self.user, **combo}), combo, "layout")
            if found is not None:
                layouts.append((found, config))
                pool.append(found)
        if not any(_same(c.pins, base_layout) for c, _ in layouts):
            config = resolve(self.system, {**self.user, **base_layout}, self.facts)
            found = self.predict(self.config_env(config, {**self.user, **base_layout}), base_layout, "layout")
            if found is not None:
                layouts.append((found, config))

        # Later stages: each expands the best of the one before (and the baseline's values).
        parents = [(c, Pinning(self.plan, {**self.user, **c.pins}, self.facts, config)) for c, config in layouts]
        must = dict(base_layout)
        previous = "layout"
        for stage in self.stages[1:]:
            axes = stage_axes[stage]
            chosen = {id(c) for c in self.best([c for c, _ in parents], self.beam[previous], must=must)}
            parents = [(c, p) for c, p in parents if id(c) in chosen]
            parents = self.expand(parents, axes, stage, pool) + parents
            must.update({n: base_values[n] for n in axes})
            previous = stage
        # The baseline's prediction comes from its own resolve; None: no KV room at this workload.
        predicted = self.costs.predict(self.reader(self.config_env(baseline_config, base_user)), self.facts,
                                       self.workload, self.model_extra)
        read = self.reader(self.config_env(baseline_config, base_user))
        baseline = Candidate(baseline_pins, predicted or {}, "baseline", self.effective(read))
        baseline.argv = self.argv(relaxed)
        if _key(baseline_pins) not in self.judged_keys:  # always judged, like every candidate
            self.judge(root, baseline_pins)
        return self.rank(pool, baseline, source)

    def expand(self, parents: list[tuple[Candidate, Pinning]], axes: Mapping[str, list[Any]], stage: str,
               pool: list[Candidate]) -> list[tuple[Candidate, Pinning]]:
        """Each parent with every legal combination of the stage's values: each value is judged on
        its own first, then every combination of the values legal on their own."""
        found: list[tuple[Candidate, Pinning]] = []
        if not axes:
            return found
        for parent, pinning in parents:
            fixed = {k: v for k, v in parent.pins.items() if k in pinning.user}
            extra = {k: v for k, v in parent.pins.items() if k not in pinning.user}
            # A value the parent already runs with is left unset (None): the command stays short,
            # and the prediction still reads what it resolves to.
            env = pinning.environment(_set(extra))
            singles = {}
            for name, values in axes.items():
                current = describe_value(env.flag(name))
                tried = list({describe_value(v): (None if describe_value(v) == current else v) for v in values}.values())
                singles[name] = [v for v in tried if v is None or self.judge(pinning, {**extra, name: v}, fixed)]
            for combo in _product(singles):
                pins = {**extra, **combo}
                if len(combo) > 1 and not self.judge(pinning, pins, fixed):
                    continue
                candidate = self.predict(pinning.environment(_set(pins)), {**parent.pins, **combo}, stage)
                if candidate is not None:
                    found.append((candidate, pinning))
                    pool.append(candidate)
        return found

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

    # -- ranking and output ----------------------------------------------------------------------
    def rank(self, pool: list[Candidate], baseline: Candidate, source: str) -> TuneResult:
        prefs = Env(self.plan, dict(self.user), self.facts, {})
        unique: dict[tuple, Candidate] = {}
        for c in pool:  # two pin sets that resolve alike are one candidate: keep the closer one
            kept = unique.get(c.effective)
            if kept is None or tie_break(c, baseline, prefs) < tie_break(kept, baseline, prefs):
                unique[c.effective] = c
        found = list(unique.values())
        missed = 0
        if self.sla:
            kept = [c for c in found if self.sla.met(c.predicted)]
            missed = len(found) - len(kept)
            found = kept
        # Throughputs closer than the model's resolution rank as equal: the tie-break then keeps
        # what `accord resolve` picks rather than chase a difference the model cannot vouch for.
        step = math.log1p(float(self.costs.data.get("ranking", {}).get("resolution", 0.0)) or 1e-12)
        level = lambda x: -math.floor(math.log(max(x, 1e-9)) / step)
        # Without an SLA the Pareto frontier comes first (each marked `pareto`), then the rest.
        front = ({id(c) for c in pareto(found, lambda c: tie_break(c, baseline, prefs), level)}
                 if not self.sla else set())
        order = lambda c: (not c.predicted.get("pareto"), level(c.predicted["throughput_per_gpu"]),
                           level(c.predicted["throughput_tok_s"]), level(c.predicted["tok_s_per_user"]),
                           tie_break(c, baseline, prefs))
        for c in found:
            c.predicted["pareto"] = id(c) in front
        found.sort(key=order)
        # Candidates predicted to run exactly alike are one row: the first by the tie-break.
        alike: set[tuple] = set()
        found = [c for c in found if not (_speed(c) in alike or alike.add(_speed(c)))]
        # The shown candidates are resolved for real: their argv must resolve as is, and the
        # prediction is redone from the resolved values (the search read them from an example).
        shown = []
        seen: list[float] = []
        for c in found:
            if len(shown) >= self.beam.get("verify", 12):
                break
            figure = c.predicted["throughput_tok_s"]
            gap = float(self.beam.get("distinct") or 0)
            if gap and any(abs(figure - other) <= gap * max(figure, other) for other in seen):
                continue   # `--measure`: only candidates the model tells apart are worth measuring
            seen.append(figure)
            done = self.finish(c)
            if done is not None:
                shown.append(done)
        shown.sort(key=order)
        result = TuneResult(baseline, source, shown, self.judged, self.excluded, self.legal, self.pruned, self.no_fit,
                            missed, self.device, self.workload, self.sla)
        result.user_argv = self.argv({})
        result.facts = self.facts
        if not shown:
            why = (f"none of the {self.legal} legal candidates meets the SLA" if self.sla and self.legal
                   else f"no legal candidate leaves KV-cache room for one request of "
                        f"{self.workload.input_len + self.workload.output_len} tokens")
            raise NoCandidate(f"accord tune found no candidate: {why} ({self.judged} judged). Loosen "
                              "--max-ttft-ms / --max-tpot-ms, shorten the workload, or allow more GPUs.")
        for c in shown:
            c.why = explain(c, self.facts)
        if len(shown) > 1:
            result.versus = versus(shown[0], shown[1])
        return result

    def finish(self, c: Candidate) -> Candidate | None:
        """Resolve a candidate's full command (as `accord resolve` will) and predict from it
        (None: it does not resolve after all, or leaves no KV room)."""
        user = {**self.user, **_set(c.pins)}
        try:
            config = resolve(self.system, user, self.facts)
        except ConflictError:
            return None
        predicted = self.costs.predict(self.reader(self.config_env(config, user)), self.facts, self.workload,
                                       self.model_extra)
        if predicted is None:
            return None
        if "pareto" in c.predicted:
            predicted["pareto"] = c.predicted["pareto"]
        done = Candidate(c.pins, predicted, c.stage, c.effective, family=c.family)
        done.argv = self.argv(c.pins)
        return done

    def argv(self, pins: Mapping[str, Any]) -> list[str]:
        """The launch command: the user's flags as typed, then the search's."""
        words: list[str] = []
        for name, value in {**self.user, **pins}.items():
            if name not in self.user and (value is None or self._plain_default(name, value)):
                continue
            words += launch_words(self.plan.catalog, name, value)
        return words

    def _plain_default(self, name: str, value: Any) -> bool:
        """The value is the flag's catalog default and no rule computes the flag: typing it
        changes nothing, so the command leaves it out."""
        return name not in self.plan.computed and describe_value(value) == describe_value(self.plan.catalog[name].default)


def pareto(found: list[Candidate], tie: Callable[[Candidate], tuple] = lambda c: (),
           level: Callable[[float], float] = lambda x: -x) -> list[Candidate]:
    """The candidates no other beats on both throughput per GPU and tokens/s per user, compared as
    `level` ranks them (lower is better; of equal ones, the first by `tie`)."""
    points = sorted(found, key=lambda c: (level(c.predicted["throughput_per_gpu"]),
                                          level(c.predicted["tok_s_per_user"]), tie(c)))
    front: list[Candidate] = []
    best_user = math.inf
    for c in points:
        user = level(c.predicted["tok_s_per_user"])
        if user < best_user:
            front.append(c)
            best_user = user
    return front


def explain(c: Candidate, facts: Mapping[str, Any]) -> str:
    """One line on what decides this candidate's speed."""
    p = c.predicted
    return (f"{p['gpus']} GPU(s); KV room {p['kv_gib_per_gpu']} GiB/GPU holds {p['concurrency_fits']} requests; "
            f"{p['running_per_rank']:g} running per rank; decode step {p['decode_step_ms']} ms "
            f"({p['bound']}-bound, all-reduce {p['comm_ms']} ms); prefill {p['prefill_ms']} ms")


def versus(a: Candidate, b: Candidate) -> str:
    """Why `a` ranks above `b`, in one line: the flags that differ and the figure that moves most."""
    names = sorted(set(a.pins) | set(b.pins))
    shown = lambda v: "unset" if v is None else describe_value(v)
    differ = [f"{n}={shown(a.pins.get(n))} (vs {shown(b.pins.get(n))})" for n in names
              if shown(a.pins.get(n)) != shown(b.pins.get(n))]
    pa, pb = a.predicted, b.predicted
    figures = [("running per rank", "running_per_rank"), ("decode step ms", "decode_step_ms"),
               ("prefill ms", "prefill_ms"), ("all-reduce ms", "comm_ms"), ("GPUs", "gpus"),
               ("KV capacity tokens", "kv_capacity_tokens")]

    def change(key: str) -> float:
        x, y = pa.get(key) or 0, pb.get(key) or 0
        return abs(math.log((x + 1e-9) / (y + 1e-9))) if x > 0 and y > 0 else (1.0 if x != y else 0.0)

    label, key = ("GPUs", "gpus") if pa["gpus"] != pb["gpus"] else max(figures, key=lambda f: change(f[1]))
    gain = pa["throughput_per_gpu"] / pb["throughput_per_gpu"] - 1 if pb["throughput_per_gpu"] else 0
    return (f"the winner predicts {pa['throughput_per_gpu']:g} vs {pb['throughput_per_gpu']:g} tok/s per GPU "
            f"({gain:+.1%}) and {pa['tok_s_per_user']:g} vs {pb['tok_s_per_user']:g} tok/s per user: "
            f"{', '.join(differ) or 'same flags'}; most of it from {label} {pa.get(key)} vs {pb.get(key)}")


def _speed(c: Candidate) -> tuple:
    p = c.predicted
    return (p["throughput_tok_s"], p["ttft_ms"], p["tpot_ms"], p["gpus"])


def _family(rule_id: str) -> str:
    return rule_id.split(".", 1)[0] + "."


def _product(axes: Mapping[str, list[Any]]) -> Iterable[dict[str, Any]]:
    names = list(axes)
    for values in itertools.product(*(axes[n] for n in names)):
        yield dict(zip(names, values))


def _set(pins: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in pins.items() if v is not None}


def _key(pins: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, describe_value(v)) for k, v in pins.items() if v is not None))


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return _key(a) == _key(b)


def _unique(found: list[Candidate]) -> list[Candidate]:
    seen: set[int] = set()
    return [c for c in found if not (id(c) in seen or seen.add(id(c)))]


def predict_launch(system: str, user: Mapping[str, Any], facts: Mapping[str, Any], workload: Workload,
                   cost_model: CostModel | None = None) -> dict[str, Any] | None:
    """The prediction for one launch command as `accord resolve` resolves it (None: no KV room)."""
    search = Search(system, user, facts, workload, cost_model=cost_model)
    config = resolve(system, user, facts)
    return search.costs.predict(search.reader(search.config_env(config, user)), facts, workload, search.model_extra)


def tune(system: str, user: Mapping[str, Any], facts: Mapping[str, Any], workload: Workload,
         sla: SLA = SLA(), allow_quantization: bool = False, cost_model: CostModel | None = None,
         beam: Mapping[str, int] | None = None) -> TuneResult:
    """Search, predict and rank; raises NoCandidate (exit 3) or the command's own ConflictError."""
    if workload.input_len < 1 or workload.output_len < 1:
        raise UsageError("--input-len and --output-len must be at least 1 token.")
    return Search(system, user, facts, workload, sla, allow_quantization, cost_model, beam).run()
