"""The running state of a simulated engine: per-request counters in numpy arrays (tokens cached, tokens to prefill
before the next output token, tokens generated, blocks held) and the free blocks of the pool, with the block
allocation each engine does. Schedulers (estimator/serve/schedulers.py) read and change it; the step loop
(estimator/serve/simulate.py) owns it.

Per request i: `comp[i]` tokens have k, v in the cache; `targ[i]` tokens must be cached before the next token comes
out (the prompt, then one more per generated token; after a recompute preemption, prompt + generated); a request
with comp >= targ is decoding (one token per step). `logical[i]` blocks per layer group, `blocks[i]` physical
blocks over every group (cache.py blocks_needed: each full group one per logical block, each sliding group at most
its window's).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from estimator.serve.memory import EngineMemory


class Pool:
    """Arrays for every request of the workload, the running list (admission order), the waiting queue."""

    def __init__(self, memory: EngineMemory, prompt: np.ndarray, output: np.ndarray, hf_allocation: bool) -> None:
        n = len(prompt)
        self.memory = memory
        self.bs = memory.block_size
        self.full_g, self.slide_g, self.wblocks = memory.full_groups, memory.sliding_groups, memory.window_blocks
        self.hf = hf_allocation
        self.prompt, self.out = prompt, output
        self.comp = np.zeros(n, dtype=np.int64)
        self.targ = prompt.astype(np.int64).copy()
        self.gen = np.zeros(n, dtype=np.int64)
        self.logical = np.zeros(n, dtype=np.int64)
        self.blocks = np.zeros(n, dtype=np.int64)
        self.preempted = np.zeros(n, dtype=np.int64)
        self.free = memory.num_blocks
        self.running: dict[int, None] = {}  # admission order (a dict: ordered, O(1) removal)
        self.waiting: deque[int] = deque()
        self._arr: np.ndarray | None = None
        self.block_new = False  # hf-cb: no waiting request is a candidate after an eviction until one finishes
        self.last_need = 0  # physical blocks the last failed grow() asked for
        self.new_token_ratio = 0.7  # SGLang's admission reserve ratio (estimator/serve/schedulers.py)

    # --- the running list as an array (rebuilt only when the list changed)
    def running_array(self) -> np.ndarray:
        if self._arr is None:
            self._arr = np.fromiter(self.running, dtype=np.int64, count=len(self.running))
        return self._arr

    def changed(self) -> None:
        self._arr = None

    def admit(self, i: int) -> None:
        self.running[i] = None
        self._arr = None

    def drop(self, ids) -> None:
        for i in ids:
            self.running.pop(int(i), None)
        self._arr = None

    def newest(self) -> int:
        return next(reversed(self.running))

    # --- blocks
    def _physical(self, new_logical, have_logical):
        extra = new_logical * self.full_g
        if self.slide_g:
            extra = extra + np.minimum(np.maximum(self.wblocks - have_logical, 0), new_logical) * self.slide_g
        return extra

    def grow(self, i: int, tokens: int) -> bool:
        """Allocate what request i needs to cache `tokens` more tokens; False (nothing allocated) if the pool
        cannot. hf-cb: scheduler.py _allocate_blocks_if_needed; the others: whole blocks for the new length."""
        comp, have = int(self.comp[i]), int(self.logical[i])
        if self.hf:
            occupancy = have * self.bs - comp
            if not (occupancy < tokens or have == 0):
                return True
            new = (tokens - occupancy + 1) // self.bs + 1
        else:
            new = -(-(comp + tokens) // self.bs) - have
            if new <= 0:
                return True
        need = int(self._physical(new, have))
        if need > self.free:
            self.last_need = need
            return False
        self.free -= need
        self.blocks[i] += need
        self.logical[i] += new
        return True

    def grow_decoders(self, ids: np.ndarray) -> bool:
        """One more token for every request in `ids` (all decoding), all or nothing."""
        if not len(ids):
            return True
        comp, have = self.comp[ids], self.logical[ids]
        if self.hf:
            occupancy = have * self.bs - comp
            new = np.where((occupancy < 1) | (have == 0), (1 - occupancy + 1) // self.bs + 1, 0)
        else:
            new = np.maximum(-(-(comp + 1) // self.bs) - have, 0)
        phys = self._physical(new, have)
        need = int(phys.sum())
        if need > self.free:
            return False
        self.free -= need
        self.blocks[ids] += phys
        self.logical[ids] += new
        return True

    def blocks_for(self, tokens):
        """Physical blocks a request of `tokens` cached tokens holds (scalar or array)."""
        n = -(-np.asarray(tokens) // self.bs)
        out = n * self.full_g
        if self.slide_g:
            out = out + np.minimum(n, self.wblocks) * self.slide_g
        return out

    def release(self, ids) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size:
            self.free += int(self.blocks[ids].sum())
            self.blocks[ids] = 0
            self.logical[ids] = 0

    def reset(self, i: int) -> None:
        """Recompute preemption: the cache is dropped; prompt + generated tokens are prefilled again. The caller
        takes i off the running list and puts it back in the queue."""
        self.release([i])
        self.comp[i] = 0
        self.targ[i] = self.prompt[i] + self.gen[i]
        self.preempted[i] += 1

    def preempt(self, i: int) -> None:
        """Recompute preemption of a running request (reset), off the running list, back at the queue's head."""
        self.reset(i)
        self.drop([i])
        self.waiting.appendleft(i)

    def decoding(self, i: int) -> bool:
        return bool(self.comp[i] >= self.targ[i])

    def remaining(self, i: int) -> int:
        return int(self.targ[i] - self.comp[i])
