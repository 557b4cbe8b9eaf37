"""engine.llm.scheduler with scripted tokens (no model): batching budgets, finishing, streaming, memory."""

from __future__ import annotations

import torch

from accord.engine.llm.kv_cache import KVPool
from accord.engine.llm.scheduler import Scheduler, SchedulerLimits
from accord.engine.llm.tokenizer import ByteTokenizer

EOS = 257


def make(pages: int = 64, page_size: int = 4, **limits) -> Scheduler:
    pool = KVPool(num_pages=pages, page_size=page_size, num_layers=1, num_kv_heads=1, head_dim=2,
                  dtype=torch.float32, device=torch.device("cpu"))
    defaults = dict(page_size=page_size, context_length=256, max_running_requests=8, max_prefill_tokens=1024,
                    chunked_prefill_size=None, max_queued_requests=None, schedule_policy="fcfs",
                    disable_radix_cache=False, random_seed=0, stream_interval=1)
    return Scheduler(SchedulerLimits(**{**defaults, **limits}), pool, ByteTokenizer(258, 256, (EOS,)))


def gen(rid: str, prompt: list[int], max_new: int = 4, stream: bool = False, **sampling) -> dict:
    return {"type": "generate", "rid": rid, "input_ids": prompt, "stream": stream,
            "sampling": {"max_new_tokens": max_new, "temperature": 0.0, **sampling}}


def run_step(sched: Scheduler, token=lambda req: 65):
    step = sched.next_step()
    if step is None:
        return None
    sched.process(step, [token(r) for r, s in zip(step.reqs, step.slices) if s.sample])
    return step


def run_all(sched: Scheduler, token=lambda req: 65) -> list[dict]:
    outputs = []
    while run_step(sched, token) is not None:
        outputs += sched.take_outputs()
    return outputs + sched.take_outputs()


def test_eos_finishes_unless_ignored_and_stop_strings_match_decoded_text():
    sched = make()
    sched.handle(gen("eos", [1, 2], 10))
    sched.handle(gen("ignore", [1, 2], 3, ignore_eos=True))
    sched.handle(gen("text", [1, 2], 10, stop=["BC"]))
    script = {"eos": iter([65, EOS]), "ignore": iter([EOS, EOS, EOS]), "text": iter(b"ABCD")}
    out = {o["rid"]: o for o in run_all(sched, lambda r: next(script[r.rid]))}
    assert out["eos"]["ids"] == [65, EOS] and out["eos"]["finish_reason"] == {"type": "stop", "matched": EOS}
    assert out["ignore"]["ids"] == [EOS] * 3 and out["ignore"]["finish_reason"]["type"] == "length"
    assert out["text"]["ids"] == list(b"ABC") and out["text"]["finish_reason"] == {"type": "stop", "matched": "BC"}


def test_streams_report_every_stream_interval_tokens_and_at_the_end():
    sched = make(stream_interval=3)
    sched.handle(gen("s", [1, 2, 3], 7, stream=True))
    sched.handle(gen("n", [1, 2, 3], 7, stream=False))
    outs = run_all(sched)
    streamed = [o for o in outs if o["rid"] == "s"]
    assert [len(o["ids"]) for o in streamed] == [3, 3, 1] and streamed[-1]["finished"]
    whole = [o for o in outs if o["rid"] == "n"]
    assert len(whole) == 1 and len(whole[0]["ids"]) == 7


def test_chunked_prefill_cuts_a_long_prompt_and_continues_it_first():
    sched = make(chunked_prefill_size=16)
    sched.handle(gen("long", list(range(1, 51)), 2))
    sched.handle(gen("short", [1, 2, 3], 2))
    sizes = []
    while (step := run_step(sched)) is not None:
        sizes.append([(r.rid, len(s.token_ids), s.sample) for r, s in zip(step.reqs, step.slices)])
    assert sizes[0] == [("long", 16, False)]
    assert sizes[1] == [("long", 16, False)]
    assert sizes[2] == [("long", 16, False)]
    assert sizes[3] == [("long", 2, True), ("short", 3, True)]


