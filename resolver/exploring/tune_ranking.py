"""The ranking of `accord tune`: which found candidates are shown, in what order, and why.

Candidates that run alike are one; without an SLA the Pareto frontier of throughput per GPU
against tokens/s per user comes first, with an SLA the candidates that miss it are dropped;
throughputs closer than the cost model's resolution rank as equal, and the tie-break
(`tune_candidates.tie_break`) then keeps what `accord resolve` picks. The shown candidates are
resolved for real and predicted again from the resolved values, each with a one-line reason.
It is separate from the search (`tune_search`) because it only orders what the search found;
what it reads of the search is the `RankedSearch` protocol below, so it imports nothing back
from `tune_search` (which calls `rank`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from accord.resolver.api import ConflictError, resolve
from accord.resolver.errors import UsageError
from accord.resolver.explaining.report import describe_value
from accord.resolver.exploring.tune_candidates import Candidate, NoCandidate, TuneResult, tie_break, without_unset
from accord.resolver.solving.solve import Env

if TYPE_CHECKING:
    from accord.resolver.exploring.costmodel import CostModel, Workload
    from accord.resolver.exploring.tune_candidates import SLA
    from accord.resolver.frozen import ResolvedConfig
    from accord.resolver.solving.solve import Plan


class RankedSearch(Protocol):
    """What the ranking reads of a finished search (tune_search.Search is one): its launch, its
    cost model, its counts for the report, and how it words and predicts a command."""

    system: str
    plan: Plan
    user: dict[str, Any]
    facts: Mapping[str, Any]
    workload: Workload
    sla: SLA
    costs: CostModel
    device: str
    beam: dict[str, int]
    model_extra: dict[str, Any]
    judged: int
    excluded: int
    legal: int
    no_fit: int
    pruned: dict[str, int]
    max_nodes: int

    def argv(self, pins: Mapping[str, Any]) -> list[str]: ...

    def node_argvs(self, pins: Mapping[str, Any]) -> list[list[str]]: ...

    def fill_in(self, pins: Mapping[str, Any]) -> str | None: ...

    def reader(self, env: Env) -> Callable[[str], Any]: ...

    def config_env(self, config: ResolvedConfig, user: Mapping[str, Any]) -> Env: ...


def rank(search: RankedSearch, pool: list[Candidate], baseline: Candidate, source: str) -> TuneResult:
    """The search's candidates ranked, the shown ones resolved for real; raises NoCandidate (exit 3)
    when none is left."""
    prefs = Env(search.plan, dict(search.user), search.facts, {})
    tie = lambda c: tie_break(c, baseline, prefs)
    found, missed = _meeting_sla(search.sla, _one_per_effect(pool, tie))
    level = _at_resolution(search.costs)
    order = lambda c: rank_key(c, level, tie)
    # Without an SLA the Pareto frontier comes first (each marked `pareto`), then the rest.
    _mark_pareto(found, level, tie, search.sla)
    found.sort(key=order)
    found = _one_per_speed(found)
    distinct = len(found)
    shown, too_close = _resolve_shown(search, found)
    # The shown ones were predicted again from their own resolve: the frontier is redrawn on those.
    if not search.sla:
        _mark_pareto(shown, level, tie, search.sla)
    shown.sort(key=order)
    result = _tune_result(search, baseline, source, shown, missed)
    result.distinct, result.too_close = distinct, too_close
    if not shown:
        raise NoCandidate(_why_none(search))
    for c in shown:
        c.why = explain(c, search.facts)
    if len(shown) > 1:
        result.versus = versus(shown[0], shown[1])
    return result


def _one_per_effect(pool: list[Candidate], tie: Callable[[Candidate], tuple]) -> list[Candidate]:
    """Two pin sets that resolve alike are one candidate: of them, keep the first by the tie-break."""
    unique: dict[tuple, Candidate] = {}
    for c in pool:
        kept = unique.get(c.effective)
        if kept is None or tie(c) < tie(kept):
            unique[c.effective] = c
    return list(unique.values())


def _meeting_sla(sla: SLA, found: list[Candidate]) -> tuple[list[Candidate], int]:
    """The candidates predicted to meet the SLA (all without one), and how many missed it."""
    if not sla:
        return found, 0
    kept = [c for c in found if sla.met(c.predicted)]
    return kept, len(found) - len(kept)


def _at_resolution(costs: CostModel) -> Callable[[float], float]:
    """A figure's level on the cost model's resolution (lower is better): throughputs closer than
    the resolution rank as equal, so the tie-break then keeps what `accord resolve` picks rather
    than chase a difference the model cannot vouch for."""
    step = math.log1p(float(costs.data.get("ranking", {}).get("resolution", 0.0)) or 1e-12)
    return lambda x: -math.floor(math.log(max(x, 1e-9)) / step)


def _mark_pareto(found: list[Candidate], level: Callable[[float], float], tie: Callable[[Candidate], tuple],
                 sla: SLA) -> None:
    """Mark each candidate `pareto` when it is on the frontier (`rank_key` shows those first);
    under an SLA none is."""
    front = {id(c) for c in pareto(found, tie, level)} if not sla else set()
    for c in found:
        c.predicted["pareto"] = id(c) in front


def _one_per_speed(found: list[Candidate]) -> list[Candidate]:
    """Candidates predicted to run exactly alike are one row: the first in `found`'s order."""
    alike: set[tuple] = set()
    return [c for c in found if not (_speed(c) in alike or alike.add(_speed(c)))]


