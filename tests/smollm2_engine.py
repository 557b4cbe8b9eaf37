"""SmolLM2 in Accord's engine, for tests/test_engine_llm_reference.py: settings, greedy runs, logits,
and one tensor-parallel rank. Kept apart from that test file so spawned rank processes import only
the engine, not transformers.
"""

from __future__ import annotations

import torch

from accord.engine.llm.batch import SeqSlice, build_batch
from accord.engine.llm.messages import pack, unpack
from accord.engine.llm.settings import EngineSettings
from accord.engine.llm.worker import Worker
from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.catalog import load_catalog
from accord.rules.models.location import default_llm

GGUF = default_llm()
FACTS = {"platform": "cpu", "host.ram_gib": 8}
TP_TOKENS = 8


def engine_values(**overrides) -> dict:
    return {**load_catalog("llm").defaults(), "model_path": str(GGUF), "attention_backend": "torch_native",
            "page_size": 16, "mem_fraction_static": 0.8, "random_seed": 1, "max_total_tokens": 4096,
            "dtype": "float32", "chunked_prefill_size": -1, "disable_radix_cache": True, **overrides}


def greedy(worker: Worker, prompts: list[list[int]], max_new_tokens: int, share=None) -> dict[str, list[int]]:
    """Run greedy requests to completion; `share` broadcasts the leader's messages (multi-rank)."""
    messages = [{"type": "generate", "rid": f"r{i}", "input_ids": ids, "stream": False,
                 "sampling": {"max_new_tokens": max_new_tokens, "temperature": 0.0, "ignore_eos": True}}
                for i, ids in enumerate(prompts)]
    results, first = {}, True
    while first or (share.any_work(worker.has_work()) if share else worker.has_work()):
        if share is not None:
            shared = share.share_bytes(pack({"type": "messages", "messages": messages}) if share.is_request_leader and first else None)
            messages = unpack(shared)["messages"] if shared else []
        for item in worker.step(messages):
            results[item["rid"]] = item["ids"]
        messages, first = [], False
    return results


def last_logits(worker: Worker, ids: list[int]) -> torch.Tensor:
    pool = worker.runner.pool
    pages = pool.alloc(-(-len(ids) // pool.page_size))
    try:
        return worker.runner.forward(build_batch([SeqSlice(ids, 0, pages, True)], pool.page_size,
                                                 torch.device("cpu")))[0]
    finally:
        pool.release(pages)


def tp_rank_main(index: int, prompts: list[list[int]], port: int, results) -> None:
    """One of three tensor-parallel ranks: greedy tokens and the prompts' last-token logits."""
    torch.set_num_threads(1)
    try:
        settings = EngineSettings.from_config(ResolvedConfig("llm", FACTS, engine_values(tp_size=3)))
        worker = Worker(settings, settings.topology.all_ranks()[index], f"tcp://127.0.0.1:{port}")
        logits = [last_logits(worker, ids).tolist() for ids in prompts]  # plain lists cross the queue
        tokens = greedy(worker, prompts, TP_TOKENS, share=worker.comm)
        worker.close()
        results.put((index, tokens, logits))
    except Exception as err:  # report instead of leaving the test waiting for a dead rank
        results.put((index, f"rank {index} failed: {type(err).__name__}: {err}", None))
