"""The sampler: logit processing (penalties, logit_bias, min_new_tokens), then greedy, temperature,
top-k, top-p, one token per sampling sequence; and the log-probabilities requests ask for.

Each request samples from its own torch.Generator, seeded from the resolved random_seed and the
request's arrival number (or the request's own "seed"), so a request's tokens do not depend on
which other requests happen to share its batch.

Logit processing follows upstream SGLang's order and scope: frequency and presence penalties
(subtracted, counted over the output so far), min_new_tokens (EOS and stop token ids masked out
until that many tokens exist), repetition penalty (positive logits divided, negative multiplied,
for tokens already in the output), then logit_bias added. Log-probabilities are taken, as upstream
does, from the processed logits divided by the temperature (not divided when sampling greedily),
before top-k/top-p truncation.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from accord.engine.llm.sampling_params import SamplingParams

# A masked-out token's log-probability, as a finite number JSON can carry.
LOGPROB_FLOOR = torch.finfo(torch.float32).min


def request_generator(random_seed: int, arrival: int, seed: int | None) -> torch.Generator:
    value = seed if seed is not None else random_seed * 1_000_003 + arrival
    return torch.Generator().manual_seed(value % (2**63))


@dataclasses.dataclass
class Row:
    """What the sampler needs about one sampling sequence."""

    params: SamplingParams
    generator: torch.Generator
    output_ids: Sequence[int] = ()      # tokens generated so far (the penalties count these)
    stop_ids: Sequence[int] = ()        # EOS and stop token ids (masked until min_new_tokens)
    grammar: Any = None                 # the request's grammar matcher: masks what it forbids


def process_logits(logits: torch.Tensor, row: Row) -> torch.Tensor:
    """One row of fp32 logits [V] after the request's penalties, min_new_tokens and logit_bias."""
    p = row.params
    if p.penalized:
        logits = _penalized(logits.clone(), row)
    if row.grammar is not None:
        logits = row.grammar.allowed(logits)
    return logits


def _penalized(logits: torch.Tensor, row: Row) -> torch.Tensor:
    p = row.params
    vocab = logits.shape[0]
    if row.output_ids and (p.frequency_penalty or p.presence_penalty or p.repetition_penalty != 1.0):
        counts = torch.bincount(torch.tensor(list(row.output_ids), dtype=torch.int64), minlength=vocab)[:vocab]
        seen = counts > 0
        logits -= p.frequency_penalty * counts.to(logits.dtype) + p.presence_penalty * seen.to(logits.dtype)
        if p.repetition_penalty != 1.0:
            scaled = torch.where(logits < 0, logits * p.repetition_penalty, logits / p.repetition_penalty)
            logits = torch.where(seen, scaled, logits)
    if len(row.output_ids) < p.min_new_tokens:
        banned = [t for t in row.stop_ids if 0 <= t < vocab]
        logits[banned] = float("-inf")
    if p.logit_bias:
        for token, bias in p.logit_bias.items():
            if int(token) < vocab:
                logits[int(token)] += bias
    return logits


def sample(logits: torch.Tensor, rows: Sequence[Row]) -> torch.Tensor:
    """One token id per row of (processed) fp32 logits [S, V], as a CPU tensor.

    Greedy rows take their argmax where the logits are; only the ids, and the logits of rows that
    really sample (their generators live on the CPU), cross to the host: on a GPU a decode step
    otherwise copies S x vocab floats (33 MB at 64 sequences of a 128K vocabulary) every step.
    """
    out = logits.argmax(dim=-1).cpu()
    drawn = [index for index, row in enumerate(rows) if not row.params.greedy]
    host = logits[drawn].cpu() if drawn else None
    for k, index in enumerate(drawn):
        p = rows[index].params
        scores = host[k] / p.temperature
        if p.top_k > 0 and p.top_k < scores.shape[0]:
            threshold = scores.topk(p.top_k).values[-1]
            scores = scores.masked_fill(scores < threshold, float("-inf"))
        probs = scores.softmax(dim=-1)
        if p.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            drop = sorted_probs.cumsum(0) - sorted_probs > p.top_p
            sorted_probs = sorted_probs.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
        out[index] = torch.multinomial(probs, 1, generator=rows[index].generator)[0]
    return out


def logprobs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Log-probabilities [..., V] of (processed) logits as the request samples them."""
    scaled = logits.float() if params.greedy else logits.float() / params.temperature
    return torch.log_softmax(scaled, dim=-1).clamp(min=LOGPROB_FLOOR)


def logprob_entry(row_logprobs: torch.Tensor, token: int, top: int) -> list[float]:
    """[logprob of `token`, then `top` (logprob, token id) pairs, best first], flat, as floats."""
    values, ids = row_logprobs.topk(top) if top else (row_logprobs[:0], row_logprobs[:0])
    pairs = torch.stack([values, ids.to(values.dtype)], dim=1).flatten() if top else values
    return [float(row_logprobs[token]), *pairs.tolist()]


def entry_size(top: int) -> int:
    """Floats in one logprob_entry."""
    return 1 + 2 * top
