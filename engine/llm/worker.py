"""One scheduler rank without its sockets: scheduler + model runner + the collectives that keep the
ranks of a group in step. `scheduler_process` wraps it with ZMQ; tests drive it directly.

Every rank of a group applies the same messages in the same order, so their schedulers make the
same decisions; the last pipeline stage samples once (on its first attention rank) and the tokens
are broadcast, so every rank records the same output.
"""

from __future__ import annotations

from typing import Any

import torch

from accord.engine.llm.batch import build_batch, logit_rows
from accord.engine.llm.kv_cache import SCRATCH_PAGE
from accord.engine.llm.model_config import load_model_config
from accord.engine.llm.model_runner import ModelRunner
from accord.engine.llm.parallel import Comm
from accord.engine.llm.sampling import Row, entry_size, logprob_entry, logprobs, process_logits, sample
from accord.engine.llm.scheduler import Scheduler, SchedulerLimits
from accord.engine.llm.settings import EngineSettings, Rank
from accord.engine.llm.tokenizer import make_tokenizer


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
        reqs = [r for r, s in zip(step.reqs, slices) if s.sample] if step else []
        plan = self._logprob_plan(step)
        floats = sum((len(inputs) + int(output)) * entry_size(step.reqs[i].top_logprobs)
                     for i, inputs, output in plan)
        payload = None
        if self.comm.is_last_stage and self.comm.attn_tp_rank == 0:
            payload = self._sample(logits, slices, reqs, plan, step)
        payload = self.comm.share_sampled(payload, len(reqs) + floats)
        sampled, values = payload[:len(reqs)], payload[len(reqs):].view(torch.float64).tolist()
        if step is not None:
            self.scheduler.process(step, sampled.tolist(), self._logprob_entries(step, plan, values))
        return self.scheduler.take_outputs()

    def _logprob_plan(self, step) -> list[tuple[int, list[tuple[int, int]], bool]]:
        """For each slice whose request wants log-probabilities: (slice index, the (row within
        the slice, prompt token) pairs of prompt positions to report, whether its sampled token
        is reported). Every rank derives the same plan, so they agree on how much is shared."""
        plan = []
        for index, (req, piece) in enumerate(zip(step.reqs, step.slices) if step else ()):
            if req.top_logprobs is None:
                continue
            inputs = []
            if piece.all_logits:
                for j in range(len(piece.token_ids)):
                    following = piece.prefix_len + j + 1
                    if req.logprob_start <= following < len(req.input_ids):
                        inputs.append((j, req.input_ids[following]))
            if inputs or piece.sample:
                plan.append((index, inputs, piece.sample))
        return plan

    def _sample(self, logits, slices, reqs, plan, step) -> torch.Tensor:
        """Sampled ids, then the planned log-probability entries as float64 bits (one int64
        tensor, so one broadcast carries both)."""
        starts, rows = logit_rows(slices)
        infos = [Row(r.params, r.generator, r.output_ids, self.scheduler.stop_ids(r)) for r in reqs]
        sample_logits = logits[rows] if rows else logits[:0]
        penalized = any(info.params.penalized for info in infos)
        processed = torch.stack([process_logits(sample_logits[k], info) for k, info in enumerate(infos)]) \
            if penalized else sample_logits
        ids = sample(processed, infos)
        floats: list[float] = []
        sample_of = {index: k for k, index in enumerate(i for i, s in enumerate(slices) if s.sample)}
        for index, inputs, output in plan:
            req = step.reqs[index]
            if inputs:
                block = logprobs(logits[[starts[index] + j for j, _ in inputs]], req.params)
                for row, (_, token) in zip(block, inputs):
                    floats += logprob_entry(row, token, req.top_logprobs)
            if output:
                k = sample_of[index]
                floats += logprob_entry(logprobs(processed[k], req.params), int(ids[k]), req.top_logprobs)
        extra = torch.tensor(floats, dtype=torch.float64).view(torch.int64)
        return torch.cat([ids.cpu().to(torch.int64), extra])

    @staticmethod
    def _logprob_entries(step, plan, values: list[float]) -> list[dict | None]:
        """The shared floats as the scheduler's entries: [logprob, token, [[logprob, token], ...]]."""
        found: list[dict | None] = [None] * len(step.reqs)
        at = 0

        def entry(token: int, top: int) -> list:
            nonlocal at
            chunk = values[at:at + entry_size(top)]
            at += entry_size(top)
            return [chunk[0], token, [[chunk[1 + 2 * i], int(chunk[2 + 2 * i])] for i in range(top)]]

        for index, inputs, output in plan:
            top = step.reqs[index].top_logprobs
            item = {"input": [entry(token, top) for _, token in inputs]}
            if output:
                item["output"] = entry(-1, top)  # the scheduler fills in the sampled token
            found[index] = item
        return found

    def close(self) -> None:
        self.comm.close()
