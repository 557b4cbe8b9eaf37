"""How far `accord tune`'s predictions are from published measurements (issue 37).

Reads the reference set (benchmarks/data/serving_figures.yaml), resolves each run once as `accord
resolve` would, predicts it with the cost model (rules/llm/data/costs.yaml) and prints, for every
figure kind (throughput, TPOT, TTFT) and overall: the median |log(predicted / measured)|, the share
of figures within 25%, and the pairwise order accuracy (two figures of one kind from one source,
for one model and one workload's lengths, measured more than 10% apart: does the prediction order
them the same way?). Printed, never asserted.

    PYTHONPATH=$PWD python benchmarks/tune_accuracy.py            # the constants as stored
    PYTHONPATH=$PWD python benchmarks/tune_accuracy.py --fit      # + in-sample fit and leave-one-source-out
    PYTHONPATH=$PWD python benchmarks/tune_accuracy.py --fit --write   # store the in-sample fit in costs.yaml
    ... --rows                                                     # one line per figure (with --fit: held out too)

`--fit` fits the constants costs.yaml lists under `fitted:` on the whole set (in-sample) and, for
each source in turn, on every other source (held out by source: the figures of a source are
predicted by constants fitted without it, and an engine factor fitted on no other source's figures
falls back to 1). Each held-out fit starts from the stored constants (fitted on every source, the
held-out one included); `--neutral-start` starts it from the geometric middle of each constant's
bounds instead, which tells how much of the held-out score that starting point carries.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import inspect
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

DATA = Path(__file__).resolve().parent / "data" / "serving_figures.yaml"
KINDS = ("throughput_tok_s", "tpot_ms", "ttft_ms")
SHORT = {"throughput_tok_s": "throughput", "tpot_ms": "TPOT", "ttft_ms": "TTFT"}
ORDER_GAP = 1.10     # pairs measured closer than this ratio are not scored for order
WITHIN = 0.25


@dataclasses.dataclass
class Run:
    """One published run, resolved once: what the cost model reads about its launch."""

    spec: dict
    facts: dict
    values: dict            # flag and derived values the cost model reads, by name
    extra: dict
    engine: tuple[str, str]

    @property
    def id(self) -> str:
        return self.spec["id"]

    @property
    def source(self) -> str:
        return self.spec["source"]


def load_runs(path: Path = DATA) -> tuple[dict, list[Run]]:
    """The reference set, every run resolved (values read once, so fitting only re-predicts)."""
    from accord.resolver.api import resolve
    from accord.resolver.exploring.costmodel import Workload
    from accord.resolver.exploring.tune_search import Search
    from accord.resolver.facts.machine import load_facts

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    runs = []
    for spec in data["runs"]:
        source = data["sources"][spec["source"]]
        facts = load_facts(spec["gpu"], [f"gpu.count={spec['gpus']}"], model_path=spec["model"], system="llm")
        user = {"model_path": spec["model"], **spec.get("flags", {})}
        search = Search("llm", user, facts, Workload(128, 128, concurrency=1))
        read = search.reader(search.config_env(resolve("llm", user, facts), user))
        names = set(search.costs.roles.values()) | set(search.costs.derived_names.values())
        values = {name: read(name) for name in sorted(names)}
        engine = (str(spec.get("engine") or source["engine"]), str(spec.get("release") or source["release"]))
        runs.append(Run(spec, facts, values, dict(search.model_extra), engine))
    return data, runs


def workload_of(spec: Mapping[str, Any], workload_cls: type) -> Any:
    w = dict(spec["workload"])
    fields = {f.name for f in dataclasses.fields(workload_cls)}
    if "burst" in w and "burst" not in fields:      # a cost model from before bursts: N users at once
        w["concurrency"] = w.pop("burst")
    return workload_cls(**w)


def predictor(costs_data: Mapping[str, Any]) -> Callable[[Run], dict | None]:
    """predict(run) with the cost model built from `costs_data`."""
    from accord.resolver.exploring.costmodel import CostModel, Workload

    model = CostModel(costs_data)
    takes_engine = "engine" in inspect.signature(model.predict).parameters

    def predict(run: Run) -> dict | None:
        kwargs = {"engine": run.engine} if takes_engine else {}
        return model.predict(run.values.get, run.facts, workload_of(run.spec, Workload), run.extra, **kwargs)
    return predict


def figures(runs: list[Run], predict: Callable[[Run], dict | None]) -> list[dict]:
    """One row per measured figure: run, kind, measured, predicted (None: no prediction)."""
    rows = []
    for run in runs:
        got = predict(run) or {}
        for kind, measured in run.spec["measured"].items():
            rows.append({"run": run, "kind": kind, "measured": float(measured), "predicted": got.get(kind)})
    return rows


def error(row: dict) -> float:
    """|log(predicted / measured)|; a missing prediction counts as a factor-of-e miss, at least."""
    p = row["predicted"]
    return abs(math.log(p / row["measured"])) if p and p > 0 else 1.0


def order_pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of figures of one kind, source, model and workload lengths, measured > 10% apart."""
    pairs = []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            ra, rb = a["run"].spec, b["run"].spec
            same = (a["kind"] == b["kind"] and ra["source"] == rb["source"] and ra["model"] == rb["model"]
                    and (ra["workload"]["input_len"], ra["workload"]["output_len"])
                    == (rb["workload"]["input_len"], rb["workload"]["output_len"]))
            gap = max(a["measured"], b["measured"]) / min(a["measured"], b["measured"])
            if same and gap > ORDER_GAP:
                pairs.append((a, b))
    # Also within one source and model: the same launch at different loads (a curve's shape).
    return pairs


