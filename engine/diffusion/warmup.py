"""The warmup plan: which shapes a diffusion server runs before (or on) its first real request.

Resolution decides the plan; the engine only executes it:

- `warmup_mode` off: nothing is warmed.
- `warmup_mode` server: every plan entry runs at startup, before the server reports ready.
- `warmup_mode` request: the same entries run when the first request arrives, before it is served
  (a benchmarking aid: that request's metadata says so).

Entries are `warmup_resolutions` (the model's default size when none are given) crossed with the
text buckets. Breakable CUDA graphs are captured per latent shape, so with
`enable_breakable_cuda_graph` the prompt conditioning is padded up to the smallest
`bcg_text_buckets` entry that fits and each (resolution, bucket) pair gets one capture; a prompt
longer than the largest bucket runs eagerly at its own length. Without breakable graphs prompts are
never padded and each resolution is warmed once with a short synthetic prompt.

Plain data (no torch): the parent validates the plan before starting a process.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from accord.engine.diffusion.spec import ModelSpec
from accord.resolver.errors import UsageError

WARMUP_MODES = ("off", "request", "server")
MAX_SIDE = 4096
_RESOLUTION = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


@dataclasses.dataclass(frozen=True, order=True)
class Resolution:
    width: int
    height: int

    def __str__(self) -> str:
        return f"{self.width}x{self.height}"


def parse_resolution(text: Any, model: ModelSpec) -> Resolution:
    """`"WIDTHxHEIGHT"` -> a Resolution the model can run; ValueError saying what is wrong."""
    match = _RESOLUTION.match(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"{text!r} is not a resolution; write WIDTHxHEIGHT, e.g. 256x256")
    width, height = int(match.group(1)), int(match.group(2))
    step = model.pixel_granularity
    for side in (width, height):
        if side < step or side > MAX_SIDE or side % step:
            raise ValueError(f"{text!r}: each side must be a multiple of {step} between {step} and {MAX_SIDE}")
    tokens = (width // step) * (height // step)
    if tokens > model.max_image_tokens:
        raise ValueError(f"{text!r} makes {tokens} image tokens; this model takes at most "
                         f"{model.max_image_tokens} (e.g. 1024x1024)")
    return Resolution(width, height)


def default_resolution(model: ModelSpec) -> Resolution:
    """The size a request gets when it names none (the model's `_sampling` width and height)."""
    return Resolution(int(model.sampling.get("width", 256)), int(model.sampling.get("height", 256)))


@dataclasses.dataclass(frozen=True)
class WarmupEntry:
    resolution: Resolution
    text_bucket: int | None  # None: the prompt is not padded (no breakable graph)

    def to_dict(self) -> dict[str, Any]:
        return {"resolution": str(self.resolution), "text_bucket": self.text_bucket}


@dataclasses.dataclass(frozen=True)
class WarmupPlan:
    mode: str
    breakable_graph: bool
    resolutions: tuple[Resolution, ...]
    text_buckets: tuple[int, ...]
    steps: int

    @property
    def entries(self) -> tuple[WarmupEntry, ...]:
        if self.mode == "off":
            return ()
        buckets: tuple[int | None, ...] = self.text_buckets if self.breakable_graph else (None,)
        return tuple(WarmupEntry(r, b) for r in self.resolutions for b in buckets)

    def text_bucket(self, text_tokens: int) -> int | None:
        """The padded text length for a prompt of `text_tokens` tokens; None: not padded."""
        if not self.breakable_graph:
            return None
        return next((b for b in self.text_buckets if b >= text_tokens), None)

    def covers(self, resolution: Resolution, text_bucket: int | None) -> bool:
        """Is this input shape one the plan warms (and, with breakable graphs, captures)?"""
        return WarmupEntry(resolution, text_bucket) in self.entries

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "breakable_cuda_graph": self.breakable_graph,
            "steps": self.steps,
            "resolutions": [str(r) for r in self.resolutions],
            "text_buckets": list(self.text_buckets),
            "entries": [e.to_dict() for e in self.entries],
        }


def build_warmup_plan(values: Mapping[str, Any], model: ModelSpec, spell=lambda name: name) -> WarmupPlan:
    """Read the warmup flags of a resolved config; UsageError when they cannot be executed.

    `spell(name)` gives a flag's command-line spelling for messages.
    """
    mode = values["warmup_mode"]
    if mode not in WARMUP_MODES:
        raise UsageError(f"{spell('warmup_mode')} is {mode!r} in the resolved config; the engine needs one of "
                         f"{', '.join(WARMUP_MODES)}. Resolve with `accord resolve --system diffusion` or set it.")
    breakable = bool(values["enable_breakable_cuda_graph"])
    steps = values["warmup_steps"]
    if not isinstance(steps, int) or steps < 1:
        raise UsageError(f"{spell('warmup_steps')} is {steps!r}; warmup runs at least one denoising step.")

    raw_resolutions = values["warmup_resolutions"]
    resolutions = []
    for text in raw_resolutions or ():
        try:
            resolution = parse_resolution(text, model)
        except ValueError as err:
            raise UsageError(f"{spell('warmup_resolutions')}: {err}.") from None
        if resolution not in resolutions:
            resolutions.append(resolution)

    buckets: tuple[int, ...] = ()
    if breakable:
        if not resolutions:
            raise UsageError(
                f"{spell('enable_breakable_cuda_graph')} needs {spell('warmup_resolutions')}: graphs replay only "
                f"for the latent shape they were captured at, so every served resolution must be declared, "
                f"e.g. {spell('warmup_resolutions')} 256x256 512x512.")
        if mode != "server":
            raise UsageError(
                f"{spell('enable_breakable_cuda_graph')} captures its graphs at startup, which needs "
                f"{spell('warmup_mode')} server (the resolved config says {mode!r}).")
        raw_buckets = values["bcg_text_buckets"]
        if raw_buckets is None:
            raise UsageError(
                f"the resolved config leaves {spell('bcg_text_buckets')} unset; with breakable CUDA graphs the "
                f"engine needs concrete text buckets. Resolve with `accord resolve --system diffusion` or pass "
                f"{spell('bcg_text_buckets')} 64 128 256.")
        buckets = tuple(sorted({int(b) for b in raw_buckets if int(b) > 0}))
        if not buckets:
            raise UsageError(f"{spell('bcg_text_buckets')} must contain at least one positive length.")
    return WarmupPlan(mode=mode, breakable_graph=breakable,
                      resolutions=tuple(resolutions) or (default_resolution(model),),
                      text_buckets=buckets, steps=steps)
