"""One scheduler rank without its sockets: scheduler + model runner + the collectives that keep the
ranks of a group in step. `scheduler_process` wraps it with ZMQ; tests drive it directly.

Every rank of a group applies the same messages in the same order, so their schedulers make the
same decisions; the last pipeline stage samples once (on its first attention rank) and the tokens
are broadcast, so every rank records the same output.
"""

from __future__ import annotations

from typing import Any

from engine.llm.batch import build_batch
from engine.llm.kv_cache import SCRATCH_PAGE
from engine.llm.model_config import load_model_config
from engine.llm.model_runner import ModelRunner
from engine.llm.parallel import Comm
from engine.llm.sampling import sample
from engine.llm.scheduler import Scheduler, SchedulerLimits
from engine.llm.settings import EngineSettings, Rank
from engine.llm.tokenizer import make_tokenizer


class Worker:
    def __init__(self, settings: EngineSettings, rank: Rank, init_method: str | None = None):
        self.settings, self.rank = settings, rank
        self.model_config = load_model_config(settings.model_path)
        topo = settings.topology
        self.model_config.check_parallel(topo.tp_size, topo.attn_tp_size, topo.pp_size)
        self.comm = Comm(settings, rank, init_method)
        self.runner = ModelRunner(settings, self.model_config, self.comm)
        limits = SchedulerLimits(
            page_size=settings.page_size, context_length=self.runner.context_length,
            max_running_requests=self.runner.max_running_requests(),
            max_prefill_tokens=settings.max_prefill_tokens,
            chunked_prefill_size=settings.chunked_prefill_size,
            max_queued_requests=settings.max_queued_requests,
            schedule_policy=settings.schedule_policy,
            disable_radix_cache=settings.disable_radix_cache,
            random_seed=settings.random_seed, stream_interval=settings.stream_interval)
        self.scheduler = Scheduler(limits, self.runner.pool, make_tokenizer(self.model_config))
        self.any_group_busy = False  # did any attention group run the last step (DP attention)?

    def runtime_info(self) -> dict[str, Any]:
        """Sizes decided at start-up from the resolved budget (shown by /server_info)."""
        pool = self.runner.pool
        return {"kv_pool_tokens": pool.capacity_tokens, "kv_cache_dtype": str(pool.dtype).replace("torch.", ""),
                "dtype": str(self.runner.dtype).replace("torch.", ""),
                "page_size": pool.page_size, "context_length": self.runner.context_length,
                "max_running_requests": self.scheduler.limits.max_running_requests,
                "attention_backend": {"prefill": self.runner.prefill_attention.name,
                                      "decode": self.runner.decode_attention.name},
                "cuda_graph_bs_decode": self.runner.graphs.batch_sizes if self.runner.graphs else [],
                "device": str(self.runner.device)}

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def step(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Apply new messages, run at most one forward step, and return the outputs it produced."""
        for message in messages:
            self.scheduler.handle(message)
        step = self.scheduler.next_step()
        self.any_group_busy = self.comm.any_work(step is not None)
        if not self.any_group_busy:
            return self.scheduler.take_outputs()
        slices = step.slices if step is not None else []
        batch = build_batch(slices, self.settings.page_size, self.runner.device, SCRATCH_PAGE)
        logits = self.runner.forward(batch)
        rows = [(r.params, r.generator) for r, s in zip(step.reqs, slices) if s.sample] if step else []
        sampled = None
        if self.comm.is_last_stage and self.comm.attn_tp_rank == 0:
            sampled = sample(logits, [p for p, _ in rows], [g for _, g in rows])
        sampled = self.comm.share_sampled(sampled, len(rows))
        if step is not None:
            self.scheduler.process(step, sampled.tolist())
        return self.scheduler.take_outputs()

    def close(self) -> None:
        self.comm.close()
