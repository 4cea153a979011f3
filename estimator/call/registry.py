"""One record per attention backend, in one registry that every room reads: what `auto` chooses among, which
backends are one fused kernel, how FLOPs are counted, the error band of the peak, what mask tensor the call gets.

A new backend is one `register(Backend(...))` below, its memory timeline in estimator/call/memory.py (decorated
`@register_timeline(name)`), its eligibility rules in estimator/call/backends.py and its time constants in
estimator/call/timing.py. A name is registered once: a second record or a second timeline for it is refused, as
torch/utils/flop_counter.py (torch 2.11) refuses a second formula for one op ("duplicate registrations").

Registration order is the order users see the names in (`BACKENDS`: error messages, `--backend`'s help, the
app's pickers), so the subsets below keep it too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

COUNTED = ("sdpa", "bmm")
EXECUTED = ("all", "causal_tiles", "blocks")
MASK_INPUTS = ("dense", "block_mask", "none")


@dataclass(frozen=True, kw_only=True)
class FlopsRule:
    """How torch/utils/flop_counter.py (FlopCounterMode) counts the call, and what the GPU skips of it.

    counted: "sdpa" (the fused op's sdpa_flop_count: forward 4·d, backward 10·d per score element) or "bmm" (the
    chain's bmm calls: forward 4·D, backward 8·D). head_dim_multiple: the counter sees head_dim padded to it (flash
    pads to 8 before its op is dispatched). executed: "all" (every counted FLOP runs), "causal_tiles" (score tiles
    above the causal diagonal skipped) or "blocks" (only the 128 x 128 blocks a window/document mask keeps)."""

    counted: str
    executed: str
    head_dim_multiple: int = 1

    def __post_init__(self) -> None:
        if self.counted not in COUNTED:
            raise ValueError(f"counted: expected one of {', '.join(COUNTED)}, got {self.counted!r}")
        if self.executed not in EXECUTED:
            raise ValueError(f"executed: expected one of {', '.join(EXECUTED)}, got {self.executed!r}")
        if not isinstance(self.head_dim_multiple, int) or self.head_dim_multiple < 1:
            raise ValueError(f"head_dim_multiple: expected a positive int, got {self.head_dim_multiple!r}")


@dataclass(frozen=True, kw_only=True)
class Backend:
    """One attention backend.

    sdpa: one of the kernels `scaled_dot_product_attention` dispatches to (what `auto` chooses among).
    fused: one kernel that computes the scores tile by tile and never writes the score matrix.
    op_chain: a chain of ATen ops (bmm, softmax, ...) that materialises the scores, priced op by op
    (estimator/call/op_chain.py), its bmm calls on cuBLAS (whose workspaces the call then holds).
    always_runs: no eligibility rule applies (plain torch ops run any call).
    traced: its memory timeline is checked allocation by allocation against H200 allocator traces
    (validation/call/calibration_cases.py trace_rows, validation/data/h200_calibration.csv).
    error_band: the relative error band of peak_extra_bytes (estimator/call/attention.py says where each comes from).
    priced_as: a backend whose kernels it runs, and is timed as (None: its own).
    mask_input: what the call gets for a mask: the dense (batch, 1, q_len, kv_len) tensor, a BlockMask, or none
    (window and documents are kernel arguments)."""

    name: str
    display_name: str
    sdpa: bool
    fused: bool
    op_chain: bool
    always_runs: bool = False
    traced: bool
    flops: FlopsRule
    error_band: tuple[float, float]
    priced_as: str | None = None
    mask_input: str = "dense"

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip().lower() or self.name == "auto":
            raise ValueError(f"name: expected a lower-case backend name other than auto, got {self.name!r}")
        if self.fused and self.op_chain:
            raise ValueError(f"op_chain: {self.name} cannot be one fused kernel and a chain of ops at once")
        if (self.flops.counted == "sdpa") != self.fused:
            raise ValueError(f"flops: {self.name} is counted as a fused op exactly when it is fused")
        low, high = self.error_band
        if not low <= 0 <= high:
            raise ValueError(f"error_band: expected (low <= 0 <= high), got {self.error_band!r}")
        if self.mask_input not in MASK_INPUTS:
            raise ValueError(f"mask_input: expected one of {', '.join(MASK_INPUTS)}, got {self.mask_input!r}")


_RECORDS: dict[str, Backend] = {}
_TIMELINES: dict[str, tuple[Callable, bool]] = {}


def register(backend: Backend) -> Backend:
    """Add one backend; a name already registered is refused (ValueError)."""
    if backend.name in _RECORDS:
        raise ValueError(f"backend: {backend.name!r} is registered twice")
    if backend.priced_as is not None and backend.priced_as not in _RECORDS:
        raise ValueError(f"priced_as: {backend.priced_as!r} is not a registered backend")
    _RECORDS[backend.name] = backend
    return backend


def register_timeline(*names: str, per_gpu: bool = False) -> Callable:
    """Decorator: the function is the memory timeline of these backends, called `fn(c)`, or `fn(c, sm_count)`
    with per_gpu. A backend that is not registered, or already has a timeline, is refused (ValueError)."""
    def wrap(fn: Callable) -> Callable:
        for name in names:
            if name not in _RECORDS:
                raise ValueError(f"backend: {name!r} is not registered (estimator/call/registry.py)")
            if name in _TIMELINES:
                raise ValueError(f"backend: {name!r} has its memory timeline registered twice")
            _TIMELINES[name] = (fn, per_gpu)
        return fn
    return wrap


def get(name: str) -> Backend:
    return _RECORDS[name]


def timeline(name: str, c, sm_count: int):
    """The memory timeline of the calls `c` on backend `name` (estimator/call/memory.py registers them)."""
    fn, per_gpu = _TIMELINES[name]
    return fn(c, sm_count) if per_gpu else fn(c)


def has_timeline(name: str) -> bool:
    return name in _TIMELINES


def names(**flags) -> tuple[str, ...]:
    """Registered names in registration order, those whose fields equal `flags` (e.g. names(sdpa=True))."""
    return tuple(b.name for b in _RECORDS.values() if all(getattr(b, k) == v for k, v in flags.items()))


def names_where(test: Callable[[Backend], bool]) -> tuple[str, ...]:
    return tuple(b.name for b in _RECORDS.values() if test(b))


def column(backend, value: Callable[[Backend], object], default):
    """`value(record)` for each element of a backend column (a name or an array of names); `default` for names that
    are not registered ("none")."""
    backend = np.asarray(backend)
    if backend.ndim == 0:
        out = default
        for b in _RECORDS.values():
            out = np.where(backend == b.name, value(b), out)
        return out
    # many rows: the dtype the same chain of np.where gives, then each name's rows filled in place
    dtype = default
    for b in _RECORDS.values():
        dtype = np.where(False, value(b), dtype)
    out = np.full(backend.shape, default, dtype=dtype.dtype)
    for b in _RECORDS.values():
        rows = backend == b.name
        if rows.any():
            out[rows] = value(b)
    return out


# Error bands: the lowest and highest (predicted - measured) / measured over the H200 calls of at least 64 MiB in
# validation/data/h200_{calibration,heldout,heldout2,heldout3,heldout4,nsweep}.csv (122 to 351 calls each),
# rounded outward to 0.5%; flex from the whole-model flex rows (h200_hf_windows_b.csv), wider; flash-attn from its
# source (not installable where we measure).
register(Backend(name="math", display_name="SDPA math (aten _scaled_dot_product_attention_math)",
                 sdpa=True, fused=False, op_chain=True, traced=True,
                 flops=FlopsRule(counted="bmm", executed="all"), error_band=(-0.01, 0.02)))
register(Backend(name="flash", display_name="SDPA FlashAttention-2",
                 sdpa=True, fused=True, op_chain=False, traced=True,
                 flops=FlopsRule(counted="sdpa", executed="causal_tiles", head_dim_multiple=8),
                 error_band=(-0.005, 0.005)))
register(Backend(name="efficient", display_name="SDPA memory-efficient (xFormers/CUTLASS)",
                 sdpa=True, fused=True, op_chain=False, traced=True,
                 flops=FlopsRule(counted="sdpa", executed="causal_tiles"), error_band=(-0.005, 0.015)))
register(Backend(name="cudnn", display_name="SDPA cuDNN attention",
                 sdpa=True, fused=True, op_chain=False, traced=True,
                 flops=FlopsRule(counted="sdpa", executed="causal_tiles"), error_band=(-0.01, 0.015)))
register(Backend(name="eager", display_name="eager (hand-written softmax(q kT) v, validation/eager.py)",
                 sdpa=False, fused=False, op_chain=True, always_runs=True, traced=True,
                 flops=FlopsRule(counted="bmm", executed="all"), error_band=(-0.015, 0.015)))
register(Backend(name="flex", display_name="flex_attention (torch.compile, Triton)",
                 sdpa=False, fused=True, op_chain=False, traced=False,
                 flops=FlopsRule(counted="sdpa", executed="blocks"), error_band=(-0.05, 0.05),
                 mask_input="block_mask"))
register(Backend(name="flash-attn", display_name="flash-attn package (FA2, flash_attention_2)",
                 sdpa=False, fused=True, op_chain=False, traced=False,
                 flops=FlopsRule(counted="sdpa", executed="blocks", head_dim_multiple=8), error_band=(-0.05, 0.05),
                 priced_as="flash", mask_input="none"))

BACKENDS = ("auto", *names())  # what a call or a plan may ask for
SDPA_BACKENDS = names(sdpa=True)  # what `auto` chooses among
FUSED = names(fused=True)  # one tiled kernel, no score matrix (how timing and FLOPs treat a call)
SDPA_FUSED = names(sdpa=True, fused=True)  # the fused kernels SDPA can pick (what the advisor steers towards)
OP_CHAIN = names(op_chain=True)  # op chains on cuBLAS: the scores materialised
