"""The sampler: greedy, temperature, top-k, top-p, one token per sampling sequence.

Each request samples from its own torch.Generator, seeded from the resolved random_seed and the
request's arrival number (or the request's own "seed"), so a request's tokens do not depend on
which other requests happen to share its batch.
"""

from __future__ import annotations

from typing import Sequence

import torch

from engine.llm.sampling_params import SamplingParams


def request_generator(random_seed: int, arrival: int, seed: int | None) -> torch.Generator:
    value = seed if seed is not None else random_seed * 1_000_003 + arrival
    return torch.Generator().manual_seed(value % (2**63))


def sample(logits: torch.Tensor, params: Sequence[SamplingParams],
           generators: Sequence[torch.Generator]) -> torch.Tensor:
    """One token id per row of fp32 logits [S, V]."""
    logits = logits.cpu()
    out = logits.argmax(dim=-1)
    for row, (p, gen) in enumerate(zip(params, generators)):
        if p.greedy:
            continue
        scores = logits[row] / p.temperature
        if p.top_k > 0 and p.top_k < scores.shape[0]:
            threshold = scores.topk(p.top_k).values[-1]
            scores = scores.masked_fill(scores < threshold, float("-inf"))
        probs = scores.softmax(dim=-1)
        if p.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            drop = sorted_probs.cumsum(0) - sorted_probs > p.top_p
            sorted_probs = sorted_probs.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
        out[row] = torch.multinomial(probs, 1, generator=gen)[0]
    return out
