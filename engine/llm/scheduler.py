"""The scheduling policy: which sequences run in the next forward step, and what their results mean.

Pure bookkeeping over the KV pool and the radix cache, no sockets and no model, so every rank of a
group runs it identically (they see the same requests in the same order) and tests can drive it
in-process. Policy, as resolved:
- with enable_mixed_chunk (the engine profile's default), every step decodes every running request
  and adds as much new prompt as the prefill token budget (the chunk) has room for, so a queue of
  new prompts neither stalls the running requests nor waits for one huge prefill to give every
  first token at once; the running decodes count against the budget, at most half of it;
- without it, a prefill step whenever waiting requests fit, else a decode step over every running
  request;
- at most max_running_requests running; a prefill step takes at most max_prefill_tokens new tokens,
  and with chunked_prefill_size a long prompt is cut into chunks of at most that many tokens
  (continued first in the next prefill step);
- schedule_policy fcfs takes requests in arrival order, lpm the longest cached prefix first
  (falling back to fcfs above LPM_MAX_WAITING waiting requests, as upstream does);
- a request reserves KV pages for its prompt plus max_new_tokens when admitted, so a running
  request never has to be preempted; cached prefix pages are shared, not reserved again;
- a request that asks for its prompt's log-probabilities does not reuse a cached prefix (those
  tokens would not pass through the model, so their logits would not exist).
A request with an output constraint (json_schema, regex, ebnf) gets a grammar matcher from the
resolved --grammar-backend when it arrives (one that does not compile is a 400); every rank's
matcher follows the sampled tokens, and the request ends once the grammar is complete.
Until a request has min_new_tokens tokens, neither EOS, its stop token ids nor its stop strings
end it (the sampler masks the tokens; stop strings are simply not checked yet).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from accord.engine.llm.batch import SeqSlice
from accord.engine.llm.kv_cache import KVPool
from accord.engine.llm.radix_cache import Node, RadixCache
from accord.engine.llm.sampling import request_generator
from accord.engine.llm.sampling_params import SamplingParams
from accord.engine.llm.tokenizer import ByteTokenizer

LPM_MAX_WAITING = 128


@dataclasses.dataclass(frozen=True)
class SchedulerLimits:
    page_size: int
    context_length: int
    max_running_requests: int
    max_prefill_tokens: int
    chunked_prefill_size: int | None
    max_queued_requests: int | None
    schedule_policy: str
    disable_radix_cache: bool
    random_seed: int
    stream_interval: int
    mixed_chunk: bool = False


@dataclasses.dataclass(eq=False)
class Req:
    rid: str
    input_ids: list[int]
    params: SamplingParams
    stream: bool
    arrival: int
    generator: torch.Generator
    output_ids: list[int] = dataclasses.field(default_factory=list)
    pages: list[int] = dataclasses.field(default_factory=list)
    prefix_len: int = 0          # prompt tokens whose KV came from the cache
    computed: int = 0            # tokens whose KV is in the pool (prefix included)
    node: Node | None = None     # locked radix node of the cached prefix
    finish_reason: dict | None = None
    sent: int = 0                # output ids already reported
    top_logprobs: int | None = None    # log-probabilities wanted, with this many alternatives
    logprob_start: int | None = None   # prompt log-probabilities wanted from this position
    output_logprobs: list = dataclasses.field(default_factory=list)  # one entry per output id
    input_logprobs: list = dataclasses.field(default_factory=list)   # from logprob_start on
    sent_input: int = 0                # input_logprobs entries already reported
    grammar: Any = None                # the output constraint's matcher (engine/llm/grammar.py)

    @property
    def wants_input_logprobs(self) -> bool:
        return self.logprob_start is not None and self.logprob_start < len(self.input_ids)

    @property
    def prefilled(self) -> bool:
        return self.computed >= len(self.input_ids)

    def next_slice(self, max_tokens: int | None = None) -> SeqSlice:
        """The tokens this request feeds the next step: (part of) the prompt, or its last output."""
        if not self.prefilled:
            end = len(self.input_ids) if max_tokens is None else min(len(self.input_ids), self.computed + max_tokens)
            return SeqSlice(self.input_ids[self.computed:end], self.computed, self.pages,
                            sample=end == len(self.input_ids), all_logits=self.wants_input_logprobs)
        return SeqSlice([self.output_ids[-1]], self.computed, self.pages, sample=True)


@dataclasses.dataclass
class Step:
    """The scheduler's decision: requests and what each feeds the model this step."""

    reqs: list[Req]
    slices: list[SeqSlice]
    kind: str  # "prefill" or "decode"


