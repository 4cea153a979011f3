"""Fit the time model (estimator/call/timing.py: FIT_FACTORS) from measured rows.

`python -m validation.fit_time validation/data/h200_calibration.csv validation/data/h200_heldout.csv`
prints, per backend and mode, flop_fit (16-bit), fp32_flop_fit, masked_flop_fit, bw_fit, exp_fit, dropout_fit and
overhead_ms from a weighted least-squares fit of relative error (time = Σ a_k·term_k + c over the terms of
`timing.time_terms`; rows >= 1 ms weigh 1, shorter ones SHORT_WEIGHT), the median error of the fit and of the
model now in the estimator on rows >= 1 ms, then the FIT_FACTORS dict to paste into timing.py. A coefficient
that comes out negative is dropped (its term refitted without it: fit factor 1000, i.e. the term is ~free);
a term no row of a group has (fp32 on flash/cuDNN, masks on math/eager) takes another term's factor. Pure pandas +
numpy: runs without torch.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from estimator.call.attention import estimate_columns
from estimator.call.flops import executed_flops
from estimator.call.table import calls_from_frame
from estimator.call.timing import time_terms
from estimator.hardware import get_gpu

SHORT_WEIGHT = 0.25  # weight of rows under 1 ms (overhead-dominated) relative to rows >= 1 ms
MIN_OVERHEAD_MS = 0.02


def _solve(design, weights):
    """Least squares of weighted relative error, columns with a negative coefficient dropped one at a time."""
    keep = [True] * design.shape[1]
    while True:
        cols = [i for i, k in enumerate(keep) if k]
        a = design[:, cols] * weights[:, None]
        coef = np.linalg.lstsq(a, weights, rcond=None)[0]
        full = np.zeros(design.shape[1])
        full[cols] = coef
        neg = [cols[i] for i in range(len(cols)) if coef[i] < 0]
        if not neg:
            return full
        keep[min(neg, key=lambda i: full[i])] = False


def fit(frames: list[pd.DataFrame], gpu_name: str = "h200") -> pd.DataFrame:
    gpu = get_gpu(gpu_name)
    d = pd.concat(frames, ignore_index=True)
    d = d[(d.status == "ok") & (pd.to_numeric(d.measured_time_ms, errors="coerce") > 0)].reset_index(drop=True)
    c, backend, _ = calls_from_frame(d)
    cols = estimate_columns(c, backend, gpu)
    sel = cols["selected_backend"]
    terms = time_terms(c, sel, executed_flops(c, sel), gpu)
    meas = pd.to_numeric(d.measured_time_ms).to_numpy()
    out = []
    for (b, g), idx in pd.DataFrame({"b": sel, "g": c.grad}).groupby(["b", "g"]).groups.items():
        idx = np.asarray(idx)
        design = np.concatenate([terms[idx], np.ones((len(idx), 1))], axis=1) / meas[idx, None]
        w = np.where(meas[idx] >= 1.0, 1.0, SHORT_WEIGHT)
        used = np.abs(design).sum(axis=0) > 0
        nt = terms.shape[1]
        coef = np.zeros(nt + 1)
        coef[used] = _solve(design[:, used], w)
        coef[nt] = max(coef[nt], MIN_OVERHEAD_MS)
        for k in (0, 1, 2):  # a term no row of the group has (fp32 on flash, masks on math) takes another's rate
            if not used[k]:
                coef[k] = coef[1 if k != 1 and used[1] else 0] if used[0] or used[1] else 1.0
        pred = terms[idx] @ coef[:nt] + coef[nt]
        big = meas[idx] >= 1.0
        fitted = np.abs(pred - meas[idx]) / meas[idx]
        now = np.abs(cols["time_ms"][idx] - meas[idx]) / meas[idx]
        inv = [round(1 / x, 3) if x > 1e-3 else 1000.0 for x in coef[:nt]]
        out.append({"backend": b, "grad": bool(g), "rows": len(idx), "rows_1ms": int(big.sum()),
                    "flop_fit": inv[0], "fp32_flop_fit": inv[1], "masked_flop_fit": inv[2], "bw_fit": inv[3],
                    "exp_fit": inv[4], "dropout_fit": inv[5], "overhead_ms": round(coef[nt], 3),
                    "fit_median_err_1ms": round(float(np.median(fitted[big])), 3) if big.any() else None,
                    "model_median_err_1ms": round(float(np.median(now[big])), 3) if big.any() else None})
    return pd.DataFrame(out)


def factors_source(table: pd.DataFrame) -> str:
    """The FIT_FACTORS dict literal for estimator/call/timing.py."""
    lines = [f'    ("{r.backend}", {r.grad}): ({r.flop_fit}, {r.fp32_flop_fit}, {r.masked_flop_fit}, {r.bw_fit}, '
             f'{r.exp_fit}, {r.dropout_fit}, {r.overhead_ms}),'
             for r in table.sort_values(["backend", "grad"]).itertuples()]
    return "FIT_FACTORS = {\n" + "\n".join(lines) + "\n}"


# the grid the decode constants are chosen from (ms): HF's Python per layer and per model of one decode step
DECODE_LAYER_GRID = (0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)
DECODE_MODEL_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


def fit_decode(frame: pd.DataFrame) -> tuple[float, float, list[float]]:
    """(per-layer ms, per-model ms, relative errors) of step_time's decode host constants that best match the warm
    decode steps (column decode_warm_ms_per_token of validation.hf_models): the grid point with the least median
    |error| + 0.3 x worst |error|. The planner is pure Python: it is re-run with each candidate."""
    import estimator.model.step_time as step_time
    from validation.model_report import plan_row

    rows = [r for r in frame.to_dict("records") if r.get("decode_warm_ms_per_token", "") not in ("", None)]
    saved = step_time.DECODE_LAYER_PYTHON_MS, step_time.DECODE_MODEL_PYTHON_MS
    best = None
    try:
        for layer in DECODE_LAYER_GRID:
            for model in DECODE_MODEL_GRID:
                step_time.DECODE_LAYER_PYTHON_MS, step_time.DECODE_MODEL_PYTHON_MS = layer, model
                errs = [plan_row(r).decode_time_ms_per_token / float(r["decode_warm_ms_per_token"]) - 1 for r in rows]
                score = float(np.median(np.abs(errs))) + 0.3 * float(np.max(np.abs(errs)))
                if best is None or score < best[0]:
                    best = (score, layer, model, [round(e, 3) for e in errs])
    finally:
        step_time.DECODE_LAYER_PYTHON_MS, step_time.DECODE_MODEL_PYTHON_MS = saved
    return best[1], best[2], best[3]


if __name__ == "__main__" and sys.argv[1:2] == ["--decode"]:
    layer, model, errs = fit_decode(pd.read_csv(sys.argv[2], dtype=str, keep_default_na=False))
    print(f"DECODE_LAYER_PYTHON_MS = {layer}\nDECODE_MODEL_PYTHON_MS = {model}\nrelative errors {errs}")
elif __name__ == "__main__":
    paths = sys.argv[1:] or ["validation/data/h200_calibration.csv", "validation/data/h200_heldout.csv"]
    table = fit([pd.read_csv(p, dtype=str, keep_default_na=False) for p in paths])
    print(table.to_string(index=False))
    print(factors_source(table))
