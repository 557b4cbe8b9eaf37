"""The tiny DiT pipeline in one process: determinism, text buckets, warmup execution, weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from accord.engine.diffusion.model import TinyDiT, seeded_init
from accord.engine.diffusion.pipeline import DiffusionPipeline, GenerationBatch, ImageJob
from accord.engine.diffusion.settings import EngineSettings
from accord.engine.diffusion.spec import load_model_spec
from accord.engine.diffusion.warmup import Resolution
from accord.engine.diffusion.weights import load_networks
from accord.resolver.errors import UsageError
from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.catalog import load_catalog

CONCRETE = {"tp_size": 1, "sp_degree": 1, "ulysses_degree": 1, "ring_degree": 1, "enable_cfg_parallel": False,
            "cfg_parallel_degree": 1, "warmup_mode": "off"}
BCG = {"enable_breakable_cuda_graph": True, "warmup_mode": "server", "warmup_resolutions": ["64x64", "48x80"],
       "bcg_text_buckets": [16, 64], "warmup_steps": 2}


def pipeline(**overrides) -> DiffusionPipeline:
    values = {**load_catalog("diffusion").defaults(), **CONCRETE, **overrides}
    return DiffusionPipeline(EngineSettings.from_config(ResolvedConfig("diffusion", {"platform": "cpu"}, values)))


def max_diff(a, b) -> int:
    return int(np.abs(a.astype(int) - b.astype(int)).max())


def batch(*prompts: str, size=(64, 64), steps=3, seed=0) -> GenerationBatch:
    return GenerationBatch(Resolution(*size), steps,
                           tuple(ImageJob(p, "", seed + i, 4.0) for i, p in enumerate(prompts)))


@pytest.fixture(scope="module")
def plain():
    return pipeline()


@pytest.fixture(scope="module")
def bcg():
    return pipeline(**BCG)


def test_same_request_same_image_and_seed_or_prompt_change_it(plain):
    first = plain.generate(batch("a lighthouse")).images
    assert first.shape == (1, 64, 64, 3) and first.dtype.name == "uint8"
    assert (plain.generate(batch("a lighthouse")).images == first).all()
    assert (plain.generate(batch("a lighthouse", seed=1)).images != first).any()
    assert (plain.generate(batch("a lantern")).images != first).any()


def test_batching_images_together_does_not_change_them(plain):
    together = plain.generate(batch("one", "two")).images
    alone = [plain.generate(GenerationBatch(Resolution(64, 64), 3, (ImageJob(p, "", s, 4.0),))).images[0]
             for p, s in (("one", 0), ("two", 1))]
    for i in range(2):
        assert max_diff(together[i], alone[i]) <= 1


def test_padding_a_prompt_to_its_text_bucket_does_not_change_the_image(plain, bcg):
    padded = bcg.generate(batch("short prompt"))
    assert padded.info["text_bucket"] == 16
    assert max_diff(padded.images, plain.generate(batch("short prompt")).images) <= 1


def test_server_warmup_executes_exactly_the_plan(bcg):
    report = bcg.warmup()
    assert [(r["resolution"], r["text_bucket"]) for r in report] == \
        [("64x64", 16), ("64x64", 64), ("48x80", 16), ("48x80", 64)]
    assert all(r["steps"] == 2 and r["execution"] == "eager" for r in report)


def test_a_planned_shape_on_cpu_runs_eagerly_and_says_why(bcg):
    info = bcg.generate(batch("short prompt")).info
    assert info["in_warmup_plan"] and info["execution"] == "eager"
    assert "CUDA graphs need a GPU" in info["note"]


def test_a_resolution_outside_the_plan_runs_eagerly_and_says_so(bcg):
    result = bcg.generate(batch("short prompt", size=(96, 96)))
    assert result.images.shape == (1, 96, 96, 3)
    assert not result.info["in_warmup_plan"]
    assert "96x96 is not in the warmup plan (64x64, 48x80)" in result.info["note"]


def test_a_prompt_longer_than_the_largest_bucket_falls_back_to_its_own_length(bcg):
    info = bcg.generate(batch("x" * 100)).info
    assert info["text_bucket"] is None and info["text_tokens"] == 101 and not info["in_warmup_plan"]
    assert "more than the largest text bucket 64" in info["note"]


def test_request_mode_warms_up_on_the_first_request_only():
    pipe = pipeline(warmup_mode="request", warmup_resolutions=["64x64"])
    first = pipe.generate(batch("hello")).info["warmup"]
    assert first["mode"] == "request"
    assert [(r["resolution"], r["text_bucket"]) for r in first["ran_before_this_request"]] == [("64x64", None)]
    second = pipe.generate(batch("hello")).info
    assert second["warmup"] is None and second["in_warmup_plan"]


def test_breakable_graph_segments_split_the_forward_at_self_attention_only(plain):
    from accord.engine.diffusion.graphs import split_at_breaks

    groups = [[stage.name for stage in group] for group in split_at_breaks(plain.stages)]
    assert groups == [["embed", "block0.pre"], ["block0.attention"], ["block0.post", "block1.pre"],
                      ["block1.attention"], ["block1.post", "final"]]


def test_self_attention_mixes_distant_tokens():
    """What sequence parallelism must preserve: a token's output depends on far-away tokens."""
    pipe = pipeline()
    latents = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    text, mask = pipe._encode(["p"], 4)
    t = torch.ones(1)
    base = pipe._transformer(latents, t, text, mask, pipe.forward)
    latents[0, :, 0, 0] += 1.0  # first token
    moved = pipe._transformer(latents, t, text, mask, pipe.forward)
    assert (moved[0, :, -2:, -2:] - base[0, :, -2:, -2:]).abs().max() > 1e-4  # last token


def test_weights_in_a_safetensors_file_replace_the_dummy_ones(tmp_path):
    import shutil

    from safetensors.torch import save_file

    folder = tmp_path / "tiny"
    shutil.copytree(load_model_spec(None).folder, folder)
    spec = load_model_spec(str(folder))
    other = TinyDiT(spec.transformer)
    seeded_init(other, 99)
    save_file(other.state_dict(), str(folder / "transformer" / "diffusion_pytorch_model.safetensors"))
    loaded = load_networks(load_model_spec(str(folder)))["transformer"]
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in other.state_dict().items())
    assert load_model_spec(str(folder)).describe()["weights"]["transformer"] == "safetensors"

    save_file({"wrong": torch.zeros(1)}, str(folder / "vae" / "diffusion_pytorch_model.safetensors"))
    with pytest.raises(UsageError, match="does not hold vae weights"):
        load_networks(load_model_spec(str(folder)))
