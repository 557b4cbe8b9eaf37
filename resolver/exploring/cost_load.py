"""Throughput, TPOT and TTFT of a launch under a workload: closed loop, open loop, or a burst.

A busy server interleaves the prefills of arriving requests with the decode steps of the running
ones, so TPOT is a decode step stretched by the share of time spent prefilling what arrives during
it (step / (1 - busy)), and TTFT is the wait for the scheduling round in flight and for the prefill
queue (M/D/1: it grows with load) plus the request's own prefill passes (each riding on a decode step
where the engine mixes prefill chunks into decode steps). A closed loop or a saturated server
settles where the slots turn over as fast as the prefills they bring allow (`settle`). Every function
takes a `Launch` (cost_launch) and its `Rates` (cost_steps).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from accord.resolver.exploring.cost_launch import Launch
from accord.resolver.exploring.cost_steps import Rates, decode_step, prefill_compute, prefill_time

BUSIEST_PREFILL = 0.95      # the prefill queue is never modelled fuller than this


@dataclasses.dataclass
class Served:
    """What a workload gets from a launch (per deployment unless named per rank)."""

    throughput: float         # output tokens/s
    tpot: float               # seconds
    ttft: float | None        # seconds; None: the offered load exceeds what the launch serves
    step: float               # the plain decode step at the running batch
    prefill: float            # one request's prefill alone
    batch: float              # requests running per rank
    parts: dict
    saturated: bool = False


class Server:
    """One launch serving requests of `input_len` prompt and `output_len` generated tokens."""

    def __init__(self, l: Launch, r: Rates, input_len: int, output_len: int,
                 spread: Callable[[float], tuple[float, float]] = lambda n: (1.0, 1.0)):
        self.l, self.r = l, r
        self.L, self.out = input_len, output_len
        self.spread = spread      # how output lengths vary (Workload.spread)
        self.context = input_len + output_len / 2
        self.alone = prefill_time(l, r, input_len, input_len / 2)
        self.passes = max(1, math.ceil(input_len / l.chunk))
        self.per_request = prefill_compute(l, r, input_len, input_len / 2)
        self._steps: dict[float, tuple[float, dict]] = {}

    def token_time(self, batch: float) -> tuple[float, dict]:
        """Seconds per output token of one request with `batch` running per rank, prefills aside;
        with speculative decoding each verify step yields the expected accepted run plus one."""
        if batch in self._steps:
            return self._steps[batch]
        step, parts = decode_step(self.l, self.r, batch, self.context)
        steps = self.l.spec_steps
        if steps:
            spec = self.r.speculative
            a = spec["accept_rate"]
            verify, _ = decode_step(self.l, self.r, batch * (steps + 1), self.context)
            step = (verify + steps * spec["draft_step_fraction"] * step) / ((1 - a ** (steps + 1)) / (1 - a))
        self._steps[batch] = (step, parts)
        return step, parts

    def stall(self, arrivals: float) -> float:
        """Seconds of prefill per decode step when `arrivals` requests arrive per step (on every
        rank a DP-attention step waits for): below one per step each gets a pass of its own; above,
        they share passes of up to a chunk of tokens. A pass reads the weights once, which its
        arithmetic hides unless the pass is short (as `prefill_time` has it)."""
        passes = arrivals * self.passes if arrivals < 1 else math.ceil(arrivals * self.L / self.l.chunk)
        read = self.l.weights_gpu * self.l.pp / (self.r.hbm * self.r.weight_bw)
        return max(arrivals * self.per_request, passes * read) + passes * self.r.pass_s

    def loaded(self, batch: float, rate: float) -> tuple[float, float, dict]:
        """(TPOT, plain step, parts) with `batch` running per rank and `rate` arrivals/s per rank:
        a request's decode steps share the GPU with the prefills of the others' successors (on
        every rank a DP-attention step waits for), which arrive during the whole token interval,
        prefill included: TPOT = step / (1 - the share of time spent prefilling)."""
        step, parts = self.token_time(batch)
        ranks = self.l.dp if self.l.dpa else 1
        arriving = rate * ranks * max(0.0, batch * ranks - 1) / (batch * ranks)
        if arriving <= 0:
            return step, step, parts
        together = arriving * step * self.r.scheduler_steps    # prefilled at once, between scheduling rounds
        busy = min(arriving * self.stall(together) / together, BUSIEST_PREFILL)
        return step / (1 - busy), step, parts

    def first_token(self, batch: float, rate: float, step: float, poisson: bool) -> float:
        """TTFT of a request arriving at `rate` arrivals/s per rank with `batch` running: half a
        scheduling round (one step, or the engine's multi-step run) until the running one ends,
        the prefill queue's wait (M/D/1, when arrivals are random rather than admitted as slots
        free), its own prefill, and, where the engine mixes prefill chunks into decode steps, a
        decode step of the running batch beside each of its passes."""
        busy = min(rate * self.alone, BUSIEST_PREFILL) if poisson else 0.0
        wait = busy * self.alone / (2 * (1 - busy))
        rounds = self.r.scheduler_steps / 2 if batch > 1 else 0.5    # the scheduling round in flight
        riding = self.passes * step if batch > 1 and self.r.mixed_prefill else 0.0
        return rounds * step + wait + self.alone + riding + self.r.first_token_s

    def cycle(self, batch: float, rate: float, poisson: bool = True) -> tuple[float, float, float, dict]:
        """(seconds one request holds a slot, TPOT, TTFT, parts) at this batch and arrival rate."""
        tpot, step, parts = self.loaded(batch, rate)
        ttft = self.first_token(batch, rate, step, poisson)
        return ttft + (self.out - 1) * tpot, tpot, ttft, {**parts, "step": step}


def settle(s: Server, batch: float, poisson: bool) -> tuple[float, float, float, float, dict]:
    """(arrival rate per rank, seconds a request holds a slot, TPOT, TTFT, parts) when `batch` run
    per rank and each finished request is followed by the next (a closed loop, a saturated server):
    the rate at which `batch` slots, each held as long as the prefills at that rate make it, turn
    over (rate x held = batch; held grows with the rate, so bisection finds it)."""
    lo, hi = 0.0, batch / s.cycle(batch, 0.0, poisson)[0]
    for _ in range(40):
        mid = (lo + hi) / 2
        if mid * s.cycle(batch, mid, poisson)[0] > batch:
            hi = mid
        else:
            lo = mid
        if hi - lo < 1e-4 * hi:
            break
    held, tpot, ttft, parts = s.cycle(batch, lo, poisson)
    return batch / held, held, tpot, ttft, parts


def closed_loop(s: Server, users: int) -> Served:
    """`users` users, each sending the next request when its last one ends."""
    per_rank = max(1, math.ceil(users / s.l.dp))
    batch = min(per_rank, s.l.limit)
    rate, held, tpot, ttft, parts = settle(s, batch, True)
    waiting = per_rank - batch
    ttft += waiting / rate if waiting else 0.0
    return Served(s.l.dp * batch * s.out / held, tpot, ttft, parts["step"], s.alone, batch, parts)


def refilled(s: Server, batch: int) -> tuple[float, float, float, dict]:
    """(seconds a request holds a slot, TPOT, time to its first token, parts) when `batch` run per
    rank and each slot is refilled from a waiting queue as soon as it frees (a saturated server, a
    burst): an admitted prefill waits for no other."""
    return settle(s, batch, False)[1:]


def open_loop(s: Server, request_rate: float) -> Served:
    """Poisson arrivals at `request_rate` requests/s; Little's law gives the running batch."""
    rate = request_rate / s.l.dp
    batch = 1.0
    for _ in range(60):
        held, tpot, ttft, parts = s.cycle(batch, rate)
        wanted = max(1.0, rate * held)
        if wanted > s.l.limit:   # saturated: the queue waits outside, and grows without end
            held, tpot, _, parts = refilled(s, s.l.limit)
            served = s.l.dp * s.l.limit * s.out / held
            return Served(served, tpot, None, parts["step"], s.alone, s.l.limit, parts, saturated=True)
        if abs(wanted - batch) < 1e-3:
            break
        batch = wanted
    return Served(request_rate * s.out, tpot, ttft, parts["step"], s.alone, batch, parts)


