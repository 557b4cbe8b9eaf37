"""The built-in tiny DiT pipeline's networks: byte text encoder, DiT transformer, latent decoder.

- `ByteTextEncoder`: a stand-in for a real text encoder. A prompt's UTF-8 bytes (after a start
  token) are embedded per token; no token looks at another, so padding a prompt to a text bucket
  never changes the features of its real tokens, and the mask keeps padding out of attention.
- `TinyDiT`: a DiT-style transformer over 2x2 latent patches, conditioned on the timestep and the
  pooled prompt through adaptive LayerNorm, with self-attention over image tokens and
  cross-attention to the prompt. Its forward is written as a list of `Stage`s that break at
  self-attention: the stages between breaks are what a breakable CUDA graph captures, the
  attention (where sequence-parallel ranks exchange keys and values) always runs eagerly.
- `LatentDecoder`: a stand-in VAE decoder, latents to RGB by a 1x1 convolution and pixel shuffle.

Tensor parallelism splits attention heads and MLP columns: every rank builds the full weights from
the same seed (or file) and keeps its slice (`shard_state_dict`), so any tp size computes the same
function. Sequence parallelism is handled by the caller handing each rank a shard of the tokens.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from accord.engine.diffusion.parallel import ParallelOps

State = dict[str, torch.Tensor]


@dataclasses.dataclass(frozen=True)
class Stage:
    """One step of the transformer forward: a pure function from state to state."""

    name: str
    run: Callable[[State], State]
    breaks: bool = False  # True: never captured in a graph (attention across sp ranks)


def seeded_init(module: nn.Module, seed: int) -> None:
    """Dummy weights: deterministic for a seed, scaled so every path contributes to the output."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(module.named_parameters()):
            if param.dim() >= 2:
                fan_in = param.shape[1] * (param[0, 0].numel() if param.dim() > 2 else 1)
                std = 1.0 if isinstance(_owner(module, name), nn.Embedding) else fan_in ** -0.5
                param.copy_(torch.randn(param.shape, generator=generator) * std)
            elif name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)


def _owner(module: nn.Module, param_name: str) -> nn.Module:
    return module.get_submodule(param_name.rsplit(".", 1)[0]) if "." in param_name else module


class ByteTextEncoder(nn.Module):
    def __init__(self, config: dict[str, Any]):
        super().__init__()
        dim = int(config["hidden_size"])
        self.token = nn.Embedding(int(config["vocab_size"]), dim)
        self.position = nn.Embedding(int(config["max_position_embeddings"]), dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.norm(F.gelu(self.proj(self.token(ids) + self.position(positions))))


class RowParallelLinear(nn.Module):
    """y = x W^T + b where x holds this rank's slice of the input features; partial sums are reduced."""

    def __init__(self, in_local: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_local))
        self.bias = nn.Parameter(torch.empty(out_features))

    def forward(self, x: torch.Tensor, ops: ParallelOps) -> torch.Tensor:
        return ops.tp_all_reduce(F.linear(x, self.weight)) + self.bias


# Parameter names whose output features (column parallel) or input features (row parallel) are
# split across tensor-parallel ranks; every other parameter is replicated.
COLUMN_PARALLEL = ("to_q", "to_k", "to_v", "fc1")
ROW_PARALLEL = ("to_out", "fc2")


