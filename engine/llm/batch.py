"""One forward step's inputs, built from the scheduler's choice of sequences.

Every step is an "extend": each sequence brings `extend_len` new tokens after `prefix_len` tokens
whose K/V are already cached. A decode step is the special case where every sequence brings one
token; it gets its own mode so backends can take a batched fast path (and CUDA graphs can replay).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch



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
    """The step's tensors, built on the host and moved to ``device`` in one copy.

    Every index tensor is a slice of one int64 buffer: on a GPU a step then pays one host-to-device
    copy instead of one per tensor, and the new tokens' cache slots are computed here (the host
    knows every page) instead of by a chain of small index kernels.
    """
    ids, positions, slots, lens, totals, sample_rows = [], [], [], [], [], []
    for s in seqs:
        lens.append(len(s.token_ids))
        totals.append(s.prefix_len + len(s.token_ids))
        ids.extend(s.token_ids)
        for position in range(s.prefix_len, s.prefix_len + len(s.token_ids)):
            positions.append(position)
            # Where the token's K/V goes: the cache row its position maps to through its pages.
            slots.append(s.pages[position // page_size] * page_size + position % page_size)
        if s.all_logits:
            sample_rows.extend(range(len(ids) - len(s.token_ids), len(ids)))
        elif s.sample:
            sample_rows.append(len(ids) - 1)
    # Only the pages holding cached tokens; rows are padded with the scratch page.
    used = [list(s.pages[:-(-total // page_size)]) for s, total in zip(seqs, totals)]
    max_pages = max((len(p) for p in used), default=1) or 1
    table = [page for p in used for page in p + [scratch_page] * (max_pages - len(p))]

    parts = (ids, positions, slots, table, lens, totals, sample_rows)
    flat = torch.tensor([value for part in parts for value in part], dtype=torch.int64).to(device)
    views, start = [], 0
    for part in parts:
        views.append(flat[start:start + len(part)])
        start += len(part)
    input_ids, position_tensor, out_slots, block_table, lens_tensor, seq_lens, sample_index = views
    mode = "decode" if seqs and all(n == 1 for n in lens) else "extend"
    return ForwardBatch(mode=mode, input_ids=input_ids, positions=position_tensor, out_slots=out_slots,
                        extend_lens_tensor=lens_tensor, block_table=block_table.view(len(seqs), max_pages),
                        seq_lens=seq_lens, extend_lens=lens, sample_index=sample_index, kv_lens=totals)