class Scheduler:
    def __init__(self, limits: SchedulerLimits, pool: KVPool, tokenizer: ByteTokenizer, grammar=None):
        self.limits = limits
        self.grammar = grammar  # a GrammarBackend, or None under --grammar-backend none
        self.pool = pool
        self.tokenizer = tokenizer
        self.cache = None if limits.disable_radix_cache else RadixCache(limits.page_size, pool.release)
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.chunked: Req | None = None  # admitted, prompt partly prefilled
        self._arrivals = 0
        self._outputs: list[dict[str, Any]] = []

    # -- requests in -------------------------------------------------------------------------------

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.chunked)

    def handle(self, message: dict[str, Any]) -> None:
        if message["type"] == "generate":
            self._add(message)
        elif message["type"] == "abort":
            self._abort(message["rid"])
        elif message["type"] == "flush_cache":
            self.flush_cache()

    def flush_cache(self) -> None:
        """Drop every cached prefix no running request holds (locked ones stay until released)."""
        if self.cache is not None:
            self.cache.evict(self.pool.num_pages)

    def _add(self, message: dict[str, Any]) -> None:
        rid, input_ids = message["rid"], list(message["input_ids"])
        params = SamplingParams.from_request(message.get("sampling") or {})
        arrival = self._arrivals
        self._arrivals += 1
        needed = len(input_ids) + params.max_new_tokens
        problem = None
        if not input_ids:
            problem = "the prompt is empty"
        elif needed > self.limits.context_length:
            problem = (f"the prompt ({len(input_ids)} tokens) plus max_new_tokens "
                       f"({params.max_new_tokens}) exceeds the context length of "
                       f"{self.limits.context_length} tokens")
        elif self._pages_for(needed) > self.pool.num_pages:
            problem = (f"the prompt plus max_new_tokens ({needed} tokens) is more than the whole KV "
                       f"cache holds ({self.pool.capacity_tokens} tokens)")
        elif self.limits.max_queued_requests is not None and len(self.waiting) >= self.limits.max_queued_requests:
            self._error(rid, f"the queue is full ({self.limits.max_queued_requests} waiting requests, "
                             "--max-queued-requests); retry later", 503, len(input_ids))
            return
        matcher = None
        if problem is None and params.constraint is not None:
            kind, text = params.constraint
            if self.grammar is None:
                problem = (f"{kind} needs constrained decoding, which is off (--grammar-backend none); "
                           "start the server with --grammar-backend xgrammar or llguidance")
            else:
                try:
                    matcher = self.grammar.matcher(kind, text)
                except ValueError as err:
                    problem = str(err)
        if problem:
            self._error(rid, problem, 400, len(input_ids))
            return
        req = Req(rid, input_ids, params, bool(message.get("stream")), arrival,
                  request_generator(self.limits.random_seed, arrival, params.seed))
        wanted = message.get("logprobs")
        if wanted is not None:
            req.top_logprobs = int(wanted.get("top") or 0)
            start = wanted.get("start")
            req.logprob_start = None if start is None else max(0, int(start))
            if req.logprob_start == 0:  # the first prompt token follows nothing: no logprob
                req.input_logprobs.append([None, input_ids[0], []])
        req.grammar = matcher
        self.waiting.append(req)

    def _abort(self, rid: str) -> None:
        for req in self.waiting:
            if req.rid == rid:
                self.waiting.remove(req)
                return
        for req in [*self.running, *([self.chunked] if self.chunked else [])]:
            if req.rid == rid:
                req.finish_reason = {"type": "abort"}
                self._release(req)
                self.running = [r for r in self.running if r is not req]
                if self.chunked is req:
                    self.chunked = None
                return

    def _error(self, rid: str, message: str, code: int, prompt_tokens: int) -> None:
        self._outputs.append({"rid": rid, "ids": [], "finished": True,
                              "finish_reason": {"type": "abort"}, "prompt_tokens": prompt_tokens,
                              "completion_tokens": 0, "cached_tokens": 0, "error": message,
                              "error_code": code})

    # -- choosing a step ---------------------------------------------------------------------------

    def next_step(self) -> Step | None:
        decoding = list(self.running)
        if self.limits.mixed_chunk and decoding:
            step = self._prefill_step(reserved=len(decoding))
            slices = [r.next_slice() for r in decoding]
            if step is None:
                return Step(decoding, slices, "decode")
            return Step(decoding + step.reqs, slices + step.slices, "mixed")
        step = self._prefill_step()
        if step is not None:
            return step
        if decoding:
            return Step(decoding, [r.next_slice() for r in decoding], "decode")
        return None

    def _pages_for(self, tokens: int) -> int:
        return -(-tokens // self.limits.page_size)

    def _ordered_waiting(self) -> list[Req]:
        if self.limits.schedule_policy == "lpm" and self.cache is not None and len(self.waiting) <= LPM_MAX_WAITING:
            matched = {id(r): len(self.cache.match_prefix(r.input_ids[:-1])[0]) for r in self.waiting}
            return sorted(self.waiting, key=lambda r: (-matched[id(r)], r.arrival))
        return list(self.waiting)

    def _prefill_step(self, reserved: int = 0) -> Step | None:
        """New prompt tokens for the next step; `reserved` tokens of the budget are the running
        decodes of a mixed step (counted up to half the budget, so prompts always get room)."""
        limits = self.limits
        budget = limits.max_prefill_tokens
        chunk = limits.chunked_prefill_size
        cap = budget if chunk is None else min(budget, chunk)
        reqs, slices, used = [], [], min(reserved, cap // 2)
        candidates = ([self.chunked] if self.chunked else []) + self._ordered_waiting()
        for req in candidates:
            if req is not self.chunked:
                if len(self.running) + len(reqs) >= limits.max_running_requests:
                    break
                if not self._admit(req):
                    break  # not enough KV memory now; keep arrival order, retry next step
                self.waiting.remove(req)
            remaining = len(req.input_ids) - req.computed
            room = cap - used
            if remaining > room and chunk is None and (reqs or reserved):
                self._unadmit(req)
                break
            take = remaining if chunk is None else min(remaining, room)
            reqs.append(req)
            slices.append(req.next_slice(take))
            used += take
            self.chunked = None if take == remaining else req
            if used >= cap:
                break
        return Step(reqs, slices, "prefill") if reqs else None

    def _admit(self, req: Req) -> bool:
        """Give `req` its KV pages: the cached prefix (shared) plus new ones for the rest."""
        cached = self.cache is not None and not req.wants_input_logprobs
        pages, node = self.cache.match_prefix(req.input_ids[:-1]) if cached else ([], None)
        if node is not None:
            self.cache.lock(node)
        need = self._pages_for(len(req.input_ids) + req.params.max_new_tokens) - len(pages)
        if self.pool.free_pages < need and self.cache is not None:
            self.cache.evict(need - self.pool.free_pages)
        new = self.pool.alloc(need)
        if new is None:
            if node is not None:
                self.cache.unlock(node)
            return False
        req.pages, req.node = pages + new, node
        req.prefix_len = req.computed = len(pages) * self.limits.page_size
        return True

    def _unadmit(self, req: Req) -> None:
        """Undo `_admit` for a request that did not fit this step after all."""
        cached = req.prefix_len // self.limits.page_size
        self.pool.release(req.pages[cached:])
        if req.node is not None:
            self.cache.unlock(req.node)
        req.pages, req.node, req.prefix_len, req.computed = [], None, 0, 0
        self.waiting.append(req)
        self.waiting.sort(key=lambda r: r.arrival)

    # -- results in --------------------------------------------------------------------------------

    def process(self, step: Step, sampled: Sequence[int], logprobs: Sequence[dict | None] | None = None) -> None:
        """Apply one step's sampled tokens (one per slice with sample=True) and the log-probability
        entries of the requests that asked (per slice: {"input": [...], "output": entry})."""
        tokens = iter(sampled)
        for index, (req, piece) in enumerate(zip(step.reqs, step.slices)):
            req.computed += len(piece.token_ids)
            found = logprobs[index] if logprobs else None
            if found:
                req.input_logprobs.extend(found.get("input", ()))
            if piece.sample:
                req.output_ids.append(int(next(tokens)))
                if req.grammar is not None:
                    req.grammar.accept(req.output_ids[-1])
                if found and found.get("output") is not None:
                    req.output_logprobs.append([found["output"][0], req.output_ids[-1], found["output"][2]])
                req.finish_reason = self._finish_reason(req)
            if req.finish_reason is not None:
                self._release(req)
                self.running = [r for r in self.running if r is not req]
            elif req.prefilled and req not in self.running:
                self.running.append(req)
            self._report(req)

    def stop_ids(self, req: Req) -> tuple[int, ...]:
        """The tokens min_new_tokens keeps out (EOS and stop token ids, as upstream masks them)."""
        return tuple(self.tokenizer.eos_token_ids) + tuple(req.params.stop_token_ids)

    def _finish_reason(self, req: Req) -> dict | None:
        token, p = req.output_ids[-1], req.params
        if len(req.output_ids) < p.min_new_tokens:
            return None
        if not p.ignore_eos and token in self.tokenizer.eos_token_ids:
            return {"type": "stop", "matched": token}
        if token in p.stop_token_ids:
            return {"type": "stop", "matched": token}
        if req.grammar is not None and req.grammar.finished:
            return {"type": "stop", "matched": token}
        if p.stop:
            tail = self.tokenizer.decode(req.output_ids[-64:])
            for s in p.stop:
                if s in tail:
                    return {"type": "stop", "matched": s}
        if len(req.output_ids) >= p.max_new_tokens:
            return {"type": "length", "length": p.max_new_tokens}
        if len(req.input_ids) + len(req.output_ids) >= self.limits.context_length:
            return {"type": "length", "length": len(req.output_ids)}
        return None

    def _release(self, req: Req) -> None:
        """Return a finished request's pages: full pages of its KV go to the cache, the rest free."""
        page_size = self.limits.page_size
        if self.cache is None:
            self.pool.release(req.pages)
        else:
            kv_tokens = (req.input_ids + req.output_ids)[:req.computed]
            full_pages = len(kv_tokens) // page_size
            cached = self.cache.insert(kv_tokens[:full_pages * page_size], req.pages[:full_pages])
            own_start = req.prefix_len // page_size
            self.pool.release(req.pages[own_start:max(own_start, cached // page_size)])
            self.pool.release(req.pages[full_pages:])
            if req.node is not None:
                self.cache.unlock(req.node)
        req.pages, req.node = [], None

    def _report(self, req: Req) -> None:
        """Queue an output: streams every stream_interval tokens and at the end, others at the end."""
        finished = req.finish_reason is not None
        pending = len(req.output_ids) - req.sent
        due = finished or (req.stream and pending >= self.limits.stream_interval)
        if not due:
            return
        first = req.sent if req.stream else 0
        ids = req.output_ids[first:]
        logprobs = None
        if req.top_logprobs is not None:
            first_input = req.sent_input if req.stream else 0
            logprobs = {"output": req.output_logprobs[first:], "input": req.input_logprobs[first_input:]}
            req.sent_input = len(req.input_logprobs)
        req.sent = len(req.output_ids)
        self._outputs.append({"rid": req.rid, "ids": ids, "finished": finished,
                              "finish_reason": req.finish_reason, "prompt_tokens": len(req.input_ids),
                              "completion_tokens": len(req.output_ids), "cached_tokens": req.prefix_len,
                              "stop": list(req.params.stop), "error": None, "error_code": None,
                              "logprobs": logprobs})

    def stats(self) -> dict[str, int]:
        """Load figures for /metrics: requests running and waiting, KV pool pages in tokens
        (held by requests, held by the prefix cache, capacity)."""
        page = self.limits.page_size
        used = self.pool.num_pages - self.pool.free_pages
        cached = self.cache.cached_pages if self.cache is not None else 0
        return {"running": len(self.running) + int(self.chunked is not None), "queued": len(self.waiting),
                "kv_request_tokens": max(0, used - cached) * page, "kv_cached_tokens": cached * page,
                "kv_capacity_tokens": self.pool.capacity_tokens}

    def take_outputs(self) -> list[dict[str, Any]]:
        outputs, self._outputs = self._outputs, []
        return outputs
