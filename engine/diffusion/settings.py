"""Everything the diffusion engine reads from a resolved config, checked once, in plain Python.

The resolver fills concrete values, and what the engine implements is data, the engine profile
`rules/diffusion/engine.yaml`, which `accord serve` resolves with. This module holds no legality
rule of its own: a value the profile should have refused (a backend or feature the engine lacks) is
an `UnsupportedConfig`, a bug to report; a flag that is still unset, or a degree or bucket the
model folder cannot take, is a UsageError naming the flag by its command-line spelling. The parent
process builds `EngineSettings` before starting anything (so a bad config starts nothing) and every
child rebuilds the same object from the same frozen config.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from accord.engine.diffusion.layout import ParallelLayout
from accord.engine.diffusion.spec import ModelSpec, load_model_spec
from accord.engine.diffusion.warmup import WarmupPlan, build_warmup_plan
from accord.resolver.errors import UsageError
from accord.resolver.frozen import ResolvedConfig

ATTENTION_BACKENDS = ("torch_sdpa",)
GPU_PLATFORMS = ("cuda", "rocm")  # both reach the device through torch.cuda
OFFLOAD_FLAGS = {"transformer": "dit_cpu_offload", "text_encoder": "text_encoder_cpu_offload",
                 "vae": "vae_cpu_offload"}


class UnsupportedConfig(AssertionError):
    """The resolved config asks for something the engine does not implement. `accord serve`
    resolves with the engine profile, which refuses such values, so this is a bug to report."""

    def __init__(self, what: str):
        super().__init__(f"Accord bug: the resolved config has {what}, which the built-in diffusion "
                         "engine does not implement and the engine profile "
                         "(rules/diffusion/engine.yaml) should have refused; please report it with "
                         "the command line.")


# Flags whose primary spelling is not their name with dashes (rules/diffusion/flags.yaml).
_SPELLINGS = {"cfg_parallel_degree": "--cfg-parallel-size", "dp_size": "--data-parallel-size",
              "pipeline_class_name": "--pipeline"}


def spell(name: str) -> str:
    """A flag's command-line spelling, e.g. `tp_size` -> `--tp-size` (the engine reads only the
    frozen config, not the resolver's catalog)."""
    return _SPELLINGS.get(name, "--" + name.replace("_", "-"))


def required(values: Mapping[str, Any], name: str) -> Any:
    """The value of a flag the engine cannot run without; UsageError naming it when unset."""
    value = values[name]
    if value is None:
        raise UsageError(
            f"the resolved config leaves {spell(name)} ({name}) unset, and the diffusion engine needs a "
            f"concrete value. Resolve with `accord resolve --system diffusion` (which fills it) or pass "
            f"{spell(name)} explicitly.")
    return value


def layout_from_values(values: Mapping[str, Any]) -> ParallelLayout:
    """The parallel layout of a resolved config (see engine.diffusion.layout)."""
    enabled = bool(required(values, "enable_cfg_parallel"))
    degree = int(required(values, "cfg_parallel_degree"))
    if enabled != (degree > 1):
        raise UsageError(
            f"{spell('enable_cfg_parallel')} is {enabled} but {spell('cfg_parallel_degree')} is {degree}; "
            "CFG parallel is on exactly when the degree is above 1. Set them consistently.")
    return ParallelLayout(
        num_gpus=int(required(values, "num_gpus")), dp=int(required(values, "dp_size")), cfg=degree,
        sp=int(required(values, "sp_degree")), tp=int(required(values, "tp_size")),
        ulysses=int(required(values, "ulysses_degree")), ring=int(required(values, "ring_degree")))


