"""What the LLM engine reads from a resolved config, checked once, before any process starts.

The resolver decides; the engine executes. What the engine implements is data, the engine profile
`rules/llm/engine.yaml`, which `accord serve` resolves with; this module holds no legality rule of
its own. It only asserts that the config it is handed is one the profile allows: a choice the
engine does not implement is an `UnsupportedConfig` (a bug in the profile, not a user error). A
setting that is still None, or a fact the KV sizing needs, is a UsageError naming what to pass.
The parent process builds `EngineSettings` to fail fast, and every child rebuilds it from the same
hash-checked config.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from accord.resolver.errors import UsageError
from accord.resolver.frozen import ResolvedConfig

ATTENTION_BACKENDS = ("torch_native", "triton")
KV_CACHE_DTYPES = ("auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2")
LOAD_FORMATS = ("auto", "safetensors", "dummy")
SCHEDULE_POLICIES = ("fcfs", "lpm")
GRAMMAR_BACKENDS = ("xgrammar", "llguidance", "none")
PLATFORMS = ("cpu", "cuda", "rocm")

# Features this engine does not implement, with the values that mean "off" (the profile refuses them).
NOT_IMPLEMENTED_UNLESS = {
    "quantization": (None, "gguf"),  # GGUF weights are dequantized at load (engine/llm/weights.py)
    "speculative_algorithm": (None,),
    "enable_lora": (None, False),
    "tokenizer_worker_num": (1,),
    "enable_torch_compile": (False,),
    "enable_dp_lm_head": (False,),
}


class UnsupportedConfig(AssertionError):
    """The resolved config asks for something the engine does not implement. `accord serve`
    resolves with the engine profile, which refuses such values, so this is a bug to report."""

    def __init__(self, what: str):
        super().__init__(f"Accord bug: the resolved config has {what}, which the engine does not "
                         "implement and the engine profile (rules/llm/engine.yaml) should have "
                         "refused; please report it with the command line.")


@dataclasses.dataclass(frozen=True)
class Rank:
    """One scheduler process: its place in the (dp, pp, tp) grid and in its torch.distributed world."""

    dp: int              # DP group (a replica, or an attention group under DP attention)
    pp: int
    tp: int
    world: int           # which torch.distributed world it joins
    world_rank: int      # its rank inside that world
    node_index: int      # its index among the ranks of its node (picks the GPU)

    @property
    def name(self) -> str:
        return f"scheduler_dp{self.dp}_pp{self.pp}_tp{self.tp}"


@dataclasses.dataclass(frozen=True)
class Topology:
    """The process grid. Without DP attention each of the dp_size replicas is its own world of
    pp_size x tp_size ranks; with DP attention one world of pp_size x tp_size ranks is split into
    dp_size attention groups of tp_size / dp_size ranks that share the MLP."""

    tp_size: int
    pp_size: int
    dp_size: int
    dp_attention: bool
    nnodes: int
    node_rank: int

    @property
    def num_worlds(self) -> int:
        return 1 if self.dp_attention else self.dp_size

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size

    @property
    def attn_tp_size(self) -> int:
        """Ranks that split one attention group's heads."""
        return self.tp_size // self.dp_size if self.dp_attention else self.tp_size

    def all_ranks(self) -> list[Rank]:
        ranks = []
        total = self.num_worlds * self.world_size
        per_node = total // self.nnodes
        for world in range(self.num_worlds):
            for pp in range(self.pp_size):
                for tp in range(self.tp_size):
                    world_rank = pp * self.tp_size + tp
                    dp = tp // self.attn_tp_size if self.dp_attention else world
                    index = world * self.world_size + world_rank
                    ranks.append(Rank(dp, pp, tp, world, world_rank, index % per_node))
        return ranks

    def ranks_on_this_node(self) -> list[Rank]:
        per_node = self.num_worlds * self.world_size // self.nnodes
        return [r for r in self.all_ranks()
                if (r.world * self.world_size + r.world_rank) // per_node == self.node_rank]


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    topology: Topology
    platform: str
    host: str
    port: int
    api_key: str | None
    served_model_name: str | None
    nccl_port: int | None
    dist_init_addr: str | None
    dist_timeout_s: float | None
    base_gpu_id: int
    gpu_id_step: int
    model_path: str | None
    load_format: str
    dtype: str
    context_length: int | None
    skip_tokenizer_init: bool
    kv_cache_dtype: str
    quantization_param_path: str | None
    page_size: int
    mem_fraction_static: float | None
    device_mem_gib: float | None
    max_total_tokens: int | None
    chunked_prefill_size: int | None
    max_prefill_tokens: int
    max_running_requests: int | None
    max_queued_requests: int | None
    schedule_policy: str
    disable_radix_cache: bool
    random_seed: int
    stream_interval: int
    prefill_attention_backend: str
    decode_attention_backend: str
    triton_num_kv_splits: int
    triton_split_tile_size: int | None
    triton_reduce_in_fp32: bool
    cuda_graph_bs_decode: tuple[int, ...]
    grammar_backend: str = "none"
    json_any_whitespace: bool = True
    mixed_chunk: bool = False

    @property
    def device_type(self) -> str:
        return "cpu" if self.platform == "cpu" else "cuda"

    @property
    def triton_interpreted(self) -> bool:
        """Does a phase run the Triton kernels on CPU, which only the Triton interpreter can?"""
        return self.device_type == "cpu" and "triton" in (self.prefill_attention_backend,
                                                          self.decode_attention_backend)

    def device_for(self, rank: Rank) -> str:
        """cpu, or cuda:<base_gpu_id + node_index * gpu_id_step>."""
        if self.device_type == "cpu":
            return "cpu"
        return f"cuda:{self.base_gpu_id + rank.node_index * self.gpu_id_step}"

    @classmethod
    def from_config(cls, config: ResolvedConfig) -> "EngineSettings":
        if config.system != "llm":
            raise UsageError(f"the LLM engine was given a {config.system!r} config; serve it with "
                             "`accord serve --system diffusion`.")
        v, facts = config.values, config.facts
        _refuse_unimplemented(v)
        platform = facts.get("platform")
        if platform not in PLATFORMS:
            raise UnsupportedConfig(f"platform {platform!r}")
        topology = _topology(v)
        mem_fraction = v.get("mem_fraction_static")
        max_total_tokens = v.get("max_total_tokens")
        if mem_fraction is None and max_total_tokens is None:
            raise UsageError("the KV cache needs a size: --mem-fraction-static resolved to None and "
                             "--max-total-tokens is not set; pass one of them.")
        device_mem = _device_memory_gib(facts, platform, topology) if mem_fraction is not None else None
        attention = _choice(v, "attention_backend", ATTENTION_BACKENDS)
        chunk = v.get("chunked_prefill_size")
        return cls(
            topology=topology, platform=platform, host=_required(v, "host"), port=_required(v, "port"),
            api_key=v.get("api_key"), served_model_name=v.get("served_model_name"),
            nccl_port=v.get("nccl_port"), dist_init_addr=v.get("dist_init_addr"),
            dist_timeout_s=v.get("dist_timeout"),
            base_gpu_id=_required(v, "base_gpu_id"), gpu_id_step=_positive(v, "gpu_id_step"),
            model_path=v.get("model_path"),
            load_format=_choice(v, "load_format", LOAD_FORMATS),
            dtype=_required(v, "dtype"),
            context_length=v.get("context_length"),
            skip_tokenizer_init=bool(v.get("skip_tokenizer_init")),
            kv_cache_dtype=_choice(v, "kv_cache_dtype", KV_CACHE_DTYPES),
            quantization_param_path=v.get("quantization_param_path"),
            page_size=_positive(v, "page_size"),
            mem_fraction_static=mem_fraction, device_mem_gib=device_mem,
            max_total_tokens=max_total_tokens,
            chunked_prefill_size=None if chunk is None or chunk <= 0 else int(chunk),
            max_prefill_tokens=_positive(v, "max_prefill_tokens"),
            max_running_requests=v.get("max_running_requests"),
            max_queued_requests=v.get("max_queued_requests"),
            schedule_policy=_choice(v, "schedule_policy", SCHEDULE_POLICIES),
            disable_radix_cache=bool(v.get("disable_radix_cache")),
            random_seed=_required(v, "random_seed"),
            stream_interval=_positive(v, "stream_interval"),
            prefill_attention_backend=_choice(v, "prefill_attention_backend", ATTENTION_BACKENDS,
                                              fallback=attention),
            decode_attention_backend=_choice(v, "decode_attention_backend", ATTENTION_BACKENDS,
                                             fallback=attention),
            triton_num_kv_splits=_positive(v, "triton_attention_num_kv_splits"),
            triton_split_tile_size=v.get("triton_attention_split_tile_size"),
            triton_reduce_in_fp32=bool(v.get("triton_attention_reduce_in_fp32")),
            cuda_graph_bs_decode=_graph_batch_sizes(v, platform),
            grammar_backend=_choice({"grammar_backend": v.get("grammar_backend") or "none"}, "grammar_backend",
                                    GRAMMAR_BACKENDS),
            json_any_whitespace=not v.get("constrained_json_disable_any_whitespace"),
            mixed_chunk=bool(v.get("enable_mixed_chunk")),
        )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _required(values: Mapping[str, Any], name: str) -> Any:
    value = values.get(name)
    if value is None:
        raise UsageError(f"{_flag(name)} resolved to None, but the engine needs a concrete value; "
                         f"pass {_flag(name)} explicitly or add a rule that sets it.")
    return value


def _positive(values: Mapping[str, Any], name: str) -> int:
    value = _required(values, name)
    if not isinstance(value, int) or value < 1:
        raise UsageError(f"{_flag(name)} must be a positive integer, got {value!r}.")
    return value


def _choice(values: Mapping[str, Any], name: str, supported: tuple[str, ...],
            fallback: str | None = None) -> str:
    value = values.get(name)
    if value is None and fallback is not None:
        return fallback
    value = _required(values, name)
    if value not in supported:
        raise UnsupportedConfig(f"{_flag(name)} {value!r} (it implements {', '.join(supported)})")
    return value


def _refuse_unimplemented(values: Mapping[str, Any]) -> None:
    for name, off in NOT_IMPLEMENTED_UNLESS.items():
        if values.get(name, off[0]) not in off:
            raise UnsupportedConfig(f"{_flag(name)} {values[name]!r}")


def _topology(v: Mapping[str, Any]) -> Topology:
    topology = Topology(tp_size=_positive(v, "tp_size"), pp_size=_positive(v, "pp_size"),
                        dp_size=_positive(v, "dp_size"),
                        dp_attention=bool(v.get("enable_dp_attention")),
                        nnodes=_positive(v, "nnodes"), node_rank=_required(v, "node_rank"))
    # The grid's legality (node rank, divisibility, multi-node DP) is the resolver's; only what this
    # engine lacks is asserted here.
    if topology.dp_attention and topology.dp_size > 1 and topology.pp_size > 1:
        raise UnsupportedConfig("DP attention with several pipeline stages")
    return topology


def _device_memory_gib(facts: Mapping[str, Any], platform: str, topology: Topology) -> float:
    """Memory one rank may budget: a GPU's memory, or on CPU the host RAM shared by its ranks."""
    if platform == "cpu":
        ram = facts.get("host.ram_gib")
        if not ram:
            raise UsageError("sizing the KV cache on CPU needs the fact host.ram_gib; probe this "
                             "machine (--facts probe) or pass --fact host.ram_gib=N or "
                             "--max-total-tokens.")
        return float(ram) / len(topology.ranks_on_this_node())
    mem = facts.get("gpu.mem_gib")
    if not mem:
        raise UsageError("sizing the KV cache needs the fact gpu.mem_gib; probe this machine "
                         "(--facts probe) or pass --fact gpu.mem_gib=N or --max-total-tokens.")
    return float(mem)


def _graph_batch_sizes(v: Mapping[str, Any], platform: str) -> tuple[int, ...]:
    """Decode batch sizes to capture as CUDA graphs; none on CPU or when graphs are disabled (the
    resolver disables the decode graph of a backend that cannot be captured, such as torch_native,
    whose torch references synchronise with the host)."""
    if platform == "cpu" or v.get("disable_cuda_graph") or v.get("disable_decode_cuda_graph") \
            or v.get("cuda_graph_backend_decode") == "disabled":
        return ()
    sizes = _required(v, "cuda_graph_bs_decode")
    return tuple(sorted({int(s) for s in sizes}))
