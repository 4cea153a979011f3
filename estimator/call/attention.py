"""What one attention call costs on a GPU: backend, peak memory (contract §1), FLOPs and time.

`estimate_call` serves one call; `estimate_columns` serves many at once (predict, sweeps, charts).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from estimator.call import backends, flops, memory, registry, timing
from estimator.call.allocator import replay_fits
from estimator.call.config import AttentionCall
from estimator.call.shapes import Calls
from estimator.hardware import GPU

# Device memory that PyTorch cannot hand out: the CUDA context, kernel images, cuBLAS/cuDNN handles.
# Measured on the H200 (torch 2.11): total_memory 150,109,880,320 − mem_get_info() free after a
# first kernel 149,458,911,232 = 650,969,088 B. Used for every GPU (driver-dependent; an estimate).
CUDA_CONTEXT_BYTES = 650_969_088
# Near the limit the peak of allocated bytes does not decide: cached blocks fragment the segments. Calls whose
# inputs + peak exceed this share of the memory left after the context are replayed through the caching
# allocator (estimator/call/allocator.py) to decide `fits`. On the H200 no call below 92% ran out of memory and the
# replay decides the seven measured between 92% and 96%; 75% keeps a wide margin (replays cost ~1 ms each).
REPLAY_FROM_FRACTION = 0.75
# cuBLAS keeps a 32 MiB workspace per (handle, stream) once a matmul ran: math and eager calls have
# one from the forward and one from autograd's backward thread (CublasHandlePool.cpp; measured).
CUBLAS_WORKSPACE_BYTES = 32 * 2**20

# Relative error band of peak_extra_bytes per backend: each record's `error_band` (estimator/call/registry.py says
# which measured sets set it). Below 64 MiB the error is absolute: within ERROR_FLOOR_BYTES for 1,089 of 1,091
# such calls (99th percentile 0.97 MiB, worst 2.96 MiB).
ERROR_FLOOR_BYTES = 2 * 2**20

@dataclass(frozen=True)
class CallEstimate:
    call: AttentionCall
    gpu_name: str
    supported: bool
    selected_backend: str
    reasons: dict[str, tuple[str, ...]] = field(hash=False)
    peak_extra_bytes: int | None
    forward_retained_bytes: int | None
    input_bytes: int
    fits: bool
    flops: int
    executed_flops: int
    time_ms: float | None
    scores_bytes: int
    kv_bytes: int
    error_band: tuple[float, float]


def backend_timeline(c: Calls, backend: str, gpu: GPU):
    return memory.backend_timeline(c, backend, gpu.sm_count)


def _cublas_workspace_bytes(c: Calls, backend):
    """cuBLAS workspaces an op chain's bmm calls leave behind: one from the forward, one more from autograd's
    backward thread (0 for the fused kernels)."""
    return np.where(np.isin(backend, registry.OP_CHAIN), CUBLAS_WORKSPACE_BYTES * np.where(c.grad, 2, 1), 0)


def peaks_for(c: Calls, selected, gpu: GPU) -> tuple[np.ndarray, np.ndarray]:
    """(peak_extra_bytes, forward_retained_bytes) of each call on its selected backend (0 where none);
    each backend's timeline runs only on the calls that selected it."""
    selected = np.asarray(selected)
    if selected.dtype == object:
        selected = np.broadcast_to(selected, np.shape(c.B))
        if selected.ndim:  # the names as fixed-width text: numpy compares those in C, objects one by one
            selected = selected.astype(str)
    selected = np.broadcast_to(selected, np.shape(c.B))
    if selected.ndim == 0:
        if selected == "none":
            return np.int64(0), np.int64(0)
        t = backend_timeline(c, str(selected), gpu)
        return t.peak, t.marks["forward"]
    peak = np.zeros(selected.shape, dtype=np.int64)
    retained = np.zeros(selected.shape, dtype=np.int64)
    for name in registry.names():
        rows = selected == name
        if rows.any():
            if rows.ndim == 1:
                rows = np.flatnonzero(rows)  # positions: cheaper than a mask for each of the columns taken
            t = backend_timeline(c.take(rows), name, gpu)
            peak[rows] = t.peak
            retained[rows] = t.marks["forward"]
    return peak, retained


# Replay verdicts by (backend, GPU, call), so that a table that repeats shapes replays each once; bounded.
_REPLAY_MEMO: dict[tuple, bool] = {}
REPLAY_MEMO_SIZE = 1 << 16


