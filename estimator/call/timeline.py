"""The allocation timeline every backend's memory model is written in (estimator/call/memory.py)."""

from __future__ import annotations

import numpy as np

from estimator.call.allocator import block_bytes


class Timeline:
    """Replays a backend's allocations and frees in order and keeps the running peak.

    Sizes are what the caching allocator counts (`block_bytes`); a size of 0 (a condition that does not
    hold for that row) allocates nothing. Works elementwise on arrays.
    """

    def __init__(self) -> None:
        self.live = np.int64(0)
        self.peak = np.int64(0)
        self.blocks: dict[str, np.ndarray] = {}
        self.marks: dict[str, np.ndarray] = {}
        self.events: list[tuple[str, str, np.ndarray]] = []  # (alloc, name, bytes) / (free, name, where)

    def mark(self, name: str) -> None:
        """Remember the live bytes now (e.g. what stays allocated after the forward)."""
        self.marks[name] = self.live

    def alloc(self, name: str, nbytes, when=True) -> None:
        requested = np.where(when, np.asarray(nbytes, dtype=np.int64), 0)
        size = block_bytes(requested)
        if name in self.blocks:
            raise KeyError(f"block {name!r} allocated twice")
        self.events.append(("alloc", name, requested))
        self.blocks[name] = size
        self.live = self.live + size
        self.peak = np.maximum(self.peak, self.live)

    def free(self, *names: str) -> None:
        for name in names:
            self.live = self.live - self.blocks.pop(name)
            self.events.append(("free", name, np.bool_(True)))

    def free_if(self, when, *names: str) -> None:
        """Free where `when` holds; elsewhere the block stays live (kept for backward, say)."""
        for name in names:
            size = self.blocks[name]
            self.live = self.live - np.where(when, size, 0)
            self.blocks[name] = np.where(when, 0, size)
            self.events.append(("free", name, np.asarray(when, dtype=bool)))

    def transient(self, name: str, nbytes, when=True) -> None:
        """Allocate and free at once: a workspace that lives only inside one kernel call."""
        self.alloc(name, nbytes, when)
        self.free(name)

    def events_for(self, row: int | None) -> list[tuple[str, str, int]]:
        """The alloc/free sequence of one call (`row` in a column set; None for a single call)."""
        def pick(value):
            value = np.asarray(value)
            return value.item() if value.ndim == 0 else value[row or 0].item()
        return [(op, name, int(pick(v)) if op == "alloc" else bool(pick(v))) for op, name, v in self.events]

    def events_by_row(self, n: int) -> list[list[tuple[str, str, int]]]:
        """events_for(row) of rows 0..n-1 of a column set at once (each event's column converted once)."""
        columns = [(op, name, np.broadcast_to(np.asarray(v, dtype=np.int64 if op == "alloc" else bool), (n,)).tolist())
                   for op, name, v in self.events]
        return [[(op, name, values[row]) for op, name, values in columns] for row in range(n)]
