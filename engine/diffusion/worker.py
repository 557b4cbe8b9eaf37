"""A worker rank: joins the torch.distributed job, builds its slice of the model, warms up, serves.

Rank r of `num_gpus` joins the resolved `master_port` rendezvous (gloo on CPU, nccl on a GPU),
creates the layout's cfg/sp/tp groups, runs the server-mode warmup plan, and only then tells the
scheduler (with the warmup it executed) and the supervisor that it is ready. It then runs every
batch the scheduler sends; the replica's leader encodes the images as PNG and sends them back.
"""

from __future__ import annotations

import datetime
import io
import os
import signal
from typing import Any

import torch
import torch.distributed as dist
import zmq

from accord.engine.diffusion.parallel import DistributedOps, ParallelOps
from accord.engine.diffusion.pipeline import DiffusionPipeline, GenerationBatch, ImageJob
from accord.engine.diffusion.ports import Endpoints
from accord.engine.diffusion.protocol import pack, rank_address, results_address, unpack
from accord.engine.diffusion.settings import EngineSettings, spell
from accord.engine.diffusion.warmup import Resolution
from accord.engine.supervisor import report_ready
from accord.resolver.errors import UsageError
from accord.resolver.frozen import ResolvedConfig


def choose_device(settings: EngineSettings, values: dict[str, Any], rank: int) -> torch.device:
    """cpu, or the GPU of this rank: `gpu_ids[rank]` when given, else `base_gpu_id + rank`."""
    if settings.device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UsageError("the config was resolved for a GPU platform but torch sees no CUDA device here; "
                         "resolve with --facts probe on this machine.")
    gpu_ids = values["gpu_ids"]
    index = int(gpu_ids[rank]) if gpu_ids else int(values["base_gpu_id"]) + rank
    if index >= torch.cuda.device_count():
        flag = spell("gpu_ids") if gpu_ids else spell("base_gpu_id")
        raise UsageError(f"worker rank {rank} needs GPU {index} but only {torch.cuda.device_count()} are visible; "
                         f"check {spell('num_gpus')} and {flag}.")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def encode_png(image) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image, "RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def join_group(settings: EngineSettings, endpoints: Endpoints, rank: int, device: torch.device) -> ParallelOps:
    layout = settings.layout
    if layout.world_size == 1:
        return ParallelOps()
    timeout = datetime.timedelta(seconds=settings.dist_timeout_s or 3600)
    dist.init_process_group("gloo" if device.type == "cpu" else "nccl", init_method=endpoints.master_address,
                            rank=rank, world_size=layout.world_size, timeout=timeout)
    return DistributedOps(layout, rank)


def worker_main(config_dict: dict, rank: int, endpoints_dict: dict, ipc_dir: str) -> None:
    """Entry point of worker process `rank`."""
    # Stopping is the supervisor's SIGTERM. A worker holds nothing that needs flushing, and the
    # interpreter's normal teardown (gloo groups, torch thread pools) can outlast the supervisor's
    # grace period, so it leaves at once.
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
    config = ResolvedConfig.from_dict(config_dict)
    settings = EngineSettings.from_config(config)
    endpoints = Endpoints.from_dict(endpoints_dict)
    device = choose_device(settings, dict(config.values), rank)
    if device.type == "cpu":  # share the cores instead of every rank claiming all of them
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // settings.layout.world_size))
    ops = join_group(settings, endpoints, rank, device)
    pipeline = DiffusionPipeline(settings, ops, device)
    with torch.inference_mode():
        warmup = pipeline.warmup() if settings.plan.mode == "server" else None

    context = zmq.Context()
    context.setsockopt(zmq.LINGER, 0)
    inbox = context.socket(zmq.PULL)
    inbox.connect(rank_address(ipc_dir, rank))
    outbox = context.socket(zmq.PUSH)
    outbox.connect(results_address(ipc_dir))
    outbox.send(pack({"kind": "ready", "rank": rank, "pid": os.getpid(), "device": str(device), "warmup": warmup}))
    report_ready()
    while True:
        message = unpack(inbox.recv())
        batch = GenerationBatch(Resolution(message["width"], message["height"]), message["steps"],
                                tuple(ImageJob(**job) for job in message["jobs"]))
        with torch.inference_mode():
            result = pipeline.generate(batch)
        if ops.is_leader:
            outbox.send(pack({"kind": "result", "batch_id": message["batch_id"],
                              "images": [encode_png(image) for image in result.images], "info": result.info}))
