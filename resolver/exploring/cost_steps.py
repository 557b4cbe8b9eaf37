"""Seconds of the pieces a server's time is made of: a decode step, a prefill, the collectives.

`rates_of` turns the device's datasheet figures and the efficiencies of costs.yaml into the rates
one launch runs at (`Rates`); the functions below turn a `Launch` (cost_launch) and a batch into
seconds. Which of them add up to TPOT, TTFT and throughput at a workload is `cost_load`'s job.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Mapping

from accord.resolver.exploring.cost_launch import Launch

@functools.lru_cache(maxsize=1)
def reference_engine() -> str:
    """The engine `accord resolve` launches (rules/packages.yaml `engine`, read once); other engines' factors are relative to it."""
    from accord.resolver.facts.probe import engine_package

    return engine_package()


@dataclasses.dataclass
class Rates:
    """What one rank of one launch reaches, and the fixed costs it pays (seconds)."""

    hbm: float                # bytes/s
    peak: float               # FLOP/s of the GEMMs' data type
    link: float               # bytes/s per direction for collectives
    latency_s: float          # per collective
    node_link: float          # ... for collectives spanning nodes (never above `link`)
    node_latency_s: float     # ... (never below `latency_s`)
    coll_eff: float
    weight_bw: float          # fraction of HBM bandwidth weight reads reach in decode
    attn_bw: float            # fraction of HBM bandwidth the decode attention backend reaches
    gemm_flops: float         # fraction of peak the GEMMs reach in prefill / large batches
    knee: float               # how sharply a step turns from memory- to compute-bound (inf: the max of the two)
    attn_flops: float         # fraction of peak the prefill attention backend reaches
    moe: Mapping[str, float]  # runner efficiency, imbalance, half-efficiency batch, per-layer cost
    speculative: Mapping[str, float]   # accept rate, draft step cost
    step_s: float             # per decode step (scheduler, sampling)
    layer_s: float            # per layer and step with CUDA graphs: launch and synchronisation
    eager_layer_s: float      # per layer and step without CUDA graphs
    request_s: float          # per running request and step
    pass_s: float             # per extra prefill pass (a chunk, a prefill batch)
    first_token_s: float      # per request: tokenizing, scheduling, the first token's way out
    scheduler_steps: int      # decode steps the engine runs per scheduling round (multi-step scheduling)
    mixed_prefill: bool       # prefill chunks ride in decode steps (else a prefill runs as a batch of its own)
    decode_factor: float      # the serving engine's (and calibration's) factor on decode steps
    prefill_factor: float     # ... on prefill


def engine_factors(data: Mapping[str, Any], engine: tuple[str, str] | None) -> dict[str, float]:
    """The factors of a serving engine and release (`engines:` in costs.yaml): the reference
    engine's (SGLang, what `accord resolve` launches), then the engine's own entry, then each `NAME RELEASE-PREFIX` entry the release starts with (longer prefixes later)."""
    name, release = engine or (reference_engine(), "")
    table = data.get("engines") or {}
    found = {"decode": 1.0, "prefill": 1.0, "first_token_ms": 0.0, "admits": 1.0, "scheduler_steps": 1,
             "mixed_prefill": 0}
    found.update(table.get(reference_engine()) or {})   # an engine without an entry runs like the reference
    found.update(table.get(name) or {})
    prefixed = sorted((k for k in table if k.startswith(name + " ") and release.startswith(k[len(name) + 1:])), key=len)
    for key in prefixed:
        found.update(table[key])
    return {k: float(v) for k, v in found.items() if isinstance(v, (int, float))}


def _page_efficiency(table: Mapping[Any, float], page: int) -> float:
    """The listed efficiency of the largest listed page size not above `page` (1.0: none listed)."""
    best = 1.0
    for size in sorted(int(k) for k in table):
        if size <= page:
            best = float(table[size] if size in table else table[str(size)])
    return best


