"""Decode steps replayed from CUDA graphs captured at the resolved batch sizes (cuda_graph_bs_decode).

A graph replays fixed tensor addresses and shapes, so each captured size owns static input
buffers. A decode batch of B sequences runs on the smallest captured size >= B: its rows are copied
in, the remaining rows are padding that reads and writes only the scratch page (page 0), and the
first B rows of the logits are returned. The block table is sized for the full context length so
any sequence fits. `StaticDecode` is the padding logic alone, which also runs eagerly (CPU tests
check it against plain decode); `DecodeGraphs` captures and replays it on CUDA.

What capture needs of the model runner is the `DecodeRunner` protocol below, so this module
imports nothing from model_runner.py (which builds a `DecodeGraphs` over itself).
"""

from __future__ import annotations

from typing import Protocol

import torch

from accord.engine.llm.attention import AttentionBackend
from accord.engine.llm.batch import ForwardBatch
from accord.engine.llm.kv_cache import SCRATCH_PAGE, KVPool
from accord.engine.llm.model import LlamaStage, StepContext


class DecodeRunner(Protocol):
    """The parts of a model runner a captured decode step runs on (model_runner.ModelRunner has them)."""

    device: torch.device
    context_length: int
    pool: KVPool
    stage: LlamaStage
    decode_attention: AttentionBackend

    def max_running_requests(self) -> int: ...


class StaticDecode:
    """Fixed buffers for decode batches of up to `size` sequences, and the forward over them."""

    def __init__(self, runner: DecodeRunner, size: int):
        self.runner, self.size = runner, size
        page_size = runner.pool.page_size
        self.max_pages = -(-runner.context_length // page_size)

        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=torch.int64, device=runner.device)

        self.batch = ForwardBatch(
            mode="decode", input_ids=zeros(size), positions=zeros(size),
            out_slots=zeros(size) + SCRATCH_PAGE * page_size,
            block_table=zeros(size, self.max_pages) + SCRATCH_PAGE, seq_lens=zeros(size) + 1,
            extend_lens=[1] * size, extend_lens_tensor=zeros(size) + 1,
            sample_index=torch.arange(size, device=runner.device))

    def load(self, batch: ForwardBatch) -> None:
        """Copy a decode batch into the buffers; padding rows attend to the scratch page only."""
        n, pages = batch.batch_size, batch.block_table.shape[1]
        static = self.batch
        static.input_ids[:n].copy_(batch.input_ids)
        static.positions[:n].copy_(batch.positions)
        static.out_slots[:n].copy_(batch.out_slots)
        static.seq_lens[:n].copy_(batch.seq_lens)
        static.block_table[:n, :pages].copy_(batch.block_table)
        static.block_table[:n, pages:].fill_(SCRATCH_PAGE)
        static.input_ids[n:].zero_()
        static.positions[n:].zero_()
        static.out_slots[n:].fill_(SCRATCH_PAGE * self.runner.pool.page_size)
        static.seq_lens[n:].fill_(1)
        static.block_table[n:].fill_(SCRATCH_PAGE)

    def forward(self) -> torch.Tensor:
        """The decode step over the buffers (what a graph captures); logits for every row, padding too."""
        ctx = StepContext(self.batch, self.runner.pool, self.runner.decode_attention)
        return self.runner.stage.forward(ctx)


class DecodeGraphs:
    """One captured graph per batch size (up to --max-running-requests), replayed for decode batches."""

    def __init__(self, runner: DecodeRunner, batch_sizes: tuple[int, ...]):
        self.batch_sizes = [b for b in batch_sizes if b <= runner.max_running_requests()]
        self._static: dict[int, StaticDecode] = {}
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._logits: dict[int, torch.Tensor] = {}
        pool = None
        for size in sorted(self.batch_sizes, reverse=True):  # largest first, so smaller ones share its pool
            static = StaticDecode(runner, size)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):  # warm up kernels and allocator outside the capture
                    static.forward()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._logits[size] = static.forward()
            pool = graph.pool()
            self._static[size], self._graphs[size] = static, graph
        torch.cuda.synchronize()

    def can_run(self, batch: ForwardBatch) -> bool:
        return bool(self.batch_sizes) and batch.batch_size <= max(self.batch_sizes) and \
            batch.block_table.shape[1] <= next(iter(self._static.values())).max_pages

    def replay(self, batch: ForwardBatch) -> torch.Tensor:
        size = min(b for b in self.batch_sizes if b >= batch.batch_size)
        self._static[size].load(batch)
        self._graphs[size].replay()
        return self._logits[size][: batch.batch_size]
