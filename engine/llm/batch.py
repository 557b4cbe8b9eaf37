"""One forward step's inputs, built from the scheduler's choice of sequences.

Every step is an "extend": each sequence brings `extend_len` new tokens after `prefix_len` tokens
whose K/V are already cached. A decode step is the special case where every sequence brings one
token; it gets its own mode so backends can take a batched fast path (and CUDA graphs can replay).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from accord.kernels.paged_kv import flat_slots


@dataclasses.dataclass
class SeqSlice:
    """What one sequence contributes to a step."""

    token_ids: Sequence[int]   # the new tokens
    prefix_len: int            # tokens already in the cache before them
    pages: Sequence[int]       # the sequence's pages, in token order
    sample: bool               # does this step end with a token to sample?
    all_logits: bool = False   # logits of every new token too (prompt log-probabilities)


@dataclasses.dataclass
class ForwardBatch:
    mode: str                        # "extend" or "decode"
    input_ids: torch.Tensor          # [T] new tokens of all sequences, concatenated
    positions: torch.Tensor          # [T]
    out_slots: torch.Tensor          # [T] flat KV slot of each new token
    block_table: torch.Tensor        # [B, max_pages] page ids, padded with the scratch page
    seq_lens: torch.Tensor           # [B] cached tokens after this step
    extend_lens: list[int]
    extend_lens_tensor: torch.Tensor  # [B], for kernels
    sample_index: torch.Tensor       # [R] rows in [T] whose logits the model returns: the last
                                     # token of each sampling sequence, every token of an
                                     # all_logits one
    kv_lens: list[int] | None = None  # seq_lens on the host (None: only the tensor is known, as in
                                      # a CUDA graph's fixed batch)

    @property
    def batch_size(self) -> int:
        return len(self.extend_lens)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])


def logit_rows(seqs: Sequence[SeqSlice]) -> tuple[list[int], list[int]]:
    """Where each sequence's rows start in the returned logits, and the row each sampling
    sequence samples from (its last)."""
    starts, sampled, row = [], [], 0
    for s in seqs:
        starts.append(row)
        row += len(s.token_ids) if s.all_logits else int(s.sample)
        if s.sample:
            sampled.append(row - 1)
    return starts, sampled


def build_batch(seqs: Sequence[SeqSlice], page_size: int, device: torch.device,
                scratch_page: int = 0) -> ForwardBatch:
    ids, positions, owners, lens, totals, sample_rows = [], [], [], [], [], []
    for index, s in enumerate(seqs):
        lens.append(len(s.token_ids))
        totals.append(s.prefix_len + len(s.token_ids))
        ids.extend(s.token_ids)
        positions.extend(range(s.prefix_len, s.prefix_len + len(s.token_ids)))
        owners.extend([index] * len(s.token_ids))
        if s.all_logits:
            sample_rows.extend(range(len(ids) - len(s.token_ids), len(ids)))
        elif s.sample:
            sample_rows.append(len(ids) - 1)
    # Only the pages holding cached tokens; rows are padded with the scratch page.
    used = [list(s.pages[:-(-total // page_size)]) for s, total in zip(seqs, totals)]
    max_pages = max((len(p) for p in used), default=1) or 1
    table = [p + [scratch_page] * (max_pages - len(p)) for p in used]

    def as_long(values):
        return torch.tensor(values, dtype=torch.int64, device=device)

    mode = "decode" if seqs and all(n == 1 for n in lens) else "extend"
    block_table = as_long(table).reshape(len(seqs), max_pages)
    position_tensor = as_long(positions)
    # Where each new token's K/V goes: the cache row its position maps to through the block table.
    out_slots = flat_slots(block_table, as_long(owners), position_tensor, page_size)
    return ForwardBatch(mode=mode, input_ids=as_long(ids), positions=position_tensor,
                        out_slots=out_slots, extend_lens_tensor=as_long(lens), block_table=block_table,
                        seq_lens=as_long(totals), extend_lens=lens, sample_index=as_long(sample_rows),
                        kv_lens=totals)
