"""Multi-rank generation over gloo: tp=2, pp=2 and DP attention give the single-rank tokens exactly.

Two spawned rank processes run every case in turn (a fresh torch.distributed world per case), so
the whole file costs two process starts.
"""

from __future__ import annotations

import multiprocessing
import queue

import pytest
import torch

from accord.engine.llm.messages import pack, unpack
from accord.engine.llm.settings import EngineSettings
from accord.engine.llm.worker import Worker
from accord.engine.ports import free_port
from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.catalog import load_catalog

FACTS = {"platform": "cpu", "host.ram_gib": 8}
BASE = dict(model_path="tiny-llama", attention_backend="torch_native", page_size=4, mem_fraction_static=0.8, random_seed=11,
            max_total_tokens=4096, dtype="float32", chunked_prefill_size=24)
PROMPTS = ["tensor parallel ranks split heads", "pipeline stages pass hidden states along " * 2,
           "x", "data parallel attention groups", "gloo on the CPU"]
CASES = {
    "tp2": dict(tp_size=2),
    "pp2": dict(pp_size=2),
    "dp_attention": dict(tp_size=2, dp_size=2, enable_dp_attention=True),
}


def requests(indices) -> list[dict]:
    return [{"type": "generate", "rid": f"r{i}", "input_ids": [256, *PROMPTS[i].encode()], "stream": False,
             "sampling": {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True}} for i in indices]


def values(**overrides) -> dict:
    return {**load_catalog("llm").defaults(), **BASE, **overrides}


def run_case(worker: Worker, messages: list[dict]) -> dict[str, list[int]]:
    """Drive the ranks of one world the way scheduler_process does: the leader shares its inbox."""
    comm, outputs, first = worker.comm, {}, True
    while first or comm.any_work(worker.has_work()):
        payload = pack({"type": "messages", "messages": messages}) if comm.is_request_leader and first else None
        shared = comm.share_bytes(payload)
        for item in worker.step(unpack(shared)["messages"] if shared else []):
            outputs[item["rid"]] = item["ids"]
        first = False
    return outputs if comm.is_request_leader else {}


def rank_main(index: int, cases: list[tuple[str, dict, int]], results) -> None:
    torch.set_num_threads(1)
    for name, case_values, port in cases:
        try:
            settings = EngineSettings.from_config(ResolvedConfig("llm", FACTS, case_values))
            rank = settings.topology.all_ranks()[index]
            worker = Worker(settings, rank, f"tcp://127.0.0.1:{port}")
            groups = settings.topology.dp_size if settings.topology.dp_attention else 1
            mine = requests(range(rank.dp, len(PROMPTS), groups))  # each DP group gets its share
            results.put((name, index, run_case(worker, mine)))
            worker.close()
        except Exception as err:  # report instead of leaving the test waiting for a dead rank
            results.put((name, index, f"rank {index} failed: {type(err).__name__}: {err}"))
            return


@pytest.fixture(scope="module")
def multi_rank_outputs() -> dict[str, dict[str, list[int]]]:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    cases = [(name, values(**overrides), free_port()) for name, overrides in CASES.items()]
    procs = [context.Process(target=rank_main, args=(i, cases, results), daemon=True) for i in range(2)]
    for p in procs:
        p.start()
    merged: dict[str, dict[str, list[int]]] = {name: {} for name in CASES}
    try:
        for _ in range(2 * len(CASES)):
            name, _, outputs = results.get(timeout=240)
            if isinstance(outputs, str):
                pytest.fail(f"{name}: {outputs}")
            merged[name].update(outputs)
    except queue.Empty:
        pytest.fail(f"rank processes did not finish; exit codes {[p.exitcode for p in procs]}")
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    return merged


@pytest.fixture(scope="module")
def single_rank_outputs() -> dict[str, list[int]]:
    torch.set_num_threads(1)
    settings = EngineSettings.from_config(ResolvedConfig("llm", FACTS, values()))
    worker = Worker(settings, settings.topology.all_ranks()[0])
    return run_case(worker, requests(range(len(PROMPTS))))


@pytest.mark.parametrize("case", list(CASES))
def test_multi_rank_greedy_tokens_equal_single_rank(case, multi_rank_outputs, single_rank_outputs):
    assert multi_rank_outputs[case] == single_rank_outputs
