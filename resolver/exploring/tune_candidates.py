"""What `accord tune` hands around: candidates, the SLA, the result, and how ties are broken.

A `Candidate` is one launch the search judged legal and the cost model predicted; a `TuneResult` is
the ranked outcome with the search's counts (judged, excluded by rule family, without KV room,
missing the SLA). They are separate from the search (`tune_search`) and the ranking
(`tune_ranking`) because both read and write them, and the commands and the measuring step
(`accord tune --measure`) consume them without searching anything.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any, Mapping

from accord.resolver.errors import EXIT_CONFLICT, AccordError
from accord.resolver.explaining.report import describe_value
from accord.resolver.exploring.costmodel import Workload
from accord.resolver.explaining.ranking import slowness
from accord.resolver.solving.solve import Env


@dataclasses.dataclass(frozen=True)
class SLA:
    """The latency a candidate must predict to qualify (`--max-ttft-ms`, `--max-tpot-ms`); empty: none."""

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
    """One legal launch the search found, with the cost model's prediction for it."""

    pins: dict[str, Any]            # the flags the search set (the user's stay in `user`)
    predicted: dict[str, Any]
    stage: str
    effective: tuple = ()           # the values the cost model read: two pin sets that run alike are one
    argv: list[str] = dataclasses.field(default_factory=list)
    why: str = ""
    family: str = "default"         # the decode attention backend: what a calibration factor is fitted per
    warnings: tuple[str, ...] = ()  # what `accord resolve` warns about this launch (set once resolved)
    nodes: int = 1                  # machines the launch spans
    node_argv: list[list[str]] = dataclasses.field(default_factory=list)   # each node's command (several nodes)
    fill_in: str | None = None      # what a placeholder in the command stands for

    def to_dict(self, nodes: bool = False) -> dict[str, Any]:
        """As `--json` prints it; `nodes`: the search spanned several nodes (`--max-nodes`), so the
        node count is said, and each node's command where there are several."""
        out = {"argv": self.argv, "args": shlex.join(self.argv), "predicted": self.predicted, "why": self.why,
               "warnings": list(self.warnings)}
        if nodes:
            out["nodes"] = self.nodes
            if self.node_argv:
                out["node_argv"] = self.node_argv
            if self.fill_in:
                out["fill_in"] = self.fill_in
        return out


class NoCandidate(AccordError):
    """Every judged candidate was illegal, did not fit, or missed the SLA (exit 3)."""

    exit_code = EXIT_CONFLICT


@dataclasses.dataclass
class TuneResult:
    """The ranked candidates, the baseline, and what the search judged and excluded on the way."""

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
    distinct: int = 0               # candidates the cost model predicts to run differently (at most shown)
    too_close: int = 0              # of them left out under --measure: predicted too close to a shown one
    max_nodes: int = 1              # `--max-nodes`: the node counts searched were 1 .. this

    def to_dict(self, top: int) -> dict[str, Any]:
        nodes = self.max_nodes > 1
        out = {
            "baseline": {**self.baseline.to_dict(nodes), "source": self.baseline_source},
            "candidates": [c.to_dict(nodes) for c in self.candidates[:top]],
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
            "fewer_than_asked": self.fewer_than(top),
        }
        if nodes:
            out["max_nodes"] = self.max_nodes
        return out

    def fewer_than(self, top: int) -> str | None:
        """Why fewer than `top` candidates are shown (None: `top` are)."""
        if len(self.candidates) >= top:
            return None
        return (f"{len(self.candidates)} of the {top} asked for: the {self.legal} legal candidates the search "
                f"predicted come to {self.distinct} that run differently (those predicted to run alike are one "
                f"row), {self.no_fit} leave no KV room for one request"
                + (f", {self.missed_sla} miss the SLA" if self.sla else "")
                + (f", {self.too_close} are predicted too close to a shown one to measure apart (--measure)"
                   if self.too_close else ""))


# -- the tie-break ----------------------------------------------------------------------------

def tie_break(candidate: Candidate, baseline: Candidate, env: Env) -> tuple:
    """Between candidates the cost model cannot tell apart: the shorter command (fewest flags the
    search sets), then the project's shared preference ranking (upstream's own fastest-first
    auto-selection order for backends here, `rules/preferences/`: the same data that orders fixes,
    `--relax` and the dry run), then the one closest to the baseline (fewest settings the cost model
    reads that run differently from what `accord resolve` picks), then the alphabetically first
    settings. `env` is the user's launch on this machine, which the preference orders read."""
    pins = without_unset(candidate.pins)
    runs_differently = sum(1 for a, b in zip(candidate.effective, baseline.effective) if a != b)
    return (len(pins), slowness(env.plan, sorted(pins.items()), env), runs_differently, pins_key(pins))



def without_unset(pins: Mapping[str, Any]) -> dict[str, Any]:
    """The pins that set a value: None means "left as the parent resolves it", not a flag."""
    return {k: v for k, v in pins.items() if v is not None}


def pins_key(pins: Mapping[str, Any]) -> tuple:
    """Pins as a hashable key, in a fixed order, without the unset ones."""
    return tuple(sorted((k, describe_value(v)) for k, v in pins.items() if v is not None))