def scores(rows: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in (*KINDS, "all"):
        chosen = [r for r in rows if kind == "all" or r["kind"] == kind]
        if not chosen:
            continue
        errs = [error(r) for r in chosen]
        out[kind] = {"n": len(chosen), "median_abs_log": statistics.median(errs),
                     "within_25": sum(e <= math.log1p(WITHIN) for e in errs) / len(errs)}
    pairs = order_pairs(rows)
    right = sum(1 for a, b in pairs if a["predicted"] and b["predicted"]
                and (a["predicted"] - b["predicted"]) * (a["measured"] - b["measured"]) > 0)
    out["order"] = {"pairs": len(pairs), "right": right, "accuracy": right / len(pairs) if pairs else None}
    return out


def render(title: str, s: Mapping[str, Any]) -> str:
    lines = [title]
    for kind in (*KINDS, "all"):
        if kind in s:
            k = s[kind]
            lines.append(f"  {SHORT.get(kind, kind):<10} n={k['n']:>3}  median |log ratio| {k['median_abs_log']:.3f} "
                         f"(x{math.exp(k['median_abs_log']):.2f})  within 25%: {k['within_25']:.0%}")
    o = s["order"]
    lines.append(f"  pairwise order: {o['right']}/{o['pairs']} = {o['accuracy']:.1%}" if o["pairs"] else "  pairwise order: no pairs")
    return "\n".join(lines)


# -- fitting -------------------------------------------------------------------------------------

def fitted_paths(costs: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The constants listed under `fitted:` in costs.yaml, as key paths into the data."""
    return [tuple(name.split("/")) for name in (costs.get("fitted") or {}).get("constants", {})]


def get_path(data: Any, path: tuple[str, ...]) -> float:
    for key in path:
        data = data[key]
    return float(data)


def set_path(data: Any, path: tuple[str, ...], value: float) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def usable(path: tuple[str, ...], runs: list[Run]) -> bool:
    """An engine factor is fitted only on figures of that engine (and release, where named)."""
    if path[:1] != ("engines",):
        return True
    engine, _, release = path[1].partition(" ")
    return any(r.engine[0] == engine and r.engine[1].startswith(release) for r in runs)


def loss(costs: Mapping[str, Any], runs: list[Run]) -> float:
    rows = figures(runs, predictor(costs))
    return sum(min(error(r), 2.0) for r in rows) / max(1, len(rows))


def fit(base: Mapping[str, Any], runs: list[Run], rounds: int = 5, log=None, cycles: int = 4) -> dict:
    """Coordinate descent in log space over the `fitted:` constants, each within its bounds. The
    schedule of step sizes is run again from where it ended (up to `cycles` times) while that
    lowers the loss: a constant stuck behind another one's early moves gets a second large step."""
    costs = copy.deepcopy(dict(base))
    entries = {tuple(name.split("/")): e for name, e in costs["fitted"]["constants"].items()}
    paths = [p for p in entries if usable(p, runs)]
    for p in entries:
        if p not in paths and p[:1] == ("engines",):
            set_path(costs, p, 1.0)      # no figure of that engine: no factor
    best = loss(costs, runs)
    for cycle in range(cycles):
        before = best
        best = _descend(costs, runs, entries, paths, best, rounds, log)
        if best > before - 1e-4:
            break
    return costs


def _descend(costs: dict, runs: list[Run], entries: Mapping[tuple, Any], paths: list[tuple], best: float,
             rounds: int, log) -> float:
    """One pass of the step schedule (in place); returns the loss reached."""
    for step in [0.5, 0.25, 0.1, 0.04, 0.02][:rounds]:
        for path in paths:
            lo, hi = entries[path].get("bounds", [1e-6, 1e6])
            improved = True
            while improved:
                improved = False
                current = get_path(costs, path)
                for factor in (math.exp(step), math.exp(-step)):
                    value = min(max(current * factor, lo), hi)
                    if value == current:
                        continue
                    set_path(costs, path, value)
                    trial = loss(costs, runs)
                    if trial < best - 1e-6:
                        best, improved = trial, True
                        break
                    set_path(costs, path, current)
        if log:
            print(f"    step {step}: loss {best:.4f}", file=log)
    return best


def neutral(base: Mapping[str, Any]) -> dict:
    """The cost data with every fitted constant at the geometric middle of its bounds: a start for
    the held-out fits that knows nothing of the stored (in-sample) values."""
    costs = copy.deepcopy(dict(base))
    for name, entry in costs["fitted"]["constants"].items():
        lo, hi = entry.get("bounds", [1e-6, 1e6])
        set_path(costs, tuple(name.split("/")), math.sqrt(lo * hi))
    return costs


def held_out(base: Mapping[str, Any], runs: list[Run], log=None) -> list[dict]:
    rows = []
    for source in sorted({r.source for r in runs}):
        train = [r for r in runs if r.source != source]
        test = [r for r in runs if r.source == source]
        started = time.perf_counter()
        costs = fit(base, train)
        rows += figures(test, predictor(costs))
        if log:
            print(f"  held out {source}: fitted on {len(train)} runs in {time.perf_counter() - started:.0f} s", file=log)
    return rows


def write_fit(costs: Mapping[str, Any], runs: list[Run], held: Mapping[str, Any]) -> None:
    """Store the fitted values in costs.yaml: the `fitted:` block (the file's last) is rewritten,
    each constant with its bounds and what it was fitted on."""
    from accord.resolver.exploring.costmodel import COSTS_FILE
    from accord.resolver.language.catalog import RULES_DIR

    path = RULES_DIR / "llm" / COSTS_FILE
    text = path.read_text(encoding="utf-8")
    marker = "fitted:\n  constants:\n"
    head = text[:text.index(marker) + len(marker)]
    n_figures = sum(len(r.spec["measured"]) for r in runs)
    sources = sorted({r.source for r in runs})
    lines = []
    for name, entry in costs["fitted"]["constants"].items():
        p = tuple(name.split("/"))
        if p[:1] == ("engines",):
            engine, _, release = p[1].partition(" ")
            chosen = [r for r in runs if r.engine[0] == engine and r.engine[1].startswith(release)]
            on = (f"the {sum(len(r.spec['measured']) for r in chosen)} figures of {p[1]} in "
                  f"{', '.join(sorted({r.source for r in chosen}))}")
        else:
            on = f"all {n_figures} figures of {len(sources)} sources"
        value = round(get_path(costs, p), 4)
        lines.append(f"    {name}: {{value: {value:g}, bounds: {list(entry['bounds'])}, fitted_on: \"{on}; "
                     f"held out by source: median |log ratio| {held['all']['median_abs_log']:.3f}\"}}\n")
    path.write_text(head + "".join(lines), encoding="utf-8")


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        p = r["predicted"]
        print(f"    {r['run'].id:<34} {SHORT[r['kind']]:<10} measured {r['measured']:>10.1f} "
              f"predicted {p if p is None else round(p, 1)!s:>10} ratio {p / r['measured'] if p else float('nan'):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="fit in-sample and leave-one-source-out")
    parser.add_argument("--write", action="store_true", help="with --fit: store the in-sample constants in costs.yaml")
    parser.add_argument("--rows", action="store_true", help="one line per figure (with --fit: held out too)")
    parser.add_argument("--neutral-start", action="store_true",
                        help="with --fit: start each held-out fit from the middle of the bounds, not the stored values")
    args = parser.parse_args()
    from accord.resolver.exploring.costmodel import load_costs

    started = time.perf_counter()
    data, runs = load_runs()
    base = load_costs("llm")
    print(f"reference set: {len(runs)} runs, {sum(len(r.spec['measured']) for r in runs)} figures from "
          f"{len(data['sources'])} sources ({', '.join(sorted(data['sources']))}); resolved in "
          f"{time.perf_counter() - started:.1f} s")
    rows = figures(runs, predictor(base))
    print(render("as stored in costs.yaml (in-sample where fitted):", scores(rows)))
    if args.rows:
        print_rows(rows)
    if args.fit and fitted_paths(base):
        costs = fit(base, runs, log=sys.stderr)
        print(render("fitted on all sources (in-sample):", scores(figures(runs, predictor(costs)))))
        for p in fitted_paths(costs):
            print(f"    {'.'.join(p)} = {get_path(costs, p):.4g}")
        held_rows = held_out(neutral(base) if args.neutral_start else base, runs, log=sys.stderr)
        held = scores(held_rows)
        print(render("held out by source (each source predicted by constants fitted on the others):", held))
        if args.rows:
            print_rows(held_rows)
        if args.write:
            write_fit(costs, runs, held)


if __name__ == "__main__":
    main()
