"""A replay of PyTorch's CUDA caching allocator, to decide whether a call near the memory limit runs or
runs out of memory.

The peak of allocated bytes is not enough near the limit: freed blocks stay cached inside their segments,
a later request that does not fit any cached block needs a new segment, and a segment that still holds one
live block cannot be returned to the driver. The rules are c10/cuda/CUDACachingAllocator.cpp's defaults (no
max_split_size, no expandable segments): requests rounded to 512 B; ≤ 1 MiB from a small pool of 2-MiB
segments; larger ones best-fit from cached blocks, else a new segment of 20 MiB (requests < 10 MiB) or the
request rounded up to 2 MiB; a block is split when more than 1 MiB (large) or 512 B (small) would remain;
freed blocks merge with free neighbours; when the driver refuses a segment, every fully free cached segment
is released and the request retried once.

Checked on the H200 with allocation traces that carry addresses (validation/call/allocator_trace.py:
trace_with_addresses): placement, segment reuse and release happen as replayed, once the inputs are
allocated the way validation/call/protocol.py makes them (a bool mask's fp32 `rand` temporary leaves a cached
segment that later hosts small blocks). With that, the replay decides all 1,970 H200 calls that ran or ran
out of memory (validation/data/h200_*.csv), the seven between 92% and 96% of the memory among them. The
boundary also moves with what the process ran before (library memory outside the allocator): the call that
ran out at 92.1% during a sweep ran in a fresh process.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from estimator.units import MIB, round_up

# The allocator's size rules, named as c10/cuda/CUDACachingAllocator.cpp names them (its defaults).
MIN_BLOCK_BYTES = 512  # kMinBlockSize: every request rounded up to a multiple of 512 B
SMALL_SIZE_BYTES = MIB  # kSmallSize: requests up to 1 MiB come from the small pool; a large block is split
# only when more than this would remain
SMALL_BUFFER_BYTES = 2 * MIB  # kSmallBuffer: the small pool's segment
LARGE_BUFFER_BYTES = 20 * MIB  # kLargeBuffer: the segment of a large request below kMinLargeAlloc
MIN_LARGE_ALLOC_BYTES = 10 * MIB  # kMinLargeAlloc: from here a request gets a segment of its own size...
ROUND_LARGE_BYTES = 2 * MIB  # kRoundLarge: ...rounded up to 2 MiB


def block_bytes(nbytes):
    """Bytes the caching allocator counts for one request of `nbytes` (elementwise): the request rounded up to
    kMinBlockSize, except that a request of at least kMinLargeAlloc whose kRoundLarge round-up leaves at most
    kSmallSize holds (and is counted as) its whole segment, since a block is split only if more would remain."""
    block = round_up(nbytes, MIN_BLOCK_BYTES)
    segment = round_up(nbytes, ROUND_LARGE_BYTES)
    whole = (nbytes >= MIN_LARGE_ALLOC_BYTES) & (segment - block <= SMALL_SIZE_BYTES)
    return np.where(whole, segment, block)


class OutOfMemory(Exception):
    pass


@dataclass
class _Block:
    size: int
    segment: int
    free: bool = True
    prev: _Block | None = None
    next: _Block | None = None


@dataclass
class CachingAllocator:
    """Segments, blocks and pools; `malloc` returns a handle, `free` takes it back."""

    capacity_bytes: int
    reserved_bytes: int = 0
    segments: dict[int, list[_Block]] = field(default_factory=dict)
    _small: dict[int, bool] = field(default_factory=dict)  # segment id → small pool
    _free: dict[bool, list[tuple[int, int, _Block]]] = field(default_factory=lambda: {True: [], False: []})
    _next_id: int = 0

    def _insert_free(self, block: _Block) -> None:
        self._next_id += 1
        bisect.insort(self._free[self._small[block.segment]], (block.size, self._next_id, block))

    def _remove_free(self, block: _Block) -> None:
        pool = self._free[self._small[block.segment]]
        for i, (_, _, b) in enumerate(pool):
            if b is block:
                del pool[i]
                return

    def _new_segment(self, size: int, small: bool) -> _Block | None:
        seg_size = SMALL_BUFFER_BYTES if small else (LARGE_BUFFER_BYTES if size < MIN_LARGE_ALLOC_BYTES else
                                                     round_up(size, ROUND_LARGE_BYTES))
        if self.reserved_bytes + seg_size > self.capacity_bytes:
            return None
        self._next_id += 1
        seg = self._next_id
        block = _Block(seg_size, seg)
        self.segments[seg] = [block]
        self._small[seg] = small
        self.reserved_bytes += seg_size
        return block

    def _release_cached(self) -> None:
        for seg, blocks in list(self.segments.items()):
            head = blocks[0]
            if head.free and head.next is None and head.prev is None:
                self._remove_free(head)
                self.reserved_bytes -= head.size
                del self.segments[seg], self._small[seg]

    def malloc(self, nbytes: int) -> _Block | None:
        if nbytes <= 0:
            return None
        size = max(MIN_BLOCK_BYTES, round_up(nbytes, MIN_BLOCK_BYTES))
        small = size <= SMALL_SIZE_BYTES
        pool = self._free[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):
            block = pool.pop(i)[2]
        else:
            block = self._new_segment(size, small)
            if block is None:
                self._release_cached()
                block = self._new_segment(size, small)
                if block is None:
                    raise OutOfMemory(size)
        remaining = block.size - size
        if (remaining >= MIN_BLOCK_BYTES) if small else (remaining > SMALL_SIZE_BYTES):  # should_split
            rest = _Block(remaining, block.segment, True, block, block.next)
            if block.next:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._insert_free(rest)
        block.free = False
        return block

    def free(self, block: _Block | None) -> None:
        if block is None:
            return
        block.free = True
        for neighbour in (block.prev, block.next):
            if neighbour is not None and neighbour.free:
                self._remove_free(neighbour)
                block.size += neighbour.size
                if neighbour is block.prev:
                    block.prev = neighbour.prev
                    if block.prev:
                        block.prev.next = block
                else:
                    block.next = neighbour.next
                    if block.next:
                        block.next.prev = block
        if block.prev is None:
            self.segments[block.segment][0] = block
        self._insert_free(block)


def replay_fits(inputs: list[tuple], events: list[tuple], capacity_bytes: int, workspaces: list[int],
                runs: int = 2) -> bool:
    """Replay the input allocations (events, like the call's), then the call's events `runs` times (warm-up
    and measured call), with library workspaces (cuBLAS) allocated at the first run and kept. False where the
    replay runs out of memory."""
    alloc = CachingAllocator(capacity_bytes)
    try:
        _play(alloc, inputs, keep=True)
        for run in range(runs):
            if run == 0:
                for n in workspaces:
                    alloc.malloc(n)
            _play(alloc, events, keep=False)
    except OutOfMemory:
        return False
    return True


def _play(alloc: CachingAllocator, events: list[tuple], keep: bool) -> None:
    live: dict[str, _Block | None] = {}
    for op, name, size in events:
        if op == "alloc":
            live[name] = alloc.malloc(size)
        elif size and name in live:
            alloc.free(live.pop(name))
    if not keep:
        for block in live.values():
            alloc.free(block)
