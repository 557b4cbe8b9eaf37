"""Breakable CUDA graphs: a transformer forward captured as graph segments between attention breaks.

A CUDA graph replays a fixed sequence of kernels on fixed buffers, which removes the per-kernel
launch cost that dominates a small DiT step. Self-attention is where sequence-parallel ranks
exchange keys and values, so the forward is "broken" there: each run of stages between two breaks
is captured as its own graph, and the attention stages run eagerly in between. One
`CapturedForward` exists per latent shape (resolution x text bucket) of the warmup plan; a shape
outside the plan has no graph and runs eagerly. Needs a CUDA device; CPU runs never build one.
"""

from __future__ import annotations

import torch

from accord.engine.diffusion.model import Stage, State


def run_stages(stages: list[Stage], state: State) -> State:
    for stage in stages:
        state = stage.run(state)
    return state


def split_at_breaks(stages: list[Stage]) -> list[list[Stage]]:
    """Consecutive capturable stages grouped together; every breaking stage alone in its group."""
    groups: list[list[Stage]] = []
    for stage in stages:
        if stage.breaks or not groups or groups[-1][0].breaks:
            groups.append([stage])
        else:
            groups[-1].append(stage)
    return groups


class _GraphSegment:
    """Stages captured once on static input buffers; a call copies inputs in and replays."""

    def __init__(self, stages: list[Stage], example: State):
        self.inputs = {key: value.clone() for key, value in example.items()}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # a first eager run, so lazy initialisation is not captured
            run_stages(stages, self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = run_stages(stages, self.inputs)

    def __call__(self, state: State) -> State:
        for key, buffer in self.inputs.items():
            buffer.copy_(state[key])
        self.graph.replay()
        return dict(self.outputs)


class CapturedForward:
    """The whole forward for one input shape: graph segments and eager breaks, in order."""

    def __init__(self, stages: list[Stage], example: State):
        self.parts: list = []
        state = example
        for group in split_at_breaks(stages):
            if group[0].breaks:
                part = group[0].run
            else:
                part = _GraphSegment(group, state)
            self.parts.append(part)
            state = part(state) if group[0].breaks else part.outputs
        torch.cuda.synchronize()

    def __call__(self, state: State) -> State:
        for part in self.parts:
            state = part(state)
        return state