def burst(s: Server, requests: int) -> Served:
    """All `requests` sent at t=0; throughput averaged over the drain. The first batch is prefilled
    together (its decode steps wait for the rest of that ramp); then as each request ends the next
    one's prefill joins the running batch (steady state) until the queue is empty and the last
    batch decodes out."""
    n = requests / s.l.dp
    batch = max(1, min(int(n), s.l.limit))
    ramp = prefill_time(s.l, s.r, batch * s.L, s.L / 2)
    step, _ = s.token_time(batch)
    held, tpot, service, parts = refilled(s, batch)
    rate = batch / held
    steady = max(0.0, n - batch) / rate
    # The last batch decodes out until its longest request ends; a step costs about a fixed part
    # plus a part per running request, and the batch thins as requests end, so the tail is the
    # steps of the mean request at the full batch plus the longest one's extra steps run nearly alone.
    tail = s.out * (step + (s.spread(batch)[1] - 1.0) * s.token_time(1)[0])
    total = max(ramp + steady + tail, n / rate)   # never faster than the saturated server it drains through
    first = ramp / 2 + s.r.first_token_s
    ttft = (batch * first + max(0.0, n - batch) * (ramp + steady / 2 + service)) / n
    # a request of the first batch gets its first token somewhere in the ramp (half-way, on
    # average) and then waits for the rest of the ramp's prefills between its tokens
    first_tpot = step + ramp / 2 / max(s.out - 1, 1)
    tpot = (batch * first_tpot + max(0.0, n - batch) * tpot) / n
    return Served(requests * s.out / total, tpot, ttft, parts["step"], s.alone, batch, parts)