def _device_kind(facts: Mapping[str, Any]) -> str:
    platform = facts.get("platform")
    if platform == "cpu":
        return "cpu"
    if platform in GPU_PLATFORMS:
        return "cuda"
    if platform is None:
        raise UsageError("the resolved config has no 'platform' fact; resolve with --facts probe (or a preset) "
                         "so the engine knows which device to run on.")
    raise UnsupportedConfig(f"platform {platform!r}")


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    layout: ParallelLayout
    plan: WarmupPlan
    model: ModelSpec
    device: str  # "cpu" or "cuda"
    attention_backend: str
    attention_backend_auto: bool
    torch_compile: bool
    offload: dict[str, bool]  # component -> weights kept in host memory between uses
    batching_max_size: int
    batching_delay_ms: float
    batching_metrics: bool
    dist_timeout_s: int | None

    @classmethod
    def from_config(cls, config: ResolvedConfig) -> "EngineSettings":
        if config.system != "diffusion":
            raise UsageError(f"the diffusion engine was handed a {config.system!r} config; serve it with "
                             f"`accord serve --system {config.system}`.")
        values = config.values
        device = _device_kind(config.facts)
        model = load_model_spec(values["model_path"])
        layout = layout_from_values(values)
        if model.num_attention_heads % layout.tp:
            raise UsageError(f"{spell('tp_size')} {layout.tp} must divide the model's "
                             f"{model.num_attention_heads} attention heads.")

        plan = build_warmup_plan(values, model, spell)
        if plan.text_buckets and plan.text_buckets[-1] > model.max_text_tokens:
            raise UsageError(f"{spell('bcg_text_buckets')} {plan.text_buckets[-1]} exceeds the text encoder's "
                             f"{model.max_text_tokens} positions; use buckets up to {model.max_text_tokens}.")

        backend = values["attention_backend"]
        if backend is not None and backend not in ATTENTION_BACKENDS:
            raise UnsupportedConfig(f"{spell('attention_backend')} {backend!r}")

        torch_compile = bool(values["enable_torch_compile"])
        offload = _offload(values, device)

        max_size, delay_ms = _batching(values)
        return cls(layout=layout, plan=plan, model=model, device=device,
                   attention_backend=backend or ATTENTION_BACKENDS[0], attention_backend_auto=backend is None,
                   torch_compile=torch_compile, offload=offload,
                   batching_max_size=max_size, batching_delay_ms=delay_ms,
                   batching_metrics=bool(values["enable_batching_metrics"]),
                   dist_timeout_s=values["dist_timeout"])

    def describe(self) -> dict[str, Any]:
        """The engine's reading of the config, as /server_info reports it."""
        placement = {c: ("host memory" if self.device == "cpu" else
                         "host memory, moved to the GPU for each use" if off else "GPU")
                     for c, off in self.offload.items()}
        return {
            "device": self.device,
            "layout": self.layout.describe(),
            "warmup_plan": self.plan.describe(),
            "model": self.model.describe(),
            "attention_backend": self.attention_backend + (" (auto)" if self.attention_backend_auto else ""),
            "torch_compile": self.torch_compile,
            "component_placement": placement,
            "batching": {"max_size": self.batching_max_size, "delay_ms": self.batching_delay_ms,
                         "log_metrics": self.batching_metrics},
        }


def _batching(values: Mapping[str, Any]) -> tuple[int, float]:
    """The dynamic batcher's limits: most requests per batch, longest wait for company (ms)."""
    if values["batching_mode"] != "dynamic":
        raise UnsupportedConfig(f"{spell('batching_mode')} {values['batching_mode']!r}")
    if values["batching_config"] is not None:
        raise UnsupportedConfig(f"{spell('batching_config')}")
    max_size, delay = values["batching_max_size"], values["batching_delay_ms"]
    if not isinstance(max_size, int) or max_size < 1:
        raise UsageError(f"{spell('batching_max_size')} must be at least 1 (got {max_size!r}).")
    if delay is None or delay < 0:
        raise UsageError(f"{spell('batching_delay_ms')} must be 0 or more (got {delay!r}).")
    return max_size, float(delay)


def _offload(values: Mapping[str, Any], device: str) -> dict[str, bool]:
    """Which components live in host memory between uses.

    On a CPU machine every weight is in host memory already, so the flags change nothing (and may be
    unset, as upstream leaves them on CPU). On a GPU each flag must be concrete.
    """
    if device == "cpu":
        return {component: bool(values[flag]) for component, flag in OFFLOAD_FLAGS.items()}
    if values["dit_layerwise_offload"]:
        raise UnsupportedConfig(spell("dit_layerwise_offload"))
    return {component: bool(required(values, flag)) for component, flag in OFFLOAD_FLAGS.items()}
