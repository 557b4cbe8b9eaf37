"""The shape of one launch as the cost model sees it: layout, bytes per GPU, KV room, running batch.

`launch_of` reads the resolved flag and derived values (through the names costs.yaml lists under
`roles:` and `derived:`) and the model facts, and returns a `Launch`: how the layout splits the
weights and the KV cache over the GPUs, how many tokens of KV each rank holds, and how many
requests of the workload run at once. It knows no timing; `cost_steps` turns a Launch into seconds.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

GIB = 1 << 30


@dataclasses.dataclass
class Launch:
    """One launch's sizes, per GPU where it says so."""

    tp: int
    dp: int
    pp: int
    ep: int
    dpa: bool                 # DP attention: attention split dp ways, the MLP/MoE over tp
    gpus: int
    attn_tp: int
    layers: int
    hidden: int
    heads: int
    head_dim: int
    experts: int
    topk: int
    dtype_bytes: float
    w_dense_gpu: float        # bytes of non-expert weights per GPU
    w_exp_gpu: float          # bytes of expert weights per GPU
    p_dense_active: float     # parameters every token multiplies (attention, dense MLP, embeddings)
    p_exp_active: float       # expert parameters one token multiplies (topk of them)
    kv_token_gpu: float       # KV bytes per token per GPU
    room: float               # bytes left for the KV cache per GPU
    kv_tokens: int            # KV capacity in tokens per rank
    fits_per_rank: int        # whole requests (input + output) the KV room holds
    limit: int                # requests running at once per rank (KV in steady state, the cap)
    chunk: int                # chunked-prefill size in tokens
    page: int
    spec_steps: int
    family: str               # decode attention backend
    p_family: str             # prefill attention backend
    moe_runner: str
    fp8: bool
    eager_above: int          # batches above this run without CUDA graphs (0: always eager)
    mixed_chunk: bool = False  # prefill chunks ride in decode steps (SGLang --enable-mixed-chunk)
    nodes: int = 1            # machines the launch spans
    tp_per_node: int = 0      # ranks of one tensor-parallel group on one node (0: the whole group)

    @property
    def weights_gpu(self) -> float:
        return self.w_dense_gpu + self.w_exp_gpu

    def crosses(self, group: int) -> bool:
        """A group of `group` consecutive tensor-parallel ranks (the TP group, an attention group
        under DP attention, an expert-parallel group) spans more than one node."""
        return self.nodes > 1 and 0 < self.tp_per_node < group

    @property
    def pp_hops(self) -> int:
        """Pipeline stage boundaries that cross from one node to the next."""
        return min(self.pp, self.nodes) - 1 if self.nodes > 1 and self.pp > 1 else 0


