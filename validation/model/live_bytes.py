"""Live tensor bytes on any device, CPU included: a TorchDispatchMode that records every storage an op creates
and, after each op, drops the ones whose storage has died (torch.multiprocessing.reductions.StorageWeakRef).
Its `peak` is what a byte-exact allocator would report above the bytes alive when the mode was entered (views and
in-place results share their input's storage and are not counted again). Used to check the op-by-op replays of
estimator/model/ssm_mamba2.py and hybrid_plan.py on CPU (tests/test_hybrid_ssm.py); the CUDA caching allocator's
rounding (512 B blocks) and any kernel workspace are not seen here, the H200 runs check those.
"""

from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    """with LiveBytes() as lb: ...; lb.peak (bytes), lb.peak_op (the op after which it was reached)."""

    def __init__(self) -> None:
        super().__init__()
        self._refs: dict[int, tuple[StorageWeakRef, int]] = {}
        self.peak = 0
        self.peak_op = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor)}
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key in inputs:
                    continue
                if key not in self._refs or self._refs[key][0].expired():
                    self._refs[key] = (StorageWeakRef(storage), storage.nbytes())
        for key in [k for k, (ref, _) in self._refs.items() if ref.expired()]:
            del self._refs[key]
        live = sum(n for _, n in self._refs.values())
        if live > self.peak:
            self.peak, self.peak_op = live, str(func)
        return out

    @property
    def live(self) -> int:
        return sum(n for ref, n in self._refs.values() if not ref.expired())
