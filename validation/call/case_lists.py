"""The named case lists of `python -m validation grid --kind K`: the grids of validation/call/grid.py and the
calibration set of validation/call/calibration_cases.py, by name."""

from __future__ import annotations

from validation.call.calibration_cases import calibration_rows
from validation.call.grid import (
    BACKENDS,
    DTYPES,
    MODES,
    all_kinds_sample,
    cpu_grid,
    head_dim_sweep,
    matrix,
    n_sweep,
    random_sample,
)

KINDS = ("nsweep", "matrix", "random", "calibration", "cpu", "sweep", "headdim")


def make_grid(kind: str, *, seed: int = 0, n: int = 200, dtype: str = "bfloat16", mode: str = "forward",
              stop: int = 32768, backend: str | None = None) -> list[dict]:
    """The named grid; ValueError naming the field for an unknown kind or a bad size (dtype, mode and
    stop shape the n sweep; backend fixes the random sample's backend)."""
    if kind not in KINDS:
        raise ValueError(f"kind: unknown grid {kind!r}; expected one of {', '.join(KINDS)}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected a positive integer, got {n!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype: unknown {dtype!r}; expected one of {', '.join(DTYPES)}")
    if mode not in MODES:
        raise ValueError(f"mode: unknown {mode!r}; expected one of {', '.join(MODES)}")
    if not isinstance(stop, int) or not 128 <= stop <= 1 << 20:
        raise ValueError(f"stop: expected a sequence length in [128, 1048576], got {stop!r}")
    if kind == "nsweep":
        return n_sweep(dtype=dtype, mode=mode, stop=stop)
    if kind == "matrix":
        return matrix()
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend: unknown {backend!r}; expected one of {', '.join(BACKENDS)}")
    if kind == "random":
        return random_sample(n, seed=seed, backend=backend)
    if kind == "cpu":
        return cpu_grid()
    if kind == "sweep":
        return all_kinds_sample(seed=seed, n=n)
    if kind == "headdim":
        return head_dim_sweep()
    return calibration_rows()