class Attention(nn.Module):
    def __init__(self, hidden: int, context: int, heads_local: int, head_dim: int):
        super().__init__()
        local = heads_local * head_dim
        self.heads, self.head_dim = heads_local, head_dim
        self.to_q = nn.Linear(hidden, local)
        self.to_k = nn.Linear(context, local)
        self.to_v = nn.Linear(context, local)
        self.to_out = RowParallelLinear(local, hidden)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2).flatten(-2)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class DiTBlock(nn.Module):
    def __init__(self, hidden: int, text_dim: int, heads_local: int, head_dim: int, mlp_local: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False)
        self.norm3 = nn.LayerNorm(hidden, elementwise_affine=False)
        self.modulation = nn.Linear(hidden, 9 * hidden)
        self.self_attn = Attention(hidden, hidden, heads_local, head_dim)
        self.cross_attn = Attention(hidden, text_dim, heads_local, head_dim)
        self.fc1 = nn.Linear(hidden, mlp_local)
        self.fc2 = RowParallelLinear(mlp_local, hidden)

    def stages(self, prefix: str, ops: ParallelOps) -> list[Stage]:
        def pre(state: State) -> State:
            mods = self.modulation(F.silu(state["c"])).chunk(9, dim=-1)
            h = modulate(self.norm1(state["x"]), mods[0], mods[1])
            attn = self.self_attn
            return {**state, "mods": torch.stack(mods), "q": attn.split_heads(attn.to_q(h)),
                    "k": attn.split_heads(attn.to_k(h)), "v": attn.split_heads(attn.to_v(h))}

        def attend(state: State) -> State:
            # Queries stay local; keys and values of the whole sequence are gathered from the sp group.
            k = ops.sp_all_gather(state["k"], dim=2)
            v = ops.sp_all_gather(state["v"], dim=2)
            out = F.scaled_dot_product_attention(state["q"], k, v, attn_mask=state["key_valid"][None, :])
            rest = {key: val for key, val in state.items() if key not in ("q", "k", "v")}
            return {**rest, "attn": merge_heads(out)}

        def post(state: State) -> State:
            mods = state["mods"].unbind(0)
            x = state["x"] + mods[2].unsqueeze(1) * self.self_attn.to_out(state["attn"], ops)
            cross = self.cross_attn
            q = cross.split_heads(cross.to_q(modulate(self.norm2(x), mods[3], mods[4])))
            k = cross.split_heads(cross.to_k(state["text"]))
            v = cross.split_heads(cross.to_v(state["text"]))
            mask = state["text_mask"][:, None, None, :]
            x = x + mods[5].unsqueeze(1) * cross.to_out(
                merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)), ops)
            h = F.gelu(self.fc1(modulate(self.norm3(x), mods[6], mods[7])))
            x = x + mods[8].unsqueeze(1) * self.fc2(h, ops)
            rest = {key: val for key, val in state.items() if key not in ("attn", "mods")}
            return {**rest, "x": x}

        return [Stage(f"{prefix}.pre", pre), Stage(f"{prefix}.attention", attend, breaks=True),
                Stage(f"{prefix}.post", post)]