def rates_of(data: Mapping[str, Any], dev: Mapping[str, Any], launch: Launch, facts: Mapping[str, Any],
             engine: tuple[str, str] | None, family_speed: Mapping[str, float]) -> Rates:
    over = {**data["overheads"], **(dev.get("overheads") or {})}
    nvlink = bool(facts.get("interconnect.nvlink")) and dev.get("nvlink_gb_s")
    share = launch.gpus if dev.get("shared_by_ranks") else 1   # ranks sharing one memory (a CPU)
    fp8 = launch.fp8 and "fp8" in dev["tflops"]
    quant = data["quantized"]["fp8"] if fp8 else {"compute": 1.0, "weight_bw": 1.0, "moe_bw": 1.0}
    eff = data["attention_efficiency"]
    gemm = data["gemm_efficiency"]
    pages = (data.get("page_efficiency") or {}).get(launch.family) or {}
    moe = dict(data["moe"])
    moe["runner"] = float(data["moe_efficiency"].get(launch.moe_runner, data["moe_efficiency"]["default"])) * quant["moe_bw"]
    layer = lambda key: launch.layers * float((dev.get("attention_layer_us") or {}).get(key, 0)) * 1e-6
    factors = engine_factors(data, engine)
    speed = float(family_speed.get(launch.family, 1.0))
    link = (dev["nvlink_gb_s"] if nvlink else dev.get("pcie_gb_s") or 1) * 1e9
    latency = dev.get("collective_latency_us", over["collective_latency_us"]["nvlink" if nvlink else "pcie"]) * 1e-6
    # Between nodes: the slower of the node's own link and the one between nodes (per GPU).
    node_nvlink = nvlink and dev.get("internode") == "nvlink"
    node_bw = float(dev["nvlink_gb_s"] if node_nvlink else dev.get("ib_gb_s") or over["internode_gb_s"]) * 1e9
    node_latency = over["collective_latency_us"]["nvlink" if node_nvlink else "ib"] * 1e-6
    return Rates(
        hbm=dev["hbm_gb_s"] * 1e9 / share,
        peak=dev["tflops"]["bf16"] * 1e12 * float(quant["compute"]) / share,
        link=link,
        latency_s=latency,
        node_link=min(link, node_bw),
        node_latency_s=max(latency, node_latency),
        coll_eff=over["collective_efficiency"],
        weight_bw=gemm["decode_bw"] * float(quant["weight_bw"]),
        attn_bw=eff.get(launch.family, eff["default"])["decode_bw"] * _page_efficiency(pages, launch.page),
        gemm_flops=gemm["prefill_flops"],
        knee=float(gemm.get("knee") or math.inf),
        attn_flops=eff.get(launch.p_family, eff["default"])["prefill_flops"],
        moe=moe,
        speculative=data["speculative"],
        step_s=over["step_us"] * 1e-6 + layer(launch.family),
        layer_s=over["layer_us"] * 1e-6,
        eager_layer_s=over["kernels_per_layer"] * over["kernel_launch_us"] * 1e-6,
        request_s=over["request_token_us"] * 1e-6,
        pass_s=over["forward_pass_us"] * 1e-6 + layer(launch.p_family),
        first_token_s=(over["first_token_us"] * 1e-6 + factors["first_token_ms"] * 1e-3),
        scheduler_steps=max(1, int(factors["scheduler_steps"])),
        mixed_prefill=bool(factors["mixed_prefill"]) or launch.mixed_chunk,
        decode_factor=factors["decode"] / speed,
        prefill_factor=factors["prefill"] / speed)


# -- collectives ---------------------------------------------------------------------------------

def _over(r: Rates, across: bool) -> tuple[float, float]:
    """(bytes/s, latency) of a collective within one node, or spanning nodes."""
    return (r.node_link, r.node_latency_s) if across else (r.link, r.latency_s)


def all_reduce(r: Rates, n: int, nbytes: float, across: bool = False) -> float:
    link, latency = _over(r, across)
    return 0.0 if n <= 1 else latency + 2 * (n - 1) / n * nbytes / (link * r.coll_eff)


def all_to_all(r: Rates, n: int, nbytes: float, across: bool = False) -> float:
    link, latency = _over(r, across)
    return 0.0 if n <= 1 else latency + (n - 1) / n * nbytes / (link * r.coll_eff)


def stage_sends(l: Launch, r: Rates, nbytes: float) -> float:
    """Seconds of the pipeline handing `nbytes` of activations across the node boundaries it
    crosses (within a node the send hides behind the stages' work)."""
    return l.pp_hops * (r.node_latency_s + nbytes / (r.node_link * r.coll_eff)) if l.pp_hops else 0.0


def collectives(l: Launch, r: Rates, tokens: float) -> float:
    """Seconds of one forward pass's collectives for `tokens` tokens per rank: an all-reduce after
    attention, and after the MLP either an all-reduce or, under expert parallelism, an all-to-all
    dispatch and combine of each token's top-k activations; a group spanning nodes runs at the link
    between them; with the pipeline's sends across nodes (per stage, as the step adds up stages)."""
    msg = tokens * l.hidden * l.dtype_bytes
    per_stage = l.layers / l.pp
    attn = l.attn_tp if l.dpa else l.tp
    comm = per_stage * all_reduce(r, attn, msg, l.crosses(attn))
    if l.pp_hops:
        comm += stage_sends(l, r, msg) / l.pp
    if l.ep > 1 and l.experts:
        return comm + per_stage * 2 * all_to_all(r, l.ep, msg * l.topk, l.crosses(l.ep))
    return comm + per_stage * all_reduce(r, l.tp, msg, l.crosses(l.tp))


