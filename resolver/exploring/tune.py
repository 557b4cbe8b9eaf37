"""`accord tune`: the fastest legal launch for a model, a machine and a workload.

The search never evaluates an illegal candidate: the solver judges every combination before the
cost model (accord.resolver.exploring.costmodel) predicts it. It runs in stages, each on top
of the best of the one before, because the speed axes multiply into millions of combinations:

1. layout: every combination of the parallel sizes (tp, dp, pp, ep, DP attention; the node count
   too with `max_nodes` above 1, a launch over several nodes getting a rendezvous placeholder), judged against
   the baseline's resolve (`Launch.pinned`); each legal one is resolved and predicted as resolved;
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

This module is the entry point (`tune`, `predict_launch`); the work is in
- `tune_candidates`: the candidate, the SLA, the result, the tie-break;
- `tune_search`: the stages, their axes, the solver's verdicts, the predictions;
- `tune_ranking`: the ranking, the Pareto frontier, the shown candidates and why each wins.
"""

from __future__ import annotations

from typing import Any, Mapping

from accord.resolver.api import resolve
from accord.resolver.errors import UsageError
from accord.resolver.exploring.costmodel import CostModel, Workload
from accord.resolver.exploring.tune_candidates import SLA, TuneResult
from accord.resolver.exploring.tune_search import Search


def predict_launch(system: str, user: Mapping[str, Any], facts: Mapping[str, Any], workload: Workload,
                   cost_model: CostModel | None = None) -> dict[str, Any] | None:
    """The prediction for one launch command as `accord resolve` resolves it (None: no KV room)."""
    search = Search(system, user, facts, workload, cost_model=cost_model)
    config = resolve(system, user, facts)
    return search.costs.predict(search.reader(search.config_env(config, user)), facts, workload, search.model_extra)


def tune(system: str, user: Mapping[str, Any], facts: Mapping[str, Any], workload: Workload,
         sla: SLA = SLA(), allow_quantization: bool = False, cost_model: CostModel | None = None,
         beam: Mapping[str, int] | None = None, max_nodes: int = 1) -> TuneResult:
    """Search, predict and rank; raises NoCandidate (exit 3) or the command's own ConflictError.
    `max_nodes`: also search launches spanning 2 .. max_nodes machines like the facts' one."""
    if workload.input_len < 1 or workload.output_len < 1:
        raise UsageError("--input-len and --output-len must be at least 1 token.")
    if max_nodes < 1:
        raise UsageError("--max-nodes must be at least 1.")
    return Search(system, user, facts, workload, sla, allow_quantization, cost_model, beam, max_nodes).run()
