"""Image requests before they reach a worker: body validation and dynamic batching (no processes)."""

from __future__ import annotations

import pytest

from accord.engine.diffusion.batching import Batcher
from accord.engine.diffusion.request_schema import BadRequest, parse_image_request
from accord.engine.diffusion.spec import load_model_spec
from accord.engine.diffusion.warmup import Resolution

MODEL = load_model_spec(None)


def test_defaults_come_from_the_model_and_image_i_uses_seed_plus_i():
    request = parse_image_request({"prompt": "a red fox", "n": 3, "seed": 7}, MODEL)
    assert request.resolution == Resolution(MODEL.sampling["width"], MODEL.sampling["height"])
    assert request.steps == MODEL.sampling["num_inference_steps"]
    assert request.guidance_scale == MODEL.sampling["guidance_scale"]
    assert [job["seed"] for job in request.jobs()] == [7, 8, 9]


def test_all_documented_fields_are_accepted():
    request = parse_image_request({"prompt": "p", "negative_prompt": "blurry", "size": "128x64", "n": 1,
                                   "seed": 1, "num_inference_steps": 3, "guidance_scale": 2,
                                   "response_format": "b64_json", "model": "anything"}, MODEL)
    assert (request.resolution, request.steps, request.guidance_scale) == (Resolution(128, 64), 3, 2.0)
    assert request.negative_prompt == "blurry"


@pytest.mark.parametrize("body, param, message", [
    ({"size": "64x64"}, "prompt", "'prompt' is required"),
    ({"prompt": "  "}, "prompt", "must not be empty"),
    ({"prompt": 5}, "prompt", "must be a string"),
    ({"prompt": "p", "size": "64by64"}, "size", "not a resolution"),
    ({"prompt": "p", "size": "100x100"}, "size", "multiple of 16"),
    ({"prompt": "p", "n": 0}, "n", "from 1 to 8"),
    ({"prompt": "p", "n": True}, "n", "integer"),
    ({"prompt": "p", "seed": -1}, "seed", "integer"),
    ({"prompt": "p", "num_inference_steps": 1.5}, "num_inference_steps", "integer"),
    ({"prompt": "p", "guidance_scale": "high"}, "guidance_scale", "number"),
    ({"prompt": "p", "response_format": "url"}, "response_format", "use 'b64_json'"),
    ({"prompt": "p", "quality": "hd", "style": "vivid"}, "quality", r"unknown field\(s\) 'quality', 'style'"),
    ({"prompt": "x" * 5000}, "prompt", "at most 2047"),
])
def test_bad_fields_are_rejected_with_the_field_named(body, param, message):
    with pytest.raises(BadRequest, match=message) as caught:
        parse_image_request(body, MODEL)
    assert caught.value.param == param


def test_a_body_that_is_not_an_object_is_rejected():
    with pytest.raises(BadRequest, match="JSON object"):
        parse_image_request(["prompt"], MODEL)


def test_batcher_merges_compatible_requests_up_to_max_size_in_arrival_order():
    batcher = Batcher(max_size=2, delay_s=10.0)
    batcher.add("64x64", "a", now=0.0)
    batcher.add("128x128", "b", now=0.1)
    assert batcher.next_batch(now=0.2) is None  # the oldest may still wait for a companion
    batcher.add("64x64", "c", now=0.3)
    assert batcher.next_batch(now=0.3) == ["a", "c"]
    assert batcher.next_batch(now=0.3) is None
    assert batcher.next_batch(now=10.1) == ["b"]
    assert len(batcher) == 0 and batcher.seconds_until_due(11.0) is None


def test_batcher_without_delay_sends_the_oldest_request_at_once():
    batcher = Batcher(max_size=4, delay_s=0.0)
    batcher.add("k", "a", now=5.0)
    assert batcher.seconds_until_due(5.0) == 0.0
    assert batcher.next_batch(now=5.0) == ["a"]
