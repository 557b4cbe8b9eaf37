"""Owns one rank's model shard, KV pool and attention backends, and runs one forward step.

Sizing follows upstream: load the weights first, then give the KV pool what is left of the static
budget (or --max-total-tokens), agreed as the minimum over all ranks so every rank's scheduler sees
the same pool, whose FP8 scales come from the resolved quantization_param_path
(kv_cache.layer_kv_scales). On CUDA, decode steps replay CUDA graphs captured at the resolved
batch sizes.
"""

from __future__ import annotations

import torch

from accord.engine.llm.attention import AttentionBackend
from accord.engine.llm.batch import ForwardBatch
from accord.engine.llm.cuda_graph import DecodeGraphs
from accord.engine.llm.kv_cache import KVPool, layer_kv_scales, pool_tokens
from accord.engine.llm.model import LlamaStage, StepContext
from accord.engine.llm.model_config import ModelConfig, context_length
from accord.engine.llm.parallel import Comm
from accord.engine.llm.settings import EngineSettings
from accord.engine.llm.weights import weight_source
from accord.kernels.kv_quant import cache_dtype
from accord.resolver.errors import UsageError

DTYPES = {"half": torch.float16, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float": torch.float32, "float32": torch.float32}


def model_dtype(dtype_flag: str, config: ModelConfig) -> torch.dtype:
    """--dtype, where 'auto' means the checkpoint's own dtype."""
    name = config.dtype if dtype_flag == "auto" else dtype_flag
    if name not in DTYPES:
        raise UsageError(f"the model's dtype {name!r} is not one the engine computes in; pass --dtype "
                         "bfloat16, float16 or float32.")
    return DTYPES[name]


class ModelRunner:
    def __init__(self, settings: EngineSettings, config: ModelConfig, comm: Comm):
        self.settings, self.config, self.comm = settings, config, comm
        self.device = comm.device
        self.dtype = model_dtype(settings.dtype, config)
        self.context_length = context_length(settings.context_length, config)
        self.stage = LlamaStage(config, comm, self.dtype, self.device, self.context_length)
        self.stage.load(weight_source(settings.model_path, settings.load_format, config, settings.random_seed))
        self.pool = self._make_pool()
        self.prefill_attention = AttentionBackend(settings.prefill_attention_backend, config.head_dim,
                                                  settings, self.device)
        self.decode_attention = AttentionBackend(settings.decode_attention_backend, config.head_dim,
                                                 settings, self.device)
        self.graphs = None
        if settings.cuda_graph_bs_decode and self.device.type == "cuda" and comm.pp_size == 1 \
                and not comm.dp_attention:
            self.graphs = DecodeGraphs(self, settings.cuda_graph_bs_decode)

    def _make_pool(self) -> KVPool:
        s, c = self.settings, self.config
        kv_dtype = cache_dtype(s.kv_cache_dtype, self.dtype)
        kv_heads = c.num_kv_heads // self.comm.attn_tp_size
        element = torch.empty((), dtype=kv_dtype).element_size()
        bytes_per_token = 2 * self.stage.num_layers * kv_heads * c.head_dim * element
        tokens = pool_tokens(mem_fraction_static=s.mem_fraction_static, device_mem_gib=s.device_mem_gib,
                             max_total_tokens=s.max_total_tokens,
                             weight_bytes=self.stage.weight_bytes(), bytes_per_token=bytes_per_token)
        scales = layer_kv_scales(s.quantization_param_path, kv_dtype, attn_tp_rank=self.comm.attn_tp_rank,
                                 num_layers=c.num_layers, layers=range(self.stage.first, self.stage.last))
        tokens = self.comm.min_over_world(tokens)
        return KVPool(num_pages=tokens // s.page_size, page_size=s.page_size,
                      num_layers=self.stage.num_layers, num_kv_heads=kv_heads, head_dim=c.head_dim,
                      dtype=kv_dtype, device=self.device, kv_scales=scales)

    def max_running_requests(self) -> int:
        """--max-running-requests, or upstream's default derived from the pool size."""
        if self.settings.max_running_requests is not None:
            return self.settings.max_running_requests
        return min(max(self.pool.capacity_tokens * 512 // self.context_length, 2048), 4096)

    def forward(self, batch: ForwardBatch) -> torch.Tensor | None:
        """Run this stage; the last stage returns fp32 logits of the sampling rows."""
        if self.graphs is not None and batch.mode == "decode" and self.graphs.can_run(batch):
            return self.graphs.replay(batch)
        attention = self.decode_attention if batch.mode == "decode" else self.prefill_attention
        ctx = StepContext(batch, self.pool, attention)
        hidden = None
        if not self.comm.is_first_stage:
            hidden = self.comm.recv_from_previous_stage((batch.num_tokens, self.config.hidden_size), self.dtype)
        out = self.stage.forward(ctx, hidden)
        if not self.comm.is_last_stage:
            self.comm.send_to_next_stage(out)
            return None
        return out