def test_prefill_budget_without_chunking_admits_what_fits_and_a_lone_long_prompt():
    sched = make(max_prefill_tokens=40)
    sched.handle(gen("a", list(range(1, 31)), 1))
    sched.handle(gen("b", list(range(31, 61)), 1))
    sched.handle(gen("huge", list(range(61, 121)), 1))
    first = run_step(sched)
    assert [r.rid for r in first.reqs] == ["a"]
    assert [r.rid for r in run_step(sched).reqs] == ["b"]
    assert [r.rid for r in run_step(sched).reqs] == ["huge"]


def test_admission_waits_for_memory_instead_of_failing():
    sched = make(pages=6, page_size=4, disable_radix_cache=True)  # 24 tokens of KV
    sched.handle(gen("a", [1] * 10, 6))  # needs 4 pages
    sched.handle(gen("b", [2] * 10, 6))  # needs 4 more: must wait for a
    step = run_step(sched)
    assert [r.rid for r in step.reqs] == ["a"] and [r.rid for r in sched.waiting] == ["b"]
    outs = run_all(sched)
    assert {o["rid"] for o in outs if o["finished"] and not o["error"]} == {"a", "b"}
    assert sched.pool.free_pages == 6


def test_finished_prefixes_are_reused_and_evicted_when_memory_is_needed():
    sched = make(pages=8, page_size=4)
    prompt = list(range(1, 14))  # 13 tokens: 3 full pages can be shared
    sched.handle(gen("a", prompt, 2))
    run_all(sched)
    assert sched.cache.cached_pages >= 3
    sched.handle(gen("b", prompt, 2))
    step = run_step(sched)
    assert step.reqs[0].prefix_len == 12 and len(step.slices[0].token_ids) == 1
    run_all(sched)
    sched.handle(gen("c", [99] * 28, 4))  # 8 pages: everything cached must go
    run_all(sched)
    assert sched.cache.cached_pages <= 8 and sched.pool.free_pages + sched.cache.cached_pages == 8


def test_aborting_a_waiting_request_drops_it_silently():
    sched = make(max_running_requests=1)
    sched.handle(gen("a", [1, 2], 3))
    sched.handle(gen("b", [1, 2], 3))
    run_step(sched)
    sched.handle({"type": "abort", "rid": "b"})
    assert {o["rid"] for o in run_all(sched)} == {"a"}


def test_context_length_ends_generation_with_length():
    sched = make(context_length=8)
    sched.handle(gen("a", [1, 2, 3], 5))
    out = run_all(sched)[-1]
    assert out["finish_reason"]["type"] == "length" and len(out["ids"]) == 5
    sched.handle(gen("b", [1, 2, 3, 4], 5))
    assert "exceeds the context length of 8" in sched.take_outputs()[0]["error"]


def test_flush_cache_frees_every_cached_prefix_and_the_next_request_recomputes():
    sched = make(pages=8, page_size=4)
    prompt = list(range(1, 14))
    sched.handle(gen("a", prompt, 2))
    run_all(sched)
    assert sched.cache.cached_pages >= 3
    sched.handle({"type": "flush_cache"})
    assert sched.cache.cached_pages == 0 and sched.pool.free_pages == 8
    sched.handle(gen("b", prompt, 2))
    assert run_step(sched).reqs[0].prefix_len == 0


def test_stats_count_running_and_queued_requests_and_the_kv_they_hold():
    sched = make(pages=8, page_size=4, max_running_requests=1)
    sched.handle(gen("a", [1, 2, 3, 4, 5], 3))
    sched.handle(gen("b", [6, 7], 3))
    assert sched.stats()["queued"] == 2 and sched.stats()["kv_request_tokens"] == 0
    run_step(sched)
    stats = sched.stats()
    assert (stats["running"], stats["queued"]) == (1, 1)
    assert stats["kv_request_tokens"] >= 5 + 3, "the prompt plus max_new_tokens is reserved"
    assert stats["kv_capacity_tokens"] == 32
    run_all(sched)
    stats = sched.stats()
    assert (stats["running"], stats["queued"], stats["kv_request_tokens"]) == (0, 0, 0)
    assert stats["kv_cached_tokens"] > 0, "finished prompts stay in the prefix cache"


