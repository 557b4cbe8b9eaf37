"""The body of `POST /v1/images/generations`, checked before anything reaches the scheduler.

OpenAI's image API fields (`prompt`, `size`, `n`, `response_format`, `model`) plus the diffusion
knobs an SGLang client sends (`seed`, `negative_prompt`, `num_inference_steps`,
`guidance_scale`). Anything else, or any value the model cannot run, is a `BadRequest` naming the
field: the front end turns it into a 400 so a bad request never costs the workers anything.
Image i of a request is generated from seed `seed + i`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from accord.engine.diffusion.spec import ModelSpec
from accord.engine.diffusion.tokens import tokenize
from accord.engine.diffusion.warmup import Resolution, default_resolution, parse_resolution

MAX_IMAGES = 8
MAX_STEPS = 200
MAX_GUIDANCE = 100.0
MAX_SEED = 2 ** 63 - 1
FIELDS = ("prompt", "negative_prompt", "size", "n", "seed", "num_inference_steps", "guidance_scale",
          "response_format", "model")


class BadRequest(ValueError):
    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclasses.dataclass(frozen=True)
class ImageRequest:
    prompt: str
    negative_prompt: str
    resolution: Resolution
    n: int
    seed: int
    steps: int
    guidance_scale: float

    def jobs(self) -> list[dict[str, Any]]:
        return [{"prompt": self.prompt, "negative_prompt": self.negative_prompt, "seed": self.seed + i,
                 "guidance_scale": self.guidance_scale} for i in range(self.n)]


def _integer(body: dict, name: str, default: int, low: int, high: int) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"'{name}' must be an integer from {low} to {high} (got {value!r}).", name)
    return value


def _text(body: dict, name: str, default: str | None, model: ModelSpec) -> str:
    value = body.get(name, default)
    if not isinstance(value, str):
        raise BadRequest(f"'{name}' must be a string (got {type(value).__name__}).", name)
    limit = model.max_text_tokens
    if len(tokenize(value)) > limit:
        raise BadRequest(f"'{name}' is {len(value.encode('utf-8'))} bytes of UTF-8; the text encoder takes at "
                         f"most {limit - 1}.", name)
    return value


def parse_image_request(body: Any, model: ModelSpec) -> ImageRequest:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object.")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise BadRequest(f"unknown field(s) {', '.join(repr(u) for u in unknown)}; accepted fields: "
                         f"{', '.join(FIELDS)}.", unknown[0])
    if "prompt" not in body:
        raise BadRequest("'prompt' is required.", "prompt")
    prompt = _text(body, "prompt", None, model)
    if not prompt.strip():
        raise BadRequest("'prompt' must not be empty.", "prompt")
    sampling = model.sampling
    negative = _text(body, "negative_prompt", str(sampling.get("negative_prompt", "")), model)

    size = body.get("size")
    if size is None:
        resolution = default_resolution(model)
    else:
        try:
            resolution = parse_resolution(size, model)
        except ValueError as err:
            raise BadRequest(f"'size': {err}.", "size") from None

    guidance = body.get("guidance_scale", float(sampling.get("guidance_scale", 1.0)))
    if isinstance(guidance, bool) or not isinstance(guidance, (int, float)) or not math.isfinite(guidance) \
            or not 0.0 <= guidance <= MAX_GUIDANCE:
        raise BadRequest(f"'guidance_scale' must be a number from 0 to {MAX_GUIDANCE:g} (got {guidance!r}).",
                         "guidance_scale")
    response_format = body.get("response_format", "b64_json")
    if response_format != "b64_json":
        raise BadRequest(f"'response_format' {response_format!r} is not supported: this server returns images "
                         "inline, use 'b64_json'.", "response_format")
    if "model" in body and not isinstance(body["model"], str):
        raise BadRequest("'model' must be a string.", "model")
    return ImageRequest(
        prompt=prompt, negative_prompt=negative, resolution=resolution,
        n=_integer(body, "n", 1, 1, MAX_IMAGES), seed=_integer(body, "seed", 0, 0, MAX_SEED),
        steps=_integer(body, "num_inference_steps", int(sampling.get("num_inference_steps", 8)), 1, MAX_STEPS),
        guidance_scale=float(guidance))