def _layout(role: Callable[[str], Any]) -> dict[str, Any]:
    """The parallel sizes. Over several nodes the pipeline stages are spread over the nodes first,
    and a TP group spans the nodes one stage gets (nodes // pp of them, at least one), its ranks
    split evenly over them."""
    tp, dp, pp = int(role("tp") or 1), int(role("dp") or 1), int(role("pp") or 1)
    dpa = bool(role("dp_attention")) and dp > 1
    nodes = max(1, int(role("nodes") or 1))
    return {"tp": tp, "dp": dp, "pp": pp, "ep": int(role("ep") or 1), "dpa": dpa,
            "gpus": tp * pp * (1 if dpa else dp), "attn_tp": max(1, tp // dp) if dpa else tp,
            "nodes": nodes, "tp_per_node": max(1, tp // max(1, nodes // pp)) if nodes > 1 else 0}


def _weights(data: Mapping[str, Any], derived: Callable[[str], Any], facts: Mapping[str, Any],
             layout: Mapping[str, Any], dtype_bytes: float, topk: int) -> dict[str, float]:
    """The rules' own size estimate, split over the ranks as the layout splits them."""
    hidden = int(facts.get("model.hidden_size") or 0)
    experts = int(facts.get("model.moe_experts") or 0)
    p_attn = float(derived("attention_params") or 0)
    p_mlp = float(derived("dense_mlp_params") or 0)
    p_exp = float(derived("expert_params") or 0)
    p_emb = float(int(facts.get("model.vocab_size") or 0) * hidden)
    params = p_attn + p_mlp + p_exp + p_emb
    bpp = float(derived("weight_bytes") or 0) / params if params else dtype_bytes
    tp, pp, attn_tp = layout["tp"], layout["pp"], layout["attn_tp"]
    return {"w_dense_gpu": (p_attn / attn_tp + (p_mlp + p_emb) / tp) * bpp / pp,
            "w_exp_gpu": p_exp * bpp / tp / pp,
            "p_dense_active": p_attn + p_mlp + p_emb,
            "p_exp_active": p_exp * topk / experts if experts else 0.0}


def _kv_per_token(data: Mapping[str, Any], role: Callable[[str], Any], facts: Mapping[str, Any],
                  extra: Mapping[str, Any], layout: Mapping[str, Any], dtype_bytes: float) -> float:
    """KV bytes one token stores on each GPU (a latent vector for MLA-style attention)."""
    heads = int(facts.get("model.num_attention_heads") or 1)
    kv_heads = int(facts.get("model.num_key_value_heads") or heads)
    hidden = int(facts.get("model.hidden_size") or 0)
    head_dim = int(facts.get("model.head_dim") or (hidden // heads if heads else 0))
    elem = data["kv_bytes"].get(str(role("kv_dtype") or "auto")) or dtype_bytes
    if facts.get("model.attention") in data["latent_kv_attention"]:
        per_layer = float((extra.get("kv_lora_rank") or 512) + (extra.get("qk_rope_head_dim") or 64))
    else:
        per_layer = 2.0 * max(1, math.ceil(kv_heads / layout["attn_tp"])) * head_dim
    return int(facts.get("model.num_layers") or 1) / layout["pp"] * per_layer * elem


def _memory(role: Callable[[str], Any], facts: Mapping[str, Any], weights_gpu: float,
            kv_token_gpu: float) -> tuple[float, int]:
    """(bytes left for the KV cache per GPU, KV capacity in tokens)."""
    mem_gib = float(facts.get("host.ram_gib") or 8) if facts.get("platform") == "cpu" else float(facts.get("gpu.mem_gib") or 0)
    room = mem_gib * GIB * float(role("mem_fraction") or 0.85) - weights_gpu
    tokens = int(room // kv_token_gpu) if room > 0 and kv_token_gpu > 0 else 0
    if role("token_budget"):
        tokens = min(tokens, int(role("token_budget")))
    return room, tokens


def _running(data: Mapping[str, Any], role: Callable[[str], Any], kv_tokens: int, page: int,
             input_len: int, output_len: int, admits: float, biased: float = 1.0) -> tuple[int, int]:
    """(whole requests the KV room holds, requests that run at once per rank). Requests that run
    together are at different points of their output, so in steady state each holds its prompt and
    a share (`admission.output_share`) of its output (`biased` times the mean where lengths vary:
    long requests stay longer); the engine's scheduler admits `admits` of what fits (it reserves
    room for growth); the running-request cap bounds it."""
    whole = math.ceil((input_len + output_len) / page) * page
    fits = kv_tokens // whole
    share = float(data["admission"]["output_share"])
    held = math.ceil((input_len + share * output_len * biased) / page) * page
    cap = role("max_running")
    limit = max(1, fits, int(admits * kv_tokens / max(held, 1))) if fits else 0
    return fits, (min(limit, int(cap)) if cap else limit)


def launch_of(data: Mapping[str, Any], roles: Mapping[str, str], derived_names: Mapping[str, str],
              read: Callable[[str], Any], facts: Mapping[str, Any], input_len: int, output_len: int,
              extra: Mapping[str, Any], admits: float = 1.0, biased: float = 1.0) -> Launch | None:
    """The launch `read` describes, for requests of these lengths (None: no KV room for one);
    `admits`: the share of the KV room the serving engine's scheduler fills; `biased`: the mean
    output length of a running request relative to the mean (Workload.spread)."""
    role = lambda r: read(roles[r]) if r in roles else None
    derived = lambda r: read(derived_names[r])
    layout = _layout(role)
    experts = int(facts.get("model.moe_experts") or 0)
    topk = int(extra.get("moe_topk") or (8 if experts else 0))
    dtype_bytes = data["dtype_bytes"].get(str(role("dtype") or "auto"), 2)
    weights = _weights(data, derived, facts, layout, dtype_bytes, topk)
    kv_token_gpu = _kv_per_token(data, role, facts, extra, layout, dtype_bytes)
    room, kv_tokens = _memory(role, facts, weights["w_dense_gpu"] + weights["w_exp_gpu"], kv_token_gpu)
    page = int(role("page") or 1)
    fits, limit = _running(data, role, kv_tokens, page, input_len, output_len, admits, biased)
    if fits < 1:
        return None
    heads = int(facts.get("model.num_attention_heads") or 1)
    hidden = int(facts.get("model.hidden_size") or 0)
    chunk = int(role("chunk") or 0)
    graphs_off = bool(role("graph_disabled"))
    return Launch(
        **layout, **weights, layers=int(facts.get("model.num_layers") or 1), hidden=hidden, heads=heads,
        head_dim=int(facts.get("model.head_dim") or (hidden // heads if heads else 0)), experts=experts,
        topk=topk, dtype_bytes=dtype_bytes, kv_token_gpu=kv_token_gpu, room=room, kv_tokens=kv_tokens,
        fits_per_rank=fits, limit=limit, chunk=chunk if chunk > 0 else max(input_len, 1), page=page,
        spec_steps=int(role("spec_steps") or 0) if role("draft_model") else 0,
        family=str(role("decode_attention") or role("attention") or "default"),
        p_family=str(role("prefill_attention") or role("attention") or "default"),
        moe_runner=str(role("moe_runner") or "auto"), fp8=bool(derived("fp8_gemm")),
        eager_above=0 if graphs_off else int(role("graph_max_bs") or 0),
        mixed_chunk=bool(role("mixed_chunk")))
