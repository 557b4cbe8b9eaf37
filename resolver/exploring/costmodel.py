"""Predicted speed of one resolved launch on one machine at one workload: the cost model of `accord tune`.

The model is a roofline with fixed costs, and every number in it is data (`rules/<system>/data/
costs.yaml`): the device's datasheet figures, the efficiency each kernel family reaches (stated
assumptions that `--calibrate` refits), the flag and derived-value names it reads. The code knows
the shape of the computation only: weights and KV bytes per GPU, KV capacity, the running batch it
allows, a decode step (bytes read, FLOPs, tensor-parallel all-reduce, launch overhead), a prefill
(FLOPs, chunk passes), and from them throughput, TTFT and TPOT in a closed loop (a fixed number of
users) or an open one (a request rate).

It predicts to rank candidates against each other, not to promise absolute numbers: fixed costs
and efficiencies are rough, and the same ones apply to every candidate, so their errors mostly
cancel in a comparison. `accord tune --measure` reports how well the ranking holds on this machine.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any, Callable, Mapping

from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import RULES_DIR
from accord.resolver.language.yamlcache import read_yaml_files

GIB = 1 << 30
COSTS_FILE = "data/costs.yaml"


@dataclasses.dataclass(frozen=True)
class Workload:
    """What the users send: prompt and output lengths, and either a number of users that each send
    their next request when the last one finishes (closed loop) or a request rate (open loop)."""

    input_len: int
    output_len: int
    concurrency: int | None = None
    request_rate: float | None = None

    def describe(self) -> str:
        load = (f"{self.request_rate:g} req/s" if self.request_rate is not None
                else f"{self.concurrency} concurrent")
        return f"{self.input_len} in / {self.output_len} out tokens, {load}"


@functools.lru_cache(maxsize=None)
def load_costs(system: str = "llm") -> dict:
    """The cost data of a system (read once; callers never change it)."""
    path = RULES_DIR / system / COSTS_FILE
    if not path.is_file():
        raise UsageError(f"`accord tune` has no cost model for the {system} system ({path} is missing).")
    (data,), = read_yaml_files([path])
    return data


class CostModel:
    """The cost data of a system, with a calibration overlay (`family_speed`) on top."""

    def __init__(self, data: Mapping[str, Any], calibration: Mapping[str, Any] | None = None):
        self.data = data
        self.roles = data["roles"]
        self.derived_names = data["derived"]
        self.family_speed = dict((calibration or {}).get("family_speed") or {})

    @classmethod
    def for_system(cls, system: str = "llm", calibration_file: str | None = None) -> "CostModel":
        return cls(load_costs(system), read_calibration(calibration_file) if calibration_file else None)

    # -- the machine -------------------------------------------------------------------------
    def device(self, facts: Mapping[str, Any]) -> tuple[str, dict]:
        """(entry name, constants) of the device the facts describe; a clear error when unknown."""
        devices = self.data["devices"]
        if facts.get("platform") == "cpu":
            return "cpu", devices["cpu"]
        name = str(facts.get("gpu.name") or "")
        for key, entry in devices.items():
            if any(word.lower() in name.lower() for word in entry.get("match") or ()):
                return key, entry
        raise UsageError(f"`accord tune` has no cost constants for the GPU {name or '(unnamed)'}; add an entry "
                         f"with its datasheet figures to rules/llm/{COSTS_FILE} (devices:), or tune with a "
                         f"preset such as --facts h100.")

    # -- one candidate -----------------------------------------------------------------------
    def predict(self, read: Callable[[str], Any], facts: Mapping[str, Any], workload: Workload,
                model_extra: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """Predicted figures for the launch whose flag and derived values `read(name)` gives, or
        None when the model does not fit (no KV room for one request)."""
        d = self.data
        role = lambda r: read(self.roles[r])          
        derived = lambda r: read(self.derived_names[r])
        extra = dict(model_extra or {})
        _, dev = self.device(facts)
        tp, dp, pp = int(role("tp") or 1), int(role("dp") or 1), int(role("pp") or 1)
        ep = int(role("ep") or 1)
        dpa = bool(role("dp_attention")) and dp > 1
        gpus = tp * pp * (1 if dpa else dp)
        attn_tp = max(1, tp // dp) if dpa else tp
        layers = int(facts.get("model.num_layers") or 1)
        hidden = int(facts.get("model.hidden_size") or 0)
        heads = int(facts.get("model.num_attention_heads") or 1)
        kv_heads = int(facts.get("model.num_key_value_heads") or heads)
        head_dim = int(facts.get("model.head_dim") or (hidden // heads if heads else 0))
        vocab = int(facts.get("model.vocab_size") or 0)
        experts = int(facts.get("model.moe_experts") or 0)
        topk = int(extra.get("moe_topk") or (8 if experts else 0))
        dtype_bytes = d["dtype_bytes"].get(str(role("dtype") or "auto"), 2)

        # Weights: the rules' own size estimate, split over the ranks as the layout splits them.
        weight_bytes = float(derived("weight_bytes") or 0)
        p_attn = float(derived("attention_params") or 0)
        p_mlp = float(derived("dense_mlp_params") or 0)
        p_exp = float(derived("expert_params") or 0)
        p_emb = float(vocab * hidden)
        params = p_attn + p_mlp + p_exp + p_emb
        bpp = weight_bytes / params if params else dtype_bytes
        w_dense_gpu = (p_attn / attn_tp + (p_mlp + p_emb) / tp) * bpp / pp
        w_exp_gpu = p_exp * bpp / tp / pp
        weights_gpu = w_dense_gpu + w_exp_gpu
        active = p_attn + p_mlp + p_emb + (p_exp * topk / experts if experts else 0.0)

        # KV cache: bytes per token each GPU stores, the room left after the weights.
        kv_dtype = str(role("kv_dtype") or "auto")
        kv_elem = d["kv_bytes"].get(kv_dtype) or dtype_bytes
        if facts.get("model.attention") in d["latent_kv_attention"]:
            per_layer = float((extra.get("kv_lora_rank") or 512) + (extra.get("qk_rope_head_dim") or 64))
        else:
            per_layer = 2.0 * max(1, math.ceil(kv_heads / attn_tp)) * head_dim
        kv_token_gpu = layers / pp * per_layer * kv_elem
        if facts.get("platform") == "cpu":
            mem_gib = float(facts.get("host.ram_gib") or 8)
        else:
            mem_gib = float(facts.get("gpu.mem_gib") or 0)
        fraction = float(role("mem_fraction") or 0.85)
        room = mem_gib * GIB * fraction - weights_gpu
        kv_tokens = int(room // kv_token_gpu) if room > 0 and kv_token_gpu > 0 else 0
        if role("token_budget"):
            kv_tokens = min(kv_tokens, int(role("token_budget")))
        page = int(role("page") or 1)
        per_request = math.ceil((workload.input_len + workload.output_len) / page) * page
        fits_per_rank = kv_tokens // per_request
        if fits_per_rank < 1:
            return None
        cap = role("max_running")
        limit = min(fits_per_rank, int(cap)) if cap else fits_per_rank

        # Link for the collectives.
        over = {**d["overheads"], **(dev.get("overheads") or {})}
        nvlink = bool(facts.get("interconnect.nvlink")) and dev.get("nvlink_gb_s")
        link_gb_s = dev["nvlink_gb_s"] if nvlink else dev.get("pcie_gb_s") or 1
        latency_s = dev.get("collective_latency_us", over["collective_latency_us"]["nvlink" if nvlink else "pcie"]) * 1e-6
        coll_eff = over["collective_efficiency"]

        def all_reduce(n: int, nbytes: float) -> float:
            if n <= 1:
                return 0.0
            return latency_s + 2 * (n - 1) / n * nbytes / (link_gb_s * 1e9 * coll_eff)

        def all_to_all(n: int, nbytes: float) -> float:
            if n <= 1:
                return 0.0
            return latency_s + (n - 1) / n * nbytes / (link_gb_s * 1e9 * coll_eff)

        # A device whose ranks share one memory system (a CPU) gives each rank its share only.
        share = gpus if dev.get("shared_by_ranks") else 1
        hbm = dev["hbm_gb_s"] * 1e9 / share
        fp8 = bool(derived("fp8_gemm")) and "fp8" in dev["tflops"]
        peak = dev["tflops"]["fp8" if fp8 else "bf16"] * 1e12 / share
        eff = d["attention_efficiency"]
        family = str(role("decode_attention") or role("attention") or "default")
        a_dec = eff.get(family, eff["default"])["decode_bw"]
        p_family = str(role("prefill_attention") or role("attention") or "default")
        a_pre = eff.get(p_family, eff["default"])["prefill_flops"]
        page_eff = _page_efficiency(d["page_efficiency"], page)
        gemm = d["gemm_efficiency"]
        moe_eff = d["moe_efficiency"].get(str(role("moe_runner") or "auto"), d["moe_efficiency"]["default"])
        speed = float(self.family_speed.get(family, 1.0))
        graphs_off = bool(role("graph_disabled"))
        graph_max = int(role("graph_max_bs") or 0)
        moe_layers = layers if experts else 0

        def decode_step(batch: float) -> tuple[float, dict]:
            """Seconds of one decode iteration with `batch` requests per rank, and its parts."""
            micro = max(batch / pp, 1e-9)
            mlp_batch = micro * (dp if dpa else 1)
            touched = 1.0 - (1.0 - topk / experts) ** mlp_batch if experts else 0.0
            t_weights = w_dense_gpu / (hbm * gemm["decode_bw"]) + w_exp_gpu * touched / (hbm * gemm["decode_bw"] * moe_eff)
            t_kv = micro * (workload.input_len + workload.output_len / 2) * kv_token_gpu / (hbm * a_dec * page_eff)
            t_flops = 2 * active * mlp_batch / (tp * pp) / (peak * gemm["prefill_flops"])
            t_stage = max(t_weights + t_kv, t_flops)
            msg = mlp_batch * hidden * dtype_bytes
            comm = (layers / pp) * all_reduce(attn_tp if dpa else tp, msg)  # after attention
            if ep > 1:
                comm += (moe_layers / pp) * 2 * all_to_all(ep, msg * topk)  # dispatch and combine
            else:
                comm += (layers / pp) * all_reduce(tp, msg)  # after the MLP / MoE
            fixed_attention = layers * float((dev.get("attention_layer_us") or {}).get(family, 0)) * 1e-6
            eager = graphs_off or batch > graph_max
            fixed = (over["step_us"] + batch * over.get("request_token_us", 0)) * 1e-6 + (layers * over["kernels_per_layer"] * over["kernel_launch_us"] * 1e-6
                                              if eager else 0.0)
            total = (pp * (t_stage + comm) + fixed + fixed_attention) / speed
            bound = "compute" if t_flops > t_weights + t_kv else ("kv" if t_kv > t_weights else "weights")
            return total, {"comm_ms": pp * comm * 1e3, "bound": bound}

        # Prefill: one request alone (TTFT), and the stall prefills add to each decode step of a
        # busy server (throughput).
        L = workload.input_len
        chunk = int(role("chunk") or L) if (role("chunk") or 0) > 0 else L
        passes = math.ceil(L / chunk)
        attn_flops = 2 * 2 * layers * heads * head_dim * L * L / 2
        t_gemm = 2 * active * L / tp / (peak * gemm["prefill_flops"])
        t_attn = attn_flops / attn_tp / (peak * a_pre)
        t_read_once = weights_gpu * pp / (hbm * gemm["decode_bw"])   # one forward pass reads the weights
        t_comm = 2 * layers * all_reduce(tp, L * hidden * dtype_bytes)
        t_pass_once = (over["forward_pass_us"] * 1e-6
                       + layers * float((dev.get("attention_layer_us") or {}).get(p_family, 0)) * 1e-6)
        prefill_alone = (max(t_gemm + t_attn, passes * t_read_once) + t_comm + passes * t_pass_once) / speed

        def prefill_stall(arrivals: float) -> float:
            """Seconds of prefill per decode step when `arrivals` requests arrive per step: below one
            per step each gets a pass of its own; above, they share passes of up to a chunk of tokens."""
            per_step = arrivals if arrivals < 1 else math.ceil(arrivals * L / chunk)
            return (arrivals * (t_gemm + t_attn + t_comm) + per_step * (t_read_once + t_pass_once)) / speed

        # Speculative decoding: each verify step yields the expected accepted run plus one token.
        steps = int(role("spec_steps") or 0) if role("draft_model") else 0
        spec = d["speculative"]

        def token_time(batch: float) -> tuple[float, dict]:
            step, parts = decode_step(batch)
            if steps:
                a = spec["accept_rate"]
                verify, _ = decode_step(batch * (steps + 1))
                step = verify + steps * spec["draft_step_fraction"] * step
                step /= (1 - a ** (steps + 1)) / (1 - a)
            return step, parts

        def loaded(batch: float) -> tuple[float, float, dict]:
            """(TPOT, plain decode step, parts) with `batch` requests per rank, prefills included."""
            step, parts = token_time(batch)
            # Under DP attention the ranks step together, so every rank's prefills stall them all.
            stalls = prefill_stall(batch * (dp if dpa else 1) / workload.output_len)
            return step + stalls, step, parts

        saturated = False
        if workload.request_rate is None:
            users = max(1, math.ceil((workload.concurrency or 1) / dp))
            batch = min(users, limit)
            tpot, step, parts = loaded(batch)
            rate = batch / (workload.output_len * tpot + prefill_alone)   # requests finished per second per rank
            waiting = users - batch
            ttft = prefill_alone + step / 2 + (waiting / rate if waiting else 0.0)
            throughput = dp * batch / tpot
        else:
            per_rank = workload.request_rate / dp
            batch = 1.0
            for _ in range(60):  # Little's law: requests in flight = rate x time each stays
                tpot, step, parts = loaded(batch)
                wanted = per_rank * (prefill_alone + workload.output_len * tpot)
                if wanted > limit:
                    saturated = True
                    batch = float(limit)
                    break
                if abs(wanted - batch) < 1e-3:
                    break
                batch = max(1.0, wanted)
            tpot, step, parts = loaded(batch)
            ttft = prefill_alone + step / 2
            throughput = (dp * batch / tpot) if saturated else workload.request_rate * workload.output_len
        return {
            "throughput_tok_s": round(throughput, 1),
            "throughput_per_gpu": round(throughput / gpus, 1),
            "tok_s_per_user": round(1.0 / tpot, 2),
            "ttft_ms": None if saturated else round(ttft * 1e3, 2),
            "tpot_ms": round(tpot * 1e3, 3),
            "decode_step_ms": round(step * 1e3, 3),
            "prefill_ms": round(prefill_alone * 1e3, 2),
            "comm_ms": round(parts["comm_ms"], 3),
            "bound": parts["bound"],
            "gpus": gpus,
            "weights_gib_per_gpu": round(weights_gpu / GIB, 2),
            "kv_gib_per_gpu": round(max(room, 0) / GIB, 2),
            "kv_bytes_per_token_per_gpu": round(kv_token_gpu, 1),
            "kv_capacity_tokens": kv_tokens,
            "concurrency_fits": fits_per_rank * dp,
            "running_per_rank": round(batch, 1),
            "saturated": saturated,
        }


def _page_efficiency(table: Mapping[Any, float], page: int) -> float:
    """The listed efficiency of the largest listed page size not above `page`."""
    sizes = sorted(int(k) for k in table)
    best = table[sizes[0]] if sizes else 1.0
    for size in sizes:
        if size <= page:
            best = table[size] if size in table else table[str(size)]
    return float(best)


def read_calibration(path: str) -> dict:
    """A calibration overlay written by `accord tune --calibrate` (YAML or JSON)."""
    import yaml

    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"cannot read calibration file {path}: {err.strerror or err}; write one with "
                         "`accord tune --measure K --calibrate FILE`.") from None
    except yaml.YAMLError as err:
        raise UsageError(f"{path} is not a YAML calibration file ({err}).") from None
    if not isinstance(data, dict) or not isinstance(data.get("family_speed"), dict):
        raise UsageError(f"{path}: expected a mapping with `family_speed: {{backend: factor}}`, as "
                         "`accord tune --calibrate` writes.")
    for name, value in data["family_speed"].items():
        if not isinstance(value, (int, float)) or value <= 0:
            raise UsageError(f"{path}: family_speed.{name} = {value!r}; each factor must be a positive number.")
    return data


def model_config_extra(model_path: str | None, system: str = "llm", revision: str | None = None) -> dict[str, Any]:
    """Numbers the cost model reads from the model's config.json beyond the `model.*` facts
    (the experts each token visits, MLA's latent width), spelled as costs.yaml lists them. The
    config comes from wherever the model's facts came from (a folder, the Hugging Face cache, the
    hub or a built-in card)."""
    from accord.resolver.facts.model_sources import find_model

    if model_path is None:
        return {}
    try:
        source = find_model(model_path, system, revision).source
        config = source.read("config.json") if source is not None and source.kind != "gguf" else None
    except UsageError:
        return {}  # the facts loader reports an unreadable config; the cost model just lacks its extras
    if config is None:
        return {}
    sources = [config] + [config[k] for k in ("text_config", "llm_config", "language_config")
                          if isinstance(config.get(k), dict)]
    found: dict[str, Any] = {}
    for key, spellings in load_costs(system)["model_config"].items():
        for source in sources:
            value = next((source[s] for s in spellings if isinstance(source.get(s), int)), None)
            if value is not None:
                found[key] = value
                break
    return found