def test_mixed_steps_decode_every_running_request_while_new_prompts_take_the_chunk_budget():
    """enable_mixed_chunk: a queue of prompts is cut into the chunk budget step by step, each
    step also decoding every running request; so first tokens arrive a chunk at a time, not all
    at the end of one long prefill, and no running request skips a step."""
    sched = make(pages=256, chunked_prefill_size=32, max_running_requests=64, mixed_chunk=True)
    for i in range(12):
        sched.handle(gen(f"r{i}", [1 + i] * 10, 20))
    first_token_step, steps = {}, 0
    while (step := sched.next_step()) is not None:
        steps += 1
        running = {r.rid for r in sched.running}
        in_step = {r.rid for r in step.reqs}
        assert running <= in_step, "every running request decodes in every step"
        prompt_tokens = sum(len(s.token_ids) for r, s in zip(step.reqs, step.slices) if r.rid not in running)
        assert prompt_tokens <= 32 - min(len(running), 16), "prompts get the budget the decodes leave"
        for r, s in zip(step.reqs, step.slices):
            if s.sample and r.rid not in first_token_step:
                first_token_step[r.rid] = steps
        sched.process(step, [65] * sum(s.sample for s in step.slices))
    assert len(first_token_step) == 12 and len(set(first_token_step.values())) >= 3, \
        "first tokens are spread over steps"
    assert not sched.has_work()


def test_a_mixed_step_keeps_running_requests_decoding_while_a_long_prompt_is_chunked():
    sched = make(pages=256, chunked_prefill_size=16, mixed_chunk=True)
    sched.handle(gen("early", [1, 2, 3], 10))
    run_step(sched)  # early is prefilled and running
    sched.handle(gen("long", list(range(1, 61)), 2))
    kinds = []
    for _ in range(4):
        step = run_step(sched)
        kinds.append({r.rid: len(s.token_ids) for r, s in zip(step.reqs, step.slices)})
    assert all(k["early"] == 1 for k in kinds), "the running request decodes every step"
    assert [k.get("long") for k in kinds] == [15, 15, 15, 15], "the prompt takes what the decode leaves"


def test_without_mixing_a_prefill_step_pauses_decoding():
    sched = make(pages=256, chunked_prefill_size=16)
    sched.handle(gen("early", [1, 2, 3], 10))
    run_step(sched)
    sched.handle(gen("long", list(range(1, 61)), 2))
    assert [r.rid for r in run_step(sched).reqs] == ["long"]


def test_a_constrained_request_follows_its_grammar_and_ends_when_it_is_complete():
    from accord.engine.llm.grammar import GrammarBackend

    pool = KVPool(num_pages=64, page_size=4, num_layers=1, num_kv_heads=1, head_dim=2,
                  dtype=torch.float32, device=torch.device("cpu"))
    tokenizer = ByteTokenizer(258, 256, (EOS,))
    limits = dict(page_size=4, context_length=256, max_running_requests=8, max_prefill_tokens=1024,
                  chunked_prefill_size=None, max_queued_requests=None, schedule_policy="fcfs",
                  disable_radix_cache=False, random_seed=0, stream_interval=1)
    sched = Scheduler(SchedulerLimits(**limits), pool, tokenizer,
                      GrammarBackend("xgrammar", tokenizer, 258, [EOS], True))
    sched.handle(gen("yes", [1, 2], 50, regex="yes|no", ignore_eos=True))
    sched.handle(gen("bad", [1, 2], 5, regex="(("))
    script = iter([*b"yes", EOS])  # the grammar accepts its end: that ends the request even with ignore_eos
    outs = {o["rid"]: o for o in run_all(sched, lambda r: next(script) if r.rid == "yes" else 65)}
    assert outs["bad"]["error_code"] == 400 and "regex" in outs["bad"]["error"]
    assert outs["yes"]["finish_reason"]["type"] == "stop"


def test_a_constraint_without_a_grammar_backend_is_refused():
    sched = make()
    sched.handle(gen("c", [1, 2], 5, json_schema='{"type": "object"}'))
    out = sched.take_outputs()[0]
    assert out["error_code"] == 400 and "--grammar-backend" in out["error"]