def replay_fits_rows(c: Calls, backend: str, gpu: GPU) -> np.ndarray:
    """Each call of a column set, all on `backend`, through the caching-allocator replay: inputs, then the
    warm-up and the measured call, with cuBLAS workspaces on the math and eager paths. Repeated calls (same
    fields, backend and GPU) are replayed once (memoised: the replay is a pure function of them)."""
    fields = list(c.__dataclass_fields__)
    n = len(np.atleast_1d(c.grad))
    columns = [np.broadcast_to(np.atleast_1d(getattr(c, f)), (n,)) for f in fields]
    gpu_key = (backend, gpu.name, gpu.memory_bytes, gpu.sm_count)
    keys = [(gpu_key, *values) for values in zip(*(col.tolist() for col in columns), strict=True)] if n else []
    out = np.zeros(n, dtype=bool)
    todo: dict[tuple, list[int]] = {}
    for row, key in enumerate(keys):
        hit = _REPLAY_MEMO.get(key)
        if hit is None:
            todo.setdefault(key, []).append(row)
        else:
            out[row] = hit
    if not todo:
        return out
    firsts = np.array([rows[0] for rows in todo.values()])
    sub = c.take(firsts)
    timeline = backend_timeline(sub, backend, gpu)
    grads = np.atleast_1d(sub.grad)
    if len(_REPLAY_MEMO) + len(todo) > REPLAY_MEMO_SIZE:
        _REPLAY_MEMO.clear()
    inputs, events = sub.input_events_by_row(len(todo)), timeline.events_by_row(len(todo))
    for i, (key, rows) in enumerate(todo.items()):
        workspaces = [CUBLAS_WORKSPACE_BYTES] * ((2 if grads[i] else 1) if registry.get(backend).op_chain else 0)
        verdict = replay_fits(inputs[i], events[i], gpu.memory_bytes - CUDA_CONTEXT_BYTES, workspaces)
        _REPLAY_MEMO[key] = verdict
        out[rows] = verdict
    return out


def estimate_columns(c: Calls, requested, gpu: GPU, torch_version: str = backends.DEFAULT_TORCH, *,
                     timed: bool = True) -> dict:
    """Vectorized estimate. `requested` is the backend column (auto or a registered backend's name). timed=False
    leaves the time model out (time_ms None): what a question about memory alone needs (the solvers')."""
    requested = np.asarray(requested, dtype=object)
    ok = backends.eligibility(c, gpu.sm, torch_version)
    auto = backends.select(c, gpu.sm, torch_version, ok)
    selected = np.where(requested == "auto", auto, requested)
    # the names as fixed-width text for the per-name tests below (numpy compares those in C, object arrays per
    # element in Python); `selected` itself is returned as object text, as it was
    text = selected.astype(str) if np.ndim(selected) else selected
    supported = np.isin(text, registry.names(always_runs=True))
    for name, can in ok.items():
        supported = supported | ((text == name) & can)
    selected = np.where(supported, selected, "none")
    names = np.where(supported, text, "none") if np.ndim(selected) else selected
    peak, retained = peaks_for(c, names, gpu)
    inputs = c.input_bytes(names)
    cublas = _cublas_workspace_bytes(c, names)
    available = gpu.memory_bytes - CUDA_CONTEXT_BYTES
    need = inputs + peak + cublas
    fits = supported & (need <= available)
    near = np.atleast_1d(fits & (need > REPLAY_FROM_FRACTION * available))
    if near.any():
        fits = np.atleast_1d(fits).copy()
        sel = np.atleast_1d(selected)
        for name in set(sel[near]):
            rows = near & (sel == name)
            fits[rows] = replay_fits_rows(c.take(rows), str(name), gpu)
        fits = fits.reshape(np.shape(selected))
    # a backend `priced_as` another (flash-attn: FA2) is timed as that one's kernels
    kernel = registry.column(names, lambda b: b.priced_as or b.name, "none")
    counted = flops.counted_flops(c, names)
    executed = flops.executed_flops(c, names, counted)
    return {"supported": supported, "selected_backend": selected, "peak_extra_bytes": peak,
            "forward_retained_bytes": retained, "input_bytes": inputs, "fits": fits,
            "flops": counted, "executed_flops": executed,
            "time_ms": _time_ms(c, names, kernel, executed, gpu) if timed else None,
            "scores_bytes": c.B * c.Hq * c.L * c.S * c.es, "kv_bytes": c.B * c.Hk * c.S * (c.D + c.Dv) * c.es}