def _resolve_shown(search: RankedSearch, found: list[Candidate]) -> tuple[list[Candidate], int]:
    """The first `verify` candidates that resolve for real (their argv must resolve as is, and the
    prediction is redone from the resolved values: the search read them from an example), and how
    many were left out under `--measure` as predicted too close to one already shown."""
    shown: list[Candidate] = []
    seen: list[float] = []
    too_close = 0
    for c in found:
        if len(shown) >= search.beam.get("verify", 12):
            break
        figure = c.predicted["throughput_tok_s"]
        gap = float(search.beam.get("distinct") or 0)
        if gap and any(abs(figure - other) <= gap * max(figure, other) for other in seen):
            too_close += 1
            continue   # `--measure`: only candidates the model tells apart are worth measuring
        seen.append(figure)
        done = finish(search, c)
        if done is not None:
            shown.append(done)
    return shown, too_close


def _tune_result(search: RankedSearch, baseline: Candidate, source: str, shown: list[Candidate],
                 missed: int) -> TuneResult:
    """The result carrying the shown candidates and the search's counts for the report."""
    result = TuneResult(baseline, source, shown, search.judged, search.excluded, search.legal, search.pruned,
                        search.no_fit, missed, search.device, search.workload, search.sla)
    result.user_argv = search.argv({})
    result.facts = search.facts
    result.max_nodes = search.max_nodes
    return result


def _why_none(search: RankedSearch) -> str:
    """What NoCandidate says when no candidate is left: the SLA, or the KV room, ruled them out."""
    why = (f"none of the {search.legal} legal candidates meets the SLA" if search.sla and search.legal
           else f"no legal candidate leaves KV-cache room for one request of "
                f"{search.workload.input_len + search.workload.output_len} tokens")
    return (f"accord tune found no candidate: {why} ({search.judged} judged). Loosen "
            "--max-ttft-ms / --max-tpot-ms, shorten the workload, or allow more GPUs.")


def rank_key(c: Candidate, level: Callable[[float], float], tie: Callable[[Candidate], tuple]) -> tuple:
    """The order candidates are shown in: the Pareto frontier first (without an SLA), then
    throughput per GPU, total throughput and tokens/s per user, each at the model's resolution
    (`level`); between candidates the model cannot tell apart, one `accord resolve` warns about
    below a clean one (warnings are known once a candidate is resolved for real, so for the shown
    ones); then the tie-break."""
    return (not c.predicted.get("pareto"), level(c.predicted["throughput_per_gpu"]),
            level(c.predicted["throughput_tok_s"]), level(c.predicted["tok_s_per_user"]),
            len(c.warnings), tie(c))


def finish(search: RankedSearch, c: Candidate) -> Candidate | None:
    """Resolve a candidate's full command (as `accord resolve` will) and predict from it
    (None: it does not resolve after all, the target release's parser refuses its words, or it
    leaves no KV room)."""
    user = {**search.user, **without_unset(c.pins)}
    try:
        config = resolve(search.system, user, search.facts)
        _parsed_by_release(search, search.argv(c.pins))
    except (ConflictError, UsageError):
        return None
    predicted = search.costs.predict(search.reader(search.config_env(config, user)), search.facts,
                                     search.workload, search.model_extra)
    if predicted is None:
        return None
    if "pareto" in c.predicted:
        predicted["pareto"] = c.predicted["pareto"]
    done = Candidate(c.pins, predicted, c.stage, c.effective, family=c.family, warnings=tuple(config.warnings),
                     nodes=c.nodes, node_argv=search.node_argvs(c.pins), fill_in=search.fill_in(c.pins))
    done.argv = search.argv(c.pins)
    return done


def _parsed_by_release(search: RankedSearch, argv: list[str]) -> None:
    """Raise UsageError when the SGLang release the command is for would refuse `argv` (a value
    the catalog still lists that the release removed), as `accord resolve` does."""
    from accord.resolver.commandline.release_target import refuse_unparsed

    refuse_unparsed(argv, {}, search.system, search.facts)


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
    gpus = f"{p['gpus']} GPU(s)" + (f" on {c.nodes} nodes" if c.nodes > 1 else "")
    return (f"{gpus}; KV room {p['kv_gib_per_gpu']} GiB/GPU holds {p['concurrency_fits']} requests; "
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
    """What a candidate is predicted to run like: two with the same figures are one row."""
    p = c.predicted
    return (p["throughput_tok_s"], p["ttft_ms"], p["tpot_ms"], p["gpus"])