def timestep_features(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal features of t in [0, 1] (scaled to the 1000 training timesteps)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    angles = (t.float() * 1000.0)[:, None] * freqs[None]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


def grid_positions(grid_h: int, grid_w: int, dim: int) -> torch.Tensor:
    """2-D sine/cosine position features for a grid_h x grid_w token grid, row-major: [h*w, dim]."""
    quarter = dim // 4
    freqs = 1.0 / (10000.0 ** (torch.arange(quarter, dtype=torch.float32) / quarter))
    rows = torch.arange(grid_h, dtype=torch.float32)[:, None] * freqs[None]
    cols = torch.arange(grid_w, dtype=torch.float32)[:, None] * freqs[None]
    row_feats = torch.cat([rows.sin(), rows.cos()], dim=-1)[:, None, :].expand(grid_h, grid_w, 2 * quarter)
    col_feats = torch.cat([cols.sin(), cols.cos()], dim=-1)[None, :, :].expand(grid_h, grid_w, 2 * quarter)
    return torch.cat([row_feats, col_feats], dim=-1).reshape(grid_h * grid_w, 4 * quarter)


class TinyDiT(nn.Module):
    def __init__(self, config: dict[str, Any], tp_size: int = 1):
        super().__init__()
        self.hidden = int(config["hidden_size"])
        self.in_channels = int(config["in_channels"])
        self.patch = int(config["patch_size"])
        heads = int(config["num_attention_heads"])
        text_dim = int(config["text_hidden_size"])
        mlp = int(config["mlp_ratio"]) * self.hidden
        if heads % tp_size or mlp % tp_size:
            raise ValueError(f"tp size {tp_size} does not divide {heads} heads and {mlp} MLP columns")
        patch_dim = self.patch * self.patch * self.in_channels
        self.patch_embed = nn.Linear(patch_dim, self.hidden)
        self.time_embed = nn.Sequential(nn.Linear(self.hidden, self.hidden), nn.SiLU(),
                                        nn.Linear(self.hidden, self.hidden))
        self.text_pool = nn.Linear(text_dim, self.hidden)
        self.blocks = nn.ModuleList(
            DiTBlock(self.hidden, text_dim, heads // tp_size, self.hidden // heads, mlp // tp_size)
            for _ in range(int(config["num_layers"])))
        self.final_norm = nn.LayerNorm(self.hidden, elementwise_affine=False)
        self.final_modulation = nn.Linear(self.hidden, 2 * self.hidden)
        self.final = nn.Linear(self.hidden, patch_dim)

    def stages(self, ops: ParallelOps) -> list[Stage]:
        """The forward as stages. Input state: tokens [B, L, patch_dim] (this rank's shard), pos
        [L, hidden], t [B], text [B, T, text_dim], text_mask [B, T] (bool), key_valid [L_total]
        (bool: which gathered positions are real tokens). Output state: out [B, L, patch_dim]."""

        def embed(state: State) -> State:
            mask = state["text_mask"].unsqueeze(-1).to(state["text"].dtype)
            pooled = (state["text"] * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            c = self.time_embed(timestep_features(state["t"], self.hidden)) + self.text_pool(pooled)
            x = self.patch_embed(state["tokens"]) + state["pos"]
            return {"x": x, "c": c, "text": state["text"], "text_mask": state["text_mask"],
                    "key_valid": state["key_valid"]}

        def final(state: State) -> State:
            shift, scale = self.final_modulation(F.silu(state["c"])).chunk(2, dim=-1)
            return {"out": self.final(modulate(self.final_norm(state["x"]), shift, scale))}

        stages = [Stage("embed", embed)]
        for i, block in enumerate(self.blocks):
            stages.extend(block.stages(f"block{i}", ops))
        stages.append(Stage("final", final))
        return stages

    def patchify(self, latents: torch.Tensor) -> torch.Tensor:
        """[B, C, H, W] -> [B, (H/p)*(W/p), p*p*C], row-major over the patch grid."""
        b, c, h, w = latents.shape
        p = self.patch
        x = latents.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)
        return x.reshape(b, (h // p) * (w // p), p * p * c)

    def unpatchify(self, tokens: torch.Tensor, h: int, w: int) -> torch.Tensor:
        b = tokens.shape[0]
        p, c = self.patch, self.in_channels
        x = tokens.reshape(b, h // p, w // p, p, p, c).permute(0, 5, 1, 3, 2, 4)
        return x.reshape(b, c, h, w)


class LatentDecoder(nn.Module):
    def __init__(self, config: dict[str, Any]):
        super().__init__()
        self.upscale = int(config["downsample_factor"])
        self.scaling_factor = float(config["scaling_factor"])
        out = int(config["out_channels"])
        self.proj = nn.Conv2d(int(config["latent_channels"]), out * self.upscale ** 2, kernel_size=1)

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents -> images in [-1, 1], [B, 3, H*upscale, W*upscale]."""
        return torch.tanh(F.pixel_shuffle(self.proj(latents / self.scaling_factor), self.upscale))


def shard_state_dict(state: dict[str, torch.Tensor], tp_rank: int, tp_size: int) -> dict[str, torch.Tensor]:
    """This rank's slice of a full (tp_size 1) transformer state dict."""
    if tp_size == 1:
        return dict(state)
    out = {}
    for name, tensor in state.items():
        parts = name.split(".")
        layer, kind = parts[-2], parts[-1]
        if layer in COLUMN_PARALLEL:
            tensor = tensor.chunk(tp_size, dim=0)[tp_rank]
        elif layer in ROW_PARALLEL and kind == "weight":
            tensor = tensor.chunk(tp_size, dim=1)[tp_rank]
        out[name] = tensor.contiguous()
    return out