def _name_groups(text: np.ndarray):
    """(name, rows) for each distinct name of a text column: the registered names and none by one C compare each,
    any other name through np.unique (a sort) of the rows left."""
    left = np.ones(text.shape, dtype=bool)
    for name in (*registry.names(), "none"):
        rows = text == name
        if rows.any():
            left &= ~rows
            yield name, rows
    if left.any():
        for name in np.unique(text[left]).tolist():
            yield name, text == name


def _time_by_kernel(c: Calls, kernel, executed, gpu: GPU):
    """timing.time_ms of each row, run once per kernel name on that name's rows with the name as a scalar: the
    model is elementwise, so the numbers are those of one run over every row, without a string comparison per row
    and term, and math's and eager's op chains priced on their own rows only (predict on 100,000 rows: see
    bench/bench_predict.py)."""
    kernel = np.asarray(kernel)
    if kernel.ndim == 0:
        return timing.time_ms(c, kernel, executed, gpu)
    executed = np.broadcast_to(np.asarray(executed), kernel.shape)
    out = np.empty(kernel.shape, dtype=np.float64)
    for name, rows in _name_groups(kernel.astype(str)):
        if rows.ndim == 1:
            rows = np.flatnonzero(rows)  # positions: cheaper than a mask for each of the columns taken
        out[rows] = timing.time_ms(c.take(rows), str(name), executed[rows], gpu)
    return out


def _time_ms(c: Calls, selected, kernel, executed, gpu: GPU):
    """The timing model's time; rows priced as another backend (flash-attn) are timed as its kernel (SDPA's flash)
    on the causal (or full) call without a mask tensor, scaled by the share of tiles its window or documents keep
    (from its source: not measured)."""
    time = _time_by_kernel(c, kernel, executed, gpu)
    fa = np.asarray(np.isin(selected, registry.names_where(lambda b: b.priced_as is not None)))
    if not fa.any():
        return time
    if fa.ndim == 0:  # one call (estimate_call)
        plain = dataclasses.replace(c, mask_bool=c.mask_bool & ~fa, causal=c.causal | (c.scausal & fa),
                                    W=np.where(fa, 0, c.W), docs=np.where(fa, 1, c.docs))
        whole = timing.time_ms(plain, kernel, flops.executed_flops(plain, kernel), gpu)
        share = flops.block_fraction(c) / flops.block_fraction(plain)
        return np.where(fa, whole * share, time)
    # only the rows priced as another backend are timed again, without their mask tensor
    c_fa, kernel_fa = c.take(fa), np.asarray(kernel)[fa]
    plain = dataclasses.replace(c_fa, mask_bool=np.zeros_like(c_fa.mask_bool), causal=c_fa.causal | c_fa.scausal,
                                W=np.zeros_like(c_fa.W), docs=np.ones_like(c_fa.docs))
    whole = _time_by_kernel(plain, kernel_fa, flops.executed_flops(plain, kernel_fa), gpu)
    time[fa] = whole * (flops.block_fraction(c_fa) / flops.block_fraction(plain))
    return time


def estimate_call(call: AttentionCall, gpu: GPU, torch_version: str = backends.DEFAULT_TORCH, *,
                  timed: bool = True) -> CallEstimate:
    """Everything the planner knows about one call on one GPU (timed=False: all but its time, time_ms None)."""
    torch_version = backends.check_torch_version(torch_version)
    c = Calls.from_call(call)
    cols = estimate_columns(c, call.backend, gpu, torch_version, timed=timed)
    supported = bool(cols["supported"])
    backend = str(cols["selected_backend"])
    if call.backend == "eager":
        why = {}
    else:
        why = backends.reasons(c, gpu.sm, torch_version)
    return CallEstimate(
        call=call, gpu_name=gpu.name, supported=supported, selected_backend=backend, reasons=why,
        peak_extra_bytes=int(cols["peak_extra_bytes"]) if supported else None,
        forward_retained_bytes=int(cols["forward_retained_bytes"]) if supported else None,
        input_bytes=int(cols["input_bytes"]), fits=bool(cols["fits"]), flops=int(cols["flops"]),
        executed_flops=int(round(float(cols["executed_flops"]))),
        time_ms=float(cols["time_ms"]) if supported and timed else None,
        scores_bytes=int(cols["scores_bytes"]), kv_bytes=int(cols["kv_bytes"]),
        error_band=registry.get(backend).error_band if backend in registry.names() else (0.0, 0.0))
