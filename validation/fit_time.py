"""Fit the time model (estimator/call/timing.py: FIT_FACTORS) from measured rows.

`python -m validation.fit_time validation/data/h200_calibration.csv validation/data/h200_heldout.csv`
prints, per backend and mode, flop_fit, bw_fit and overhead_ms from a least-squares fit of relative
error (time = a·ideal_compute + b·ideal_memory + c), with the median and 90th-percentile error of the
fit and of the model now in the estimator. Pure pandas + numpy: runs without torch.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from estimator.call.attention import estimate_columns
from estimator.call.flops import executed_flops
from estimator.call.table import calls_from_frame
from estimator.call.timing import hbm_bytes
from estimator.hardware import get_gpu


def fit(frames: list[pd.DataFrame], gpu_name: str = "h200") -> pd.DataFrame:
    gpu = get_gpu(gpu_name)
    d = pd.concat(frames, ignore_index=True)
    d = d[(d.status == "ok") & (pd.to_numeric(d.measured_time_ms, errors="coerce") > 0)].reset_index(drop=True)
    c, backend, _ = calls_from_frame(d)
    cols = estimate_columns(c, backend, gpu)
    sel = cols["selected_backend"]
    ex = executed_flops(c, sel)
    peak = np.where(c.fp32 | (sel == "math"), gpu.peak_flops_per_s["float32"], gpu.peak_flops_per_s["bfloat16"])
    comp_ms = ex / peak * 1e3
    mem_ms = hbm_bytes(c, sel) / gpu.hbm_bytes_per_s * 1e3
    meas = pd.to_numeric(d.measured_time_ms).to_numpy()
    out = []
    for (b, g), idx in pd.DataFrame({"b": sel, "g": c.grad}).groupby(["b", "g"]).groups.items():
        idx = np.asarray(idx)
        design = np.stack([comp_ms[idx], mem_ms[idx], np.ones(len(idx))], axis=1) / meas[idx, None]
        coef = np.linalg.lstsq(design, np.ones(len(idx)), rcond=None)[0]
        coef = np.maximum(coef, [1e-3, 1e-3, 0.02])
        fitted = np.abs(coef[0] * comp_ms[idx] + coef[1] * mem_ms[idx] + coef[2] - meas[idx]) / meas[idx]
        now = np.abs(cols["time_ms"][idx] - meas[idx]) / meas[idx]
        out.append({"backend": b, "grad": bool(g), "rows": len(idx), "flop_fit": round(1 / coef[0], 3),
                    "bw_fit": round(1 / coef[1], 3), "overhead_ms": round(coef[2], 3),
                    "fit_median_err": round(float(np.median(fitted)), 3),
                    "fit_p90_err": round(float(np.quantile(fitted, 0.9)), 3),
                    "model_median_err": round(float(np.median(now)), 3)})
    return pd.DataFrame(out)


if __name__ == "__main__":
    paths = sys.argv[1:] or ["validation/data/h200_calibration.csv"]
    print(fit([pd.read_csv(p, dtype=str, keep_default_na=False) for p in paths]).to_string(index=False))
