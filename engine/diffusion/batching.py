"""Dynamic batching: merge compatible waiting requests into one batch for an idle replica.

Requests are compatible when they share resolution and step count (the things a denoising loop
cannot vary per image). The oldest waiting request always goes first; it takes up to
`max_size - 1` compatible followers with it, and waits at most `delay_s` for them to arrive
(`batching_max_size`, `batching_delay_ms`). Plain Python, no sockets, so it is tested alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Hashable


@dataclasses.dataclass
class Waiting:
    key: Hashable
    arrived: float
    item: Any


class Batcher:
    def __init__(self, max_size: int, delay_s: float):
        self.max_size = max_size
        self.delay_s = delay_s
        self.queue: list[Waiting] = []

    def __len__(self) -> int:
        return len(self.queue)

    def add(self, key: Hashable, item: Any, now: float) -> None:
        self.queue.append(Waiting(key, now, item))

    def next_batch(self, now: float) -> list[Any] | None:
        """The items of the next batch, or None while the oldest request may still wait for company."""
        if not self.queue:
            return None
        head = self.queue[0]
        chosen = [w for w in self.queue if w.key == head.key][:self.max_size]
        if len(chosen) < self.max_size and now - head.arrived < self.delay_s:
            return None
        self.queue = [w for w in self.queue if not any(w is c for c in chosen)]
        return [w.item for w in chosen]

    def seconds_until_due(self, now: float) -> float | None:
        """How long until `next_batch` may return something without new arrivals (None: queue empty)."""
        if not self.queue:
            return None
        return max(0.0, self.queue[0].arrived + self.delay_s - now)
