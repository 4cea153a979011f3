"""Solvers over `budget`: the largest seq_len for a batch, the largest batch for a seq_len, and the smallest
catalog GPU (and how many of it) that fit a plan.

Each is a binary search over `fits`, corrected for memory that is not monotone: padding makes a plan at an
unaligned size cost more than at the next aligned one (a memory-efficient call with a mask pads it to 16
columns; the flash split count jumps; tests/test_solve.py shows dips of up to 35 % between n and n + 1). The
answer is the largest size that fits *with every smaller size checked where dips occur*: the PAD_WINDOW sizes
just below it and the sizes one below each 2^k and 1.5·2^k. A failure there lowers the bound and the search
runs again. About 25 budget() evaluations per search plus ~70 for the checks; bench/bench_plan.py times them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from estimator.call.attention import CUDA_CONTEXT_BYTES
from estimator.call.config import MAX_SEQ_LEN
from estimator.hardware import CATALOG
from estimator.model.budget import budget, memory_fits
from estimator.model.inputs import PlanInputs
from estimator.model.state import model_state

MAX_BATCH = 1 << 20
GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64)


def _fits(inputs: PlanInputs, **changes) -> bool:
    try:
        return memory_fits(replace(inputs, **changes))  # budget(...).fits without its times
    except ValueError:  # e.g. cp larger than the sequence: that size is not a plan
        return False


def largest_fitting(fits, low: int, high: int, start: int) -> int:
    """Largest x in [low, high] with fits(x), given fits is monotone decreasing; low - 1 when none fits.
    Gallops up from `start` by doubling, so absurd sizes (where int64 FLOP counts overflow) are only
    evaluated when everything below them fits."""
    start = min(max(start, low), high)
    if fits(start):
        ok, bad = start, None
        while bad is None:
            trial = min(ok * 2, high)
            if trial == ok:
                return ok
            if fits(trial):
                ok = trial
            else:
                bad = trial
    else:
        if not fits(low):
            return low - 1
        ok, bad = low, start
    while bad - ok > 1:  # invariant: fits(ok), not fits(bad)
        mid = (ok + bad) // 2
        if fits(mid):
            ok = mid
        else:
            bad = mid
    return ok


PAD_WINDOW = 16  # sizes just below an answer that padding can make dearer than the answer itself


def dip_points(x: int, low: int) -> list[int]:
    """Sizes below x, nearest first, where non-monotone memory peaks: the PAD_WINDOW - 1 sizes below x and one
    below each 2^k and 1.5·2^k (the most unaligned sizes), all ≥ low."""
    points = list(range(x - 1, max(low, x - PAD_WINDOW) - 1, -1))
    k = 1
    while (1 << k) <= x:
        for edge in ((1 << k) - 1, (3 << (k - 1)) - 1):
            if low <= edge < x - PAD_WINDOW + 1 and edge not in points:
                points.append(edge)
        k += 1
    return sorted(set(points), reverse=True)


def _largest_prefix(fits, low: int, high: int, start: int) -> int:
    """Like largest_fitting, for a fits that need not be monotone: the largest x that fits and whose dip points
    (dip_points) fit too; low - 1 when none does."""
    while True:
        found = largest_fitting(fits, low, high, start)
        if found < low:
            return found
        failing = next((p for p in dip_points(found, low) if not fits(p)), None)
        if failing is None:
            return found
        high = start = failing - 1
        if high < low:
            return low - 1


def max_seq_len(inputs: PlanInputs, limit: int = MAX_SEQ_LEN) -> int:
    """Largest seq_len (≥ cp) that fits at this batch, every shorter one at the dip points fitting too; 0 when
    even the shortest does not fit."""
    found = _largest_prefix(lambda n: _fits(inputs, seq_len=n), inputs.cp, limit, inputs.seq_len)
    return max(found, 0) if found >= inputs.cp else 0


def max_batch(inputs: PlanInputs, limit: int = MAX_BATCH) -> int:
    """Largest global batch that fits at this seq_len; 0 when batch 1 does not fit. With a micro-batch
    (gradient accumulation) memory does not grow with the batch: then the largest batch that fits without
    accumulation, i.e. the largest micro-batch × data-parallel replicas."""
    if inputs.mode == "training" and inputs.micro_batch is not None:
        micro = _largest_prefix(lambda mb: _fits(inputs, micro_batch=mb, batch=mb * inputs.dp), 1, limit,
                                inputs.micro_batch)
        return max(micro, 0) * inputs.dp
    return max(_largest_prefix(lambda bt: _fits(inputs, batch=bt), 1, limit, inputs.batch), 0)


@dataclass(frozen=True, kw_only=True)
class GpuChoice:
    gpu: str
    gpus: int
    tp: int
    cp: int
    total_bytes: int
    capacity_bytes: int


def smallest_gpu(inputs: PlanInputs, counts: tuple[int, ...] = GPU_COUNTS) -> list[GpuChoice]:
    """For each catalog GPU, the fewest GPUs per data-parallel replica (tensor parallel first, then context
    parallel) on which the plan fits, sorted by total memory bought (count × memory) then count. `gpus` in each
    choice counts every replica. An empty list means it fits nowhere."""
    choices = []
    for name, gpu in CATALOG.items():
        for count in counts:
            done = False
            for tp in _divisors(count):
                cp = count // tp
                try:
                    trial = replace(inputs, gpu=name, gpus=count * inputs.dp, tp=tp, cp=cp)
                    if model_state_bytes(trial) + CUDA_CONTEXT_BYTES > gpu.memory_bytes:
                        continue  # weights (and training state) alone overflow: skip the attention estimates
                    plan = budget(trial)
                except ValueError:
                    continue
                if plan.fits:
                    choices.append(GpuChoice(gpu=name, gpus=count * inputs.dp, tp=tp, cp=cp,
                                             total_bytes=plan.total_bytes, capacity_bytes=gpu.memory_bytes))
                    done = True
                    break
            if done:
                break
    return sorted(choices, key=lambda c: (c.gpus * c.capacity_bytes, c.gpus))


def model_state_bytes(inputs: PlanInputs) -> int:
    """Per-GPU weights, plus gradients and AdamW state when training: a lower bound on the plan's total."""
    return sum(model_state(inputs))


def _divisors(count: int) -> list[int]:
    """tp candidates for `count` GPUs, largest first (tensor parallelism before context parallelism)."""
    return [t for t in range(count, 0, -1) if count % t == 0]
