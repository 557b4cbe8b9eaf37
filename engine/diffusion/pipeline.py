"""Text to image with the tiny DiT: encode, denoise with classifier-free guidance, decode.

The sampler is flow-matching Euler: latents start as seeded Gaussian noise at sigma 1 and move
along the predicted velocity to sigma 0 in the requested number of steps. Every image's noise
comes from its own seed on the CPU, so a rank, a batch neighbour or a layout never changes it.

Classifier-free guidance mixes the velocities of the prompt and of the negative prompt,
`v = v_uncond + g * (v_cond - v_uncond)`. With one cfg rank both branches run as one batch; with
cfg parallel, cfg rank 0 computes the conditional branch, rank 1 the unconditional one, and they
exchange results. With sequence parallel each rank runs the transformer on its slice of the latent
tokens (padded to a multiple of the sp size) and the velocity is gathered at the end.

How each forward runs follows the warmup plan: with breakable CUDA graphs a batch whose
(resolution, text bucket) was captured replays the graph, one image at a time; anything else runs
eagerly (or compiled, with torch.compile) and its metadata says why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from typing import Any, Iterator

import torch
import torch.nn.functional as F

from accord.engine.diffusion.graphs import CapturedForward, run_stages
from accord.engine.diffusion.model import grid_positions
from accord.engine.diffusion.parallel import ParallelOps
from accord.engine.diffusion.settings import EngineSettings
from accord.engine.diffusion.tokens import PAD_TOKEN, tokenize
from accord.engine.diffusion.warmup import Resolution, WarmupEntry
from accord.engine.diffusion.weights import load_networks

WARMUP_PROMPT = "warmup"


@dataclasses.dataclass(frozen=True)
class ImageJob:
    prompt: str
    negative_prompt: str
    seed: int
    guidance_scale: float


@dataclasses.dataclass(frozen=True)
class GenerationBatch:
    """Images that share a resolution and a step count, so they denoise together."""

    resolution: Resolution
    steps: int
    jobs: tuple[ImageJob, ...]


@dataclasses.dataclass
class GenerationResult:
    images: Any  # uint8 array [n, height, width, 3] on the leader rank; None elsewhere
    info: dict[str, Any]


def flow_sigmas(steps: int, shift: float) -> list[float]:
    """Noise levels from 1 down to 0, optionally shifted toward high noise."""
    sigmas = [1.0 - i / steps for i in range(steps + 1)]
    return [shift * s / (1.0 + (shift - 1.0) * s) for s in sigmas]


class DiffusionPipeline:
    def __init__(self, settings: EngineSettings, ops: ParallelOps | None = None,
                 device: torch.device | str = "cpu"):
        self.settings = settings
        self.plan = settings.plan
        self.ops = ops or ParallelOps()
        self.device = torch.device(device)
        networks = load_networks(settings.model, self.ops.tp_rank, self.ops.tp_size)
        self.text_encoder = networks["text_encoder"]
        self.transformer = networks["transformer"]
        self.vae = networks["vae"]
        # Offloaded components stay in host memory and visit the device only while used.
        self.offloaded = {name for name, off in settings.offload.items() if off and self.device.type != "cpu"}
        for name, module in networks.items():
            if name not in self.offloaded:
                module.to(self.device)
        self.latent_channels = int(settings.model.transformer["in_channels"])
        self.vae_scale = int(settings.model.vae["downsample_factor"])
        self.shift = float(settings.model.scheduler.get("shift", 1.0))
        self.stages = self.transformer.stages(self.ops)
        eager = functools.partial(run_stages, self.stages)
        self.forward = torch.compile(eager) if settings.torch_compile else eager
        self.graphs: dict[WarmupEntry, CapturedForward] = {}
        self._position_cache: dict[tuple[int, int], torch.Tensor] = {}
        self.warmup_done = False

    @property
    def captures_graphs(self) -> bool:
        return self.plan.breakable_graph and self.device.type == "cuda"

    # -- public ------------------------------------------------------------------------------

    def generate(self, batch: GenerationBatch) -> GenerationResult:
        """Denoise and (on the leader rank) decode one batch; run the request-mode warmup first."""
        warmup_report = None
        if self.plan.mode == "request" and not self.warmup_done:
            warmup_report = self.warmup()
        started = time.perf_counter()
        info = self._denoise_and_decode(batch)
        info["seconds"] = round(time.perf_counter() - started, 4)
        info["warmup"] = ({"mode": "request", "ran_before_this_request": warmup_report}
                          if warmup_report is not None else None)
        return GenerationResult(images=info.pop("images"), info=info)

    def warmup(self) -> list[dict[str, Any]]:
        """Execute every entry of the warmup plan: capture its graph (on a GPU) and run it."""
        report = []
        for entry in self.plan.entries:
            started = time.perf_counter()
            prompt = WARMUP_PROMPT if entry.text_bucket is None else "w" * (entry.text_bucket - 1)
            default_guidance = float(self.settings.model.sampling.get("guidance_scale", 4.0))
            batch = GenerationBatch(entry.resolution, self.plan.steps,
                                    (ImageJob(prompt, "", 0, default_guidance),))
            info = self._denoise_and_decode(batch, capture=True)
            report.append({**entry.to_dict(), "steps": self.plan.steps, "execution": info["execution"],
                           "seconds": round(time.perf_counter() - started, 4)})
        self.warmup_done = True
        return report

    # -- internals ---------------------------------------------------------------------------

    def _denoise_and_decode(self, batch: GenerationBatch, capture: bool = False) -> dict[str, Any]:
        resolution = batch.resolution
        tokens_needed = max(len(tokenize(t)) for job in batch.jobs for t in (job.prompt, job.negative_prompt))
        bucket = self.plan.text_bucket(tokens_needed)
        text_length = bucket or tokens_needed
        entry = WarmupEntry(resolution, bucket)
        in_plan = self.plan.covers(resolution, bucket)
        info = {"resolution": str(resolution), "steps": batch.steps, "images": None, "batch_size": len(batch.jobs),
                "text_tokens": tokens_needed, "text_bucket": bucket, "in_warmup_plan": in_plan}

        latent_h, latent_w = resolution.height // self.vae_scale, resolution.width // self.vae_scale
        cond = self._encode([j.prompt for j in batch.jobs], text_length)
        uncond = self._encode([j.negative_prompt for j in batch.jobs], text_length)
        latents = self._noise(batch.jobs, latent_h, latent_w)
        guidance = torch.tensor([j.guidance_scale for j in batch.jobs], device=self.device)

        graph = None
        if self.captures_graphs and in_plan:
            if capture and entry not in self.graphs:
                self.graphs[entry] = self._capture(latents[:1], cond, uncond)
            graph = self.graphs.get(entry)
        info.update(self._execution_note(resolution, bucket, tokens_needed, in_plan, graph is not None))

        sigmas = flow_sigmas(batch.steps, self.shift)
        with self._on_device("transformer"):
            for sigma, sigma_next in zip(sigmas[:-1], sigmas[1:]):
                if graph is None:
                    velocity = self._velocity(latents, sigma, cond, uncond, guidance, self.forward)
                else:  # a graph is captured for one image: replay it image by image
                    velocity = torch.cat([
                        self._velocity(latents[i:i + 1], sigma, _rows(cond, i), _rows(uncond, i),
                                       guidance[i:i + 1], graph)
                        for i in range(len(batch.jobs))])
                latents = latents + (sigma_next - sigma) * velocity
        if self.ops.is_leader:
            with self._on_device("vae"):
                pixels = self.vae(latents.to(self._device_of("vae")))
            info["images"] = ((pixels + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8) \
                .permute(0, 2, 3, 1).cpu().numpy()
        return info

    def _execution_note(self, resolution: Resolution, bucket: int | None, tokens: int, in_plan: bool,
                        has_graph: bool) -> dict[str, str]:
        if has_graph:
            return {"execution": "cuda_graph",
                    "note": f"replayed the breakable CUDA graph captured at warmup for {resolution}, "
                            f"text bucket {bucket}"}
        eager = "compiled" if self.settings.torch_compile else "eager"
        if not self.plan.breakable_graph:
            return {"execution": eager, "note": "breakable CUDA graph is off"}
        if bucket is None:
            return {"execution": eager,
                    "note": f"the prompt needs {tokens} text tokens, more than the largest text bucket "
                            f"{self.plan.text_buckets[-1]}; ran eagerly at its own length"}
        if not in_plan:
            planned = ", ".join(str(r) for r in self.plan.resolutions)
            return {"execution": eager,
                    "note": f"{resolution} is not in the warmup plan ({planned}); ran eagerly without a graph"}
        return {"execution": eager,
                "note": f"{resolution} with text bucket {bucket} is in the warmup plan, but CUDA graphs need "
                        f"a GPU; ran eagerly on {self.device.type}"}

    def _capture(self, latents: torch.Tensor, cond, uncond) -> CapturedForward:
        text, mask = _rows(cond, 0)
        if self.ops.cfg_size == 1:  # both branches of one image form the graph's batch
            latents = torch.cat([latents, latents])
            text, mask = torch.cat([text, uncond[0][:1]]), torch.cat([mask, uncond[1][:1]])
        t = torch.ones(latents.shape[0], device=self.device)
        return CapturedForward(self.stages, self._transformer_inputs(latents, t, text, mask))

    def _velocity(self, latents, sigma: float, cond, uncond, guidance, forward) -> torch.Tensor:
        t = torch.full((latents.shape[0],), sigma, device=self.device)
        if self.ops.cfg_size == 1:
            both = self._transformer(torch.cat([latents, latents]), torch.cat([t, t]),
                                     torch.cat([cond[0], uncond[0]]), torch.cat([cond[1], uncond[1]]), forward)
            v_cond, v_uncond = both.chunk(2)
        else:
            text, mask = cond if self.ops.cfg_rank == 0 else uncond
            v_cond, v_uncond = self.ops.cfg_all_gather(self._transformer(latents, t, text, mask, forward))
        return v_uncond + guidance.view(-1, 1, 1, 1) * (v_cond - v_uncond)

    def _transformer_inputs(self, latents, t, text, mask) -> dict[str, torch.Tensor]:
        """This rank's shard of the token sequence, padded so every sp rank holds the same count."""
        tokens = self.transformer.patchify(latents)
        length = tokens.shape[1]
        chunk = math.ceil(length / self.ops.sp_size)
        padded = chunk * self.ops.sp_size
        patch = self.transformer.patch
        pos = self._positions(latents.shape[2] // patch, latents.shape[3] // patch)
        start = self.ops.sp_rank * chunk
        return {
            "tokens": F.pad(tokens, (0, 0, 0, padded - length))[:, start:start + chunk],
            "pos": F.pad(pos, (0, 0, 0, padded - length))[start:start + chunk],
            "t": t, "text": text, "text_mask": mask,
            "key_valid": torch.arange(padded, device=self.device) < length,
        }

    def _transformer(self, latents, t, text, mask, forward) -> torch.Tensor:
        out = forward(self._transformer_inputs(latents, t, text, mask))["out"]
        length = latents.shape[2] * latents.shape[3] // self.transformer.patch ** 2
        tokens = self.ops.sp_all_gather(out, dim=1)[:, :length]
        return self.transformer.unpatchify(tokens, latents.shape[2], latents.shape[3])

    def _positions(self, grid_h: int, grid_w: int) -> torch.Tensor:
        key = (grid_h, grid_w)
        if key not in self._position_cache:
            self._position_cache[key] = grid_positions(grid_h, grid_w, self.transformer.hidden).to(self.device)
        return self._position_cache[key]

    def _encode(self, prompts: list[str], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.full((len(prompts), length), PAD_TOKEN, dtype=torch.long)
        mask = torch.zeros((len(prompts), length), dtype=torch.bool)
        for row, prompt in enumerate(prompts):
            tokens = tokenize(prompt)
            ids[row, :len(tokens)] = torch.tensor(tokens)
            mask[row, :len(tokens)] = True
        with self._on_device("text_encoder"):
            features = self.text_encoder(ids.to(self._device_of("text_encoder")))
        return features.to(self.device), mask.to(self.device)

    def _noise(self, jobs: tuple[ImageJob, ...], height: int, width: int) -> torch.Tensor:
        shape = (1, self.latent_channels, height, width)
        noise = [torch.randn(shape, generator=torch.Generator().manual_seed(job.seed)) for job in jobs]
        return torch.cat(noise).to(self.device)

    def _device_of(self, component: str) -> torch.device:
        return next(getattr(self, component).parameters()).device

    @contextlib.contextmanager
    def _on_device(self, component: str) -> Iterator[None]:
        """Bring an offloaded component to the device for the duration of its use."""
        if component not in self.offloaded:
            yield
            return
        module = getattr(self, component)
        module.to(self.device)
        try:
            yield
        finally:
            module.to("cpu")


def _rows(encoded: tuple[torch.Tensor, torch.Tensor], i: int) -> tuple[torch.Tensor, torch.Tensor]:
    return encoded[0][i:i + 1], encoded[1][i:i + 1]