# -- MoE -----------------------------------------------------------------------------------------

def moe_costs(l: Launch, r: Rates, tokens: float) -> tuple[float, float]:
    """(seconds reading expert weights, seconds of expert GEMMs) for `tokens` tokens per step.
    Only the experts some token visits are read; the GEMMs pay for the busiest expert (load
    imbalance shrinks as each expert gets more tokens) and for grouped GEMMs running at small
    per-expert batches (efficiency m / (m + half) at m tokens per expert)."""
    if not l.experts:
        return 0.0, 0.0
    m = tokens * l.topk / l.experts
    touched = 1.0 - (1.0 - l.topk / l.experts) ** tokens
    read = l.w_exp_gpu * touched / (r.hbm * r.weight_bw * r.moe["runner"])
    imbalance = 1.0 + r.moe["imbalance"] / math.sqrt(max(m, 1.0))
    grouped = (m + r.moe["half_batch"]) / max(m, 1e-9)
    flops = 2 * l.p_exp_active * tokens / (l.tp * l.pp) / (r.peak * r.moe["gemm_flops"])
    return read, flops * imbalance * min(grouped, 1e3)


# -- decode and prefill --------------------------------------------------------------------------

def roofline(memory: float, compute: float, knee: float) -> float:
    """Seconds of a step that streams `memory` seconds of bytes and does `compute` seconds of
    arithmetic: the larger of the two far from the ridge, more than it near the ridge (where the
    kernels overlap the two imperfectly): (memory^k + compute^k)^(1/k)."""
    if math.isinf(knee) or memory <= 0 or compute <= 0:
        return max(memory, compute)
    big = max(memory, compute)
    return big * ((memory / big) ** knee + (compute / big) ** knee) ** (1 / knee)


def decode_step(l: Launch, r: Rates, batch: float, context: float) -> tuple[float, dict]:
    """Seconds of one decode step with `batch` requests per rank of `context` tokens each, and its
    parts. The floor holds with CUDA graphs too: every layer pays launch and synchronisation."""
    micro = max(batch / l.pp, 1e-9)
    tokens = micro * (l.dp if l.dpa else 1)        # the MLP of a DP-attention rank sees every rank's tokens
    t_dense = l.w_dense_gpu / (r.hbm * r.weight_bw)
    t_exp_read, t_exp_flops = moe_costs(l, r, tokens)
    t_kv = micro * context * l.kv_token_gpu / (r.hbm * r.attn_bw)
    t_flops = 2 * l.p_dense_active * tokens / (l.tp * l.pp) / (r.peak * r.gemm_flops) + t_exp_flops
    t_memory = t_dense + t_exp_read + t_kv
    comm = collectives(l, r, tokens)
    eager = l.eager_above <= 0 or batch > l.eager_above
    per_layer = r.layer_s + (r.eager_layer_s if eager else 0.0) + (r.moe["layer_us"] * 1e-6 if l.experts else 0.0)
    fixed = r.step_s + batch * r.request_s + l.layers * per_layer
    total = (l.pp * (roofline(t_memory, t_flops, r.knee) + comm) + fixed) * r.decode_factor
    bound = "compute" if t_flops > t_memory else ("kv" if t_kv > t_dense + t_exp_read else "weights")
    return total, {"comm_ms": l.pp * comm * 1e3, "bound": bound}


def prefill_compute(l: Launch, r: Rates, tokens: float, span: float) -> float:
    """Seconds of the arithmetic and collectives of `tokens` prompt tokens, each attending to
    `span` tokens on average (half its prompt)."""
    _, t_exp = moe_costs(l, r, tokens) if l.experts else (0.0, 0.0)
    t_gemm = 2 * l.p_dense_active * tokens / l.tp / (r.peak * r.gemm_flops) + t_exp * l.pp
    t_attn = 4 * l.layers * l.heads * l.head_dim * tokens * span / l.attn_tp / (r.peak * r.attn_flops)
    msg = tokens * l.hidden * l.dtype_bytes
    comm = 2 * l.layers * all_reduce(r, l.tp, msg, l.crosses(l.tp)) + stage_sends(l, r, msg)
    return (t_gemm + t_attn + comm) * r.prefill_factor


def prefill_time(l: Launch, r: Rates, tokens: float, span: float) -> float:
    """Seconds to prefill `tokens` prompt tokens in chunks of `l.chunk`: the arithmetic, or reading
    the weights once per pass when that is longer, plus each pass's fixed cost (prefill passes run
    without CUDA graphs)."""
    passes = max(1, math.ceil(tokens / l.chunk))
    read = passes * l.weights_gpu * l.pp / (r.hbm * r.weight_bw)
    return max(prefill_compute(l, r, tokens, span), read) + passes * (r.pass_s + l.layers * r.eager_layer_s)
