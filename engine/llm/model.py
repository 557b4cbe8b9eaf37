"""A Llama-style decoder, split by tensor parallelism (and pipeline stages) as resolved.

Column-parallel projections (q/k/v, gate/up) keep 1/n of the output features per rank;
row-parallel ones (o, down) keep 1/n of the input features and sum the partial outputs across
ranks. Attention heads are split over the attention ranks (the TP group, or a DP-attention group);
the MLP is always split over the whole TP group. Embeddings and the LM head are small here and
replicated. Weights are loaded by their HF names, each rank taking only its shard.

RMSNorm is kernels.rmsnorm.rms_norm, run by the implementation of the step's attention backend
(Triton for a triton phase, the torch reference for torch_native), like the KV writes and the
attention: a step computes on one implementation, so triton and torch_native differ only by the
rounding their kernels document. It fits the layer as it stands: the norm after attention is also
where the residual is added, which the kernel fuses (one pass instead of add, reduce, scale); the
other norms take no residual. Both implementations normalise in fp32 and round once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from accord.engine.llm.model_config import ModelConfig
from accord.kernels.rmsnorm import rms_norm

if TYPE_CHECKING:
    from accord.engine.llm.attention import AttentionBackend
    from accord.engine.llm.batch import ForwardBatch
    from accord.engine.llm.kv_cache import KVPool
    from accord.engine.llm.parallel import Comm


class RotaryEmbedding:
    """HF Llama rotary embedding (rotate-half layout), precomputed up to the context length."""

    def __init__(self, head_dim: int, theta: float, max_positions: int, device: torch.device):
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq)
        emb = torch.cat([angles, angles], dim=-1)
        self.cos = emb.cos().float().to(device)
        self.sin = emb.sin().float().to(device)

    def angles(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of each token's position, [T, 1, D]: computed once per step, used per layer."""
        return self.cos[positions][:, None, :], self.sin[positions][:, None, :]

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [T, H, D] rotated by the angles of its tokens."""
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class StepContext:
    """What a forward step needs besides the weights: the batch, the KV pool, the backends."""

    def __init__(self, batch: "ForwardBatch", pool: "KVPool", attention: "AttentionBackend"):
        self.batch = batch
        self.pool = pool
        self.attention = attention
        self.impl = attention.impl  # the kernels/ implementation every kernel of this step runs
        self.cos = self.sin = None  # rotary angles of the batch's positions, set by the model
        self.rows = attention.plan(batch, pool)  # cached-token rows, worked out once for all layers


class DecoderLayer:
    def __init__(self, config: ModelConfig, index: int, pool_index: int, comm: "Comm",
                 dtype: torch.dtype, device: torch.device):
        self.config, self.pool_index, self.comm = config, pool_index, comm
        self.prefix = f"model.layers.{index}."
        self.heads = config.num_heads // comm.attn_tp_size
        self.kv_heads = config.num_kv_heads // comm.attn_tp_size
        self.dtype, self.device = dtype, device

    def load(self, source) -> None:
        comm, p = self.comm, self.prefix
        attn = dict(dim=0, index=comm.attn_tp_rank, parts=comm.attn_tp_size)
        mlp = dict(dim=0, index=comm.tp_rank, parts=comm.tp_size)
        put = self._put
        self.qkv = put(torch.cat([source.get(p + f"self_attn.{n}_proj.weight", **attn) for n in "qkv"]))
        self.qkv_bias = put(torch.cat([source.get(p + f"self_attn.{n}_proj.bias", **attn) for n in "qkv"])) \
            if self.config.attention_bias else None
        self.q_norm = self.k_norm = None
        if self.config.qk_norm:  # Qwen3: one RMSNorm weight over head_dim, shared by every head
            self.q_norm = put(source.get(p + "self_attn.q_norm.weight"))
            self.k_norm = put(source.get(p + "self_attn.k_norm.weight"))
        self.o = put(source.get(p + "self_attn.o_proj.weight", dim=1, index=comm.attn_tp_rank,
                                parts=comm.attn_tp_size))
        self.gate_up = put(torch.cat([source.get(p + f"mlp.{n}_proj.weight", **mlp) for n in ("gate", "up")]))
        self.down = put(source.get(p + "mlp.down_proj.weight", dim=1, index=comm.tp_rank, parts=comm.tp_size))
        self.input_norm = put(source.get(p + "input_layernorm.weight"))
        self.post_norm = put(source.get(p + "post_attention_layernorm.weight"))

    def _put(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(device=self.device, dtype=self.dtype)

    def tensors(self) -> list[torch.Tensor]:
        extra = [t for t in (self.qkv_bias, self.q_norm, self.k_norm) if t is not None]
        return [self.qkv, self.o, self.gate_up, self.down, self.input_norm, self.post_norm, *extra]

    def forward(self, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        c = self.config
        h = rms_norm(x, self.input_norm, c.rms_norm_eps, impl=ctx.impl)
        qkv = F.linear(h, self.qkv, self.qkv_bias)
        q_size, kv_size = self.heads * c.head_dim, self.kv_heads * c.head_dim
        v = qkv[:, q_size + kv_size:].reshape(-1, self.kv_heads, c.head_dim)
        if self.q_norm is None:  # q and k side by side in each row: one rotation for both
            qk = RotaryEmbedding.rotate(qkv[:, :q_size + kv_size].reshape(-1, self.heads + self.kv_heads, c.head_dim),
                                        ctx.cos, ctx.sin)
            q, k = qk[:, :self.heads], qk[:, self.heads:]
        else:
            q = qkv[:, :q_size].reshape(-1, c.head_dim)
            k = qkv[:, q_size:q_size + kv_size].reshape(-1, c.head_dim)
            q = rms_norm(q, self.q_norm, c.rms_norm_eps, impl=ctx.impl).reshape(-1, self.heads, c.head_dim)
            k = rms_norm(k, self.k_norm, c.rms_norm_eps, impl=ctx.impl).reshape(-1, self.kv_heads, c.head_dim)
            q = RotaryEmbedding.rotate(q, ctx.cos, ctx.sin)
            k = RotaryEmbedding.rotate(k, ctx.cos, ctx.sin)
        attn = ctx.attention.forward(q, k, v, ctx.pool, self.pool_index, ctx.batch, ctx.rows)
        attn = self.comm.attn_all_reduce(F.linear(attn.reshape(-1, q_size), self.o))
        h, x = rms_norm(attn, self.post_norm, c.rms_norm_eps, residual=x, impl=ctx.impl)
        h_all, own = self.comm.gather_attention_groups(h)
        gate_up = F.linear(h_all, self.gate_up)
        inter = gate_up.shape[-1] // 2
        mlp = self.comm.tp_all_reduce(F.linear(F.silu(gate_up[:, :inter]) * gate_up[:, inter:], self.down))
        return x + (mlp[own] if self.comm.dp_attention else mlp)


class LlamaStage:
    """The layers of one pipeline stage; the first embeds tokens, the last produces logits."""

    def __init__(self, config: ModelConfig, comm: "Comm", dtype: torch.dtype, device: torch.device,
                 max_positions: int):
        self.config, self.comm, self.dtype, self.device = config, comm, dtype, device
        self.first, self.last = layer_range(config.num_layers, comm.pp_size, comm.pp_rank)
        self.layers = [DecoderLayer(config, i, i - self.first, comm, dtype, device)
                       for i in range(self.first, self.last)]
        self.rope = RotaryEmbedding(config.head_dim, config.rope_theta, max_positions, device)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def load(self, source) -> None:
        def put(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=self.device, dtype=self.dtype)

        if self.comm.is_first_stage:
            self.embed = put(source.get("model.embed_tokens.weight"))
        if self.comm.is_last_stage:
            self.norm = put(source.get("model.norm.weight"))
            tied = self.config.tie_word_embeddings or not source.has("lm_head.weight")
            self.lm_head = put(source.get("model.embed_tokens.weight" if tied else "lm_head.weight"))
        for layer in self.layers:
            layer.load(source)

    def weight_bytes(self) -> int:
        tensors = [t for layer in self.layers for t in layer.tensors()]
        tensors += [getattr(self, n) for n in ("embed", "norm", "lm_head") if hasattr(self, n)]
        return sum(t.numel() * t.element_size() for t in tensors)

    @torch.inference_mode()
    def forward(self, ctx: StepContext, hidden: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states for the next stage, or on the last stage the fp32 logits of the tokens
        that end a sampling sequence."""
        x = F.embedding(ctx.batch.input_ids, self.embed) if self.comm.is_first_stage else hidden
        ctx.cos, ctx.sin = self.rope.angles(ctx.batch.positions)
        for layer in self.layers:
            x = layer.forward(x, ctx)
        if not self.comm.is_last_stage:
            return x
        x = rms_norm(x[ctx.batch.sample_index], self.norm, self.config.rms_norm_eps, impl=ctx.impl)
        return F.linear(x, self.lm_head).float()


def layer_range(num_layers: int, pp_size: int, pp_rank: int) -> tuple[int, int]:
    """Layers [start, end) of one stage: spread evenly, the first stages taking one extra when uneven."""
    base, extra = divmod(num_layers, pp_size)
    start = pp_rank * base + min(pp_rank, extra)
    return start, start + base + (1 if pp_rank < extra else 0)
