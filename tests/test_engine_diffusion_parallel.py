"""Parallel layouts compute the single-process image: cfg parallel, sequence parallel, tensor parallel.

One pair of gloo ranks (a single spawn, to keep process starts few) runs the same batch under each
2-rank layout; the leader's images are compared with a single-process run. The resolution gives 15
latent tokens, so sequence parallelism also exercises its padding to a multiple of the sp size.
"""

from __future__ import annotations

import multiprocessing
import socket

import numpy as np
import pytest

from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.catalog import load_catalog

SINGLE = {"num_gpus": 1, "tp_size": 1, "sp_degree": 1, "ulysses_degree": 1, "ring_degree": 1,
          "enable_cfg_parallel": False, "cfg_parallel_degree": 1, "warmup_mode": "off"}
LAYOUTS = {
    "cfg": {"num_gpus": 2, "enable_cfg_parallel": True, "cfg_parallel_degree": 2},
    "sp_ulysses": {"num_gpus": 2, "sp_degree": 2, "ulysses_degree": 2},
    "sp_ring": {"num_gpus": 2, "sp_degree": 2, "ring_degree": 2},
    "tp": {"num_gpus": 2, "tp_size": 2},
}
PROMPTS = (("a harbour at dawn", "blurry", 11), ("two cats", "", 12))


def settings(**overrides):
    from accord.engine.diffusion.settings import EngineSettings

    values = {**load_catalog("diffusion").defaults(), **SINGLE, **overrides}
    return EngineSettings.from_config(ResolvedConfig("diffusion", {"platform": "cpu"}, values))


def generate(pipe):
    from accord.engine.diffusion.pipeline import GenerationBatch, ImageJob
    from accord.engine.diffusion.warmup import Resolution

    jobs = tuple(ImageJob(prompt, negative, seed, 3.5) for prompt, negative, seed in PROMPTS)
    return pipe.generate(GenerationBatch(Resolution(80, 48), 3, jobs)).images


def run_rank(rank: int, port: int, results) -> None:
    """One of two gloo ranks: run every 2-rank layout, report the leader's images."""
    import torch
    import torch.distributed as dist

    from accord.engine.diffusion.parallel import DistributedOps
    from accord.engine.diffusion.pipeline import DiffusionPipeline

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        for name, overrides in LAYOUTS.items():
            layout_settings = settings(**overrides)
            ops = DistributedOps(layout_settings.layout, rank)
            images = generate(DiffusionPipeline(layout_settings, ops))
            if ops.is_leader:
                results.put((name, rank, images))
    except BaseException as exc:  # noqa: BLE001 - reported to the test, which fails with it
        results.put(("error", rank, repr(exc)))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def two_rank_images():
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = free_port()
    ranks = [context.Process(target=run_rank, args=(r, port, results)) for r in range(2)]
    for process in ranks:
        process.start()
    try:
        collected = {}
        while len(collected) < len(LAYOUTS):
            name, rank, payload = results.get(timeout=180)
            assert name != "error", f"rank {rank} failed: {payload}"
            collected[name] = (rank, payload)
        return collected
    finally:
        for process in ranks:
            process.join(10)
            if process.is_alive():
                process.kill()


@pytest.fixture(scope="module")
def single_process_images():
    from accord.engine.diffusion.pipeline import DiffusionPipeline

    return generate(DiffusionPipeline(settings()))


def assert_same_images(got, expected):
    assert got.shape == expected.shape == (2, 48, 80, 3)
    assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1


def test_cfg_parallel_two_ranks_equal_one_rank(two_rank_images, single_process_images):
    rank, images = two_rank_images["cfg"]
    assert rank == 0  # the cfg-rank-0 (conditional) rank is the leader that decodes
    assert_same_images(images, single_process_images)


def test_sequence_parallel_ulysses_two_ranks_equal_one_rank(two_rank_images, single_process_images):
    assert_same_images(two_rank_images["sp_ulysses"][1], single_process_images)


def test_sequence_parallel_ring_two_ranks_equal_one_rank(two_rank_images, single_process_images):
    assert_same_images(two_rank_images["sp_ring"][1], single_process_images)


def test_tensor_parallel_two_ranks_equal_one_rank(two_rank_images, single_process_images):
    assert_same_images(two_rank_images["tp"][1], single_process_images)
