"""Fit the time model (estimator/call/timing.py: FIT_FACTORS) from measured rows.

`python -m validation.fit_time validation/data/h200_calibration.csv validation/data/h200_heldout.csv
validation/data/h200_heldout2.csv validation/data/h200_heldout3.csv validation/data/h200_heldout4.csv
validation/data/h200_heldout5.csv` prints, per backend and mode, the fit factors of `timing.time_terms`' GPU terms
(flop_fit 16-bit, fp32_flop_fit, masked_flop_fit, bw_fit, exp_fit, dropout_fit, gemm_fit, wide_flop_fit), the host
ms per launched kernel, the ms per dQ lock step and overhead_ms, from a weighted least-squares fit of relative
error of time = max(Σ a_k·term_k, h·kernels, s·dq_steps, softmax) + c (`timing.combine`; rows >= 1 ms weigh 1,
shorter ones SHORT_WEIGHT; softmax: the exp term of `timing.OVERLAPPED_SOFTMAX` groups at a rate chosen from
SOFTMAX_RATE_GRID, alternating with the other terms' fit on the rows it does not bound). The max is fitted by
alternating regimes: each row is assigned to the branch its current prediction says is longest, all branches'
linear models are refitted together, until the assignment is stable. It prints the median error of the fit and of
the model now in the estimator on rows >= 1 ms, then the FIT_FACTORS dict to paste
into timing.py. A coefficient that comes out negative is dropped (its term refitted without it: fit factor 1000,
i.e. the term is ~free); a term no row of a group has (fp32 on flash/cuDNN, masks on math/eager) takes another
term's factor. Pure pandas + numpy: runs without torch.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from estimator.call import registry
from estimator.call.attention import estimate_columns
from estimator.call.dq_chain import dq_lock_steps
from estimator.call.flops import executed_flops
from estimator.call.table import calls_from_frame
from estimator.call.timing import EXP_TERM, MASK_KERNEL_APART, combine, host_kernels, overlapped_softmax, time_terms
from estimator.hardware import get_gpu

SHORT_WEIGHT = 0.25  # weight of rows under 1 ms (overhead-dominated) relative to rows >= 1 ms
MIN_OVERHEAD_MS = 0.02


def _solve(design, weights, lower=None, pinned=None):
    """Least squares of weighted relative error, columns with a negative coefficient dropped one at a time; a column
    whose coefficient comes out below its `lower` bound (> 0) is held at that bound and the rest refitted; a column
    with a `pinned` value (not NaN) is held at it from the start."""
    lower = np.zeros(design.shape[1]) if lower is None else np.asarray(lower, dtype=np.float64)
    pinned = np.full(design.shape[1], np.nan) if pinned is None else np.asarray(pinned, dtype=np.float64)
    keep = list(np.isnan(pinned))
    fixed = np.where(np.isnan(pinned), 0.0, pinned)
    while True:
        cols = [i for i, k in enumerate(keep) if k]
        a = design[:, cols] * weights[:, None]
        target = weights * (1.0 - design @ fixed)
        coef = np.linalg.lstsq(a, target, rcond=None)[0]
        full = fixed.copy()
        full[cols] = coef
        low = [cols[i] for i in range(len(cols)) if lower[cols[i]] > 0 and coef[i] < lower[cols[i]]]
        if low:
            j = min(low, key=lambda i: full[i] / lower[i])
            fixed[j], keep[j] = lower[j], False
            continue
        neg = [cols[i] for i in range(len(cols)) if coef[i] < 0]
        if not neg:
            return full
        keep[min(neg, key=lambda i: full[i])] = False


def _solve_regimes(terms, branches, meas, w, iterations: int = 30, lower_terms=None, pinned_terms=None):
    """Coefficients (a_terms..., h_branches..., c) of time = max(Σ a·terms, h_1·x_1, h_2·x_2, ...) + c (the
    branches x: kernel launches, dQ lock steps), least squares of weighted relative error, numpy only: start from
    the sum (every branch added), then assign each row to the regime that its current prediction says is the
    longest and refit all regimes' linear models together, until the assignment stops changing. lower_terms: the
    least coefficient of each term (0: none); pinned_terms: a coefficient held (NaN: fitted)."""
    nt, nb = terms.shape[1], branches.shape[1]
    lower = np.concatenate([np.zeros(nt) if lower_terms is None else lower_terms, np.zeros(nb + 1)])
    pinned = np.concatenate([np.full(nt, np.nan) if pinned_terms is None else pinned_terms, np.full(nb + 1, np.nan)])
    ones = np.ones((len(meas), 1))
    designs = [np.concatenate([terms, np.zeros_like(branches), ones], axis=1)]
    for j in range(nb):
        only = np.zeros_like(branches)
        only[:, j] = branches[:, j]
        designs.append(np.concatenate([np.zeros_like(terms), only, ones], axis=1))
    coef = _solve(np.concatenate([terms, branches, ones], axis=1) / meas[:, None], w, lower, pinned)
    regime = None
    for _ in range(iterations):
        parts = np.column_stack([terms @ coef[:nt]] + [branches[:, j] * coef[nt + j] for j in range(nb)])
        new = np.argmax(parts, axis=1)
        if regime is not None and np.array_equal(new, regime):
            break
        regime = new
        design = np.choose(regime[:, None], designs) / meas[:, None]
        coef = _solve(design, w, lower, pinned)
    return coef


# the softmax pipeline's rate (OVERLAPPED_SOFTMAX groups), as a share of the nominal exp rate: chosen from this grid
SOFTMAX_RATE_GRID = tuple(round(0.2 + 0.01 * i, 2) for i in range(81))


def _fit_group(t, x, m, w, used, has, nt, nb, pinned, lower):
    """The coefficients of one (backend, grad) group: the terms' a, ms per kernel and per dQ lock step, the softmax
    branch (0 here: `fit` sets it), overhead ms. pinned: per term, a coefficient held (NaN: fitted)."""
    coef = np.zeros(nt + nb + 1)
    sub = _solve_regimes(t[:, used], x[:, has], m, w, lower_terms=lower[used], pinned_terms=pinned[used])
    coef[np.flatnonzero(used)] = sub[:used.sum()]
    coef[nt + has] = sub[used.sum():-1]
    coef[-1] = max(sub[-1], MIN_OVERHEAD_MS)
    for j in (0, 1, 2, 7, 8):  # a term no row of the group has (fp32 on flash, masks on math) takes another's
        if not used[j]:
            coef[j] = coef[0 if j in (7, 8) and used[0] else 1 if j != 1 and used[1] else 0] \
                if used[0] or used[1] else 1.0
    return coef


def _predict(t, x, coef, nt, with_softmax=True):
    return combine(t @ coef[:nt], x[:, 0] * coef[nt], x[:, 1] * coef[nt + 1], coef[-1],
                   x[:, 2] * coef[nt + 2] if with_softmax else 0.0)


def fit(frames: list[pd.DataFrame], gpu_name: str = "h200") -> pd.DataFrame:
    gpu = get_gpu(gpu_name)
    d = pd.concat(frames, ignore_index=True)
    d = d[(d.status == "ok") & (pd.to_numeric(d.measured_time_ms, errors="coerce") > 0)]
    d = d[d.backend != "flex"].reset_index(drop=True)  # flex is priced by estimator/call/flex_time.py
    c, backend, _ = calls_from_frame(d)
    cols = estimate_columns(c, backend, gpu)
    sel = cols["selected_backend"]
    terms = time_terms(c, sel, executed_flops(c, sel), gpu)
    # a softmax beside the MMAs (timing.OVERLAPPED_SOFTMAX) is a branch of the max, not a term of the sum
    group, branch = overlapped_softmax(c, sel)
    softmax = np.where(branch, terms[:, EXP_TERM], 0.0)
    terms[:, EXP_TERM] = np.where(group, 0.0, terms[:, EXP_TERM])
    branches = np.column_stack([host_kernels(c, sel) * np.ones(len(d)), dq_lock_steps(c, sel, gpu.sm_count), softmax])
    meas = pd.to_numeric(d.measured_time_ms).to_numpy()
    out = []
    for (b, g), idx in pd.DataFrame({"b": sel, "g": c.grad}).groupby(["b", "g"]).groups.items():
        idx = np.asarray(idx)
        t, x, m = terms[idx], branches[idx], meas[idx]
        w = np.where(m >= 1.0, 1.0, SHORT_WEIGHT)
        used = np.abs(t).sum(axis=0) > 0
        nt = terms.shape[1]
        nb = x.shape[1]
        has = np.flatnonzero(x[:, :2].any(axis=0))
        soft = x[:, 2]
        pinned = np.where(CHAIN_PINNED, 1.0, np.nan) if b in registry.OP_CHAIN else np.full(nt, np.nan)
        lower = compute_lower(b)
        coef = _fit_group(t, x, m, w, used, has, nt, nb, pinned, lower)
        for _ in range(4 if soft.any() else 0):  # alternate: the softmax rate, then the other terms on unbound rows
            rest = _predict(t, x, coef, nt, with_softmax=False)
            score = [(np.sum(w * (np.maximum(rest, soft / r + coef[-1]) / m - 1) ** 2), r) for r in SOFTMAX_RATE_GRID]
            rate = min(score)[1]
            bound = soft / rate + coef[-1] > rest
            fit_rows = ~bound if (~bound).sum() > 2 * used.sum() else np.ones(len(idx), dtype=bool)
            coef = _fit_group(t[fit_rows], x[fit_rows], m[fit_rows], w[fit_rows], used, has, nt, nb, pinned, lower)
            coef[nt + 2] = 1 / rate
        pred = _predict(t, x, coef, nt)
        big = m >= 1.0
        fitted = np.abs(pred - m) / m
        now = np.abs(cols["time_ms"][idx] - m) / m
        inv = [round(1 / v, 3) if v > 1e-3 else 1000.0 for v in coef[:nt]]
        if x[:, 2].any():  # the overlapped softmax's rate is its branch's coefficient
            inv[EXP_TERM] = round(1 / coef[nt + 2], 3) if coef[nt + 2] > 1e-3 else 1000.0
        out.append({"backend": b, "grad": bool(g), "rows": len(idx), "rows_1ms": int(big.sum()),
                    **dict(zip(FACTOR_NAMES, inv, strict=True)), "host_ms_per_kernel": round(coef[nt], 4),
                    "ms_per_dq_step": round(coef[nt + 1], 5), "overhead_ms": round(coef[-1], 3),
                    "fit_median_err_1ms": round(float(np.median(fitted[big])), 3) if big.any() else None,
                    "model_median_err_1ms": round(float(np.median(now[big])), 3) if big.any() else None})
    return pd.DataFrame(out)


FACTOR_NAMES = (
    "flop_fit", "fp32_flop_fit", "masked_flop_fit", "bw_fit", "exp_fit", "dropout_fit", "gemm_fit", "wide_flop_fit",
    "short_query_fit", "power_cap_fit")

# a tensor-core compute term (16-bit, fp32, masked, wide) runs at most at its peak:
# its fit factor is held <= 1 (coefficient >= 1). The efficient kernel's masked term is the bias added on top of its
# unmasked branch (estimator/call/timing.py time_terms), not a compute of its own: no bound there (`compute_lower`).
# Unbounded, the efficient forward's compute came out at 2.15x
# the 16-bit peak, its softmax (exp) term carrying the time instead: the two are collinear where every such fit row
# is head_dim 128. The bound makes the split physical; it does not identify it: held-out set 7's head_dim-32
# efficient forward (random31-0060) is priced +54% before and +47% after it.
# math's and eager's GEMM, elementwise and dropout terms are priced kernel by kernel at the shares of their
# rooflines and of HBM bandwidth that the kernel probe measured (estimator/call/op_chain.py GEMM_ROOFLINE_SHARE,
# KERNEL_CLASS_BW_SHARE): held at 1, not fitted. Fitted per call, GEMMs and elementwise traded against each other
# (math's backward: GEMMs 2.35x faster, elementwise 1.76x slower than their kernels ran), and held-out sets 6-8
# came out worse: 10.1% against 9.1% median |error| on their 212 calls >= 1 ms (set CHAIN_PINNED all False, refit
# with the module docstring's command, paste, and `python -m validation report` each set)
CHAIN_PINNED = np.array([n in ("bw_fit", "dropout_fit", "gemm_fit") for n in FACTOR_NAMES])
COMPUTE_LOWER = np.array([1.0 if n in ("flop_fit", "fp32_flop_fit", "masked_flop_fit", "wide_flop_fit") else 0.0
                          for n in FACTOR_NAMES])


def compute_lower(backend: str) -> np.ndarray:
    """COMPUTE_LOWER for one backend's group: the masked term unbounded where it is an addition to the unmasked
    compute (every backend outside timing.MASK_KERNEL_APART)."""
    lower = COMPUTE_LOWER.copy()
    if backend not in MASK_KERNEL_APART:
        lower[FACTOR_NAMES.index("masked_flop_fit")] = 0.0
    return lower


def factor_tuples(table: pd.DataFrame) -> dict:
    """{(backend, grad): FIT_FACTORS tuple} of a fit table."""
    return {(r["backend"], bool(r["grad"])): tuple(r[n] for n in FACTOR_NAMES) + (
                r["host_ms_per_kernel"], r["ms_per_dq_step"], r["overhead_ms"])
            for r in table.to_dict("records")}


def factors_source(table: pd.DataFrame) -> str:
    """The FIT_FACTORS dict literal for estimator/call/timing.py."""
    lines = [f'    ("{b}", {g}): ({", ".join(str(x) for x in f)}),'
             for (b, g), f in sorted(factor_tuples(table).items())]
    return "FIT_FACTORS = {\n" + "\n".join(lines) + "\n}"


# the grid the decode constants are chosen from (ms): host cost per launched kernel, HF's Python per model step
DECODE_KERNEL_GRID = tuple(round(0.010 + 0.001 * i, 3) for i in range(21))  # 10-30 us
DECODE_MODEL_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


def decode_rows(frame: pd.DataFrame) -> list[dict]:
    """Warm decode steps as planner rows: validation.model.hf_models rows with decode_warm_ms_per_token, or the
    `:decode` cases of validation.model.hf_profile (one row per case: batch 1, the step's median wall time)."""
    if "kernel" in frame.columns:  # an hf_profile file
        out = []
        for _, g in frame[frame["mode"] == "decode"].groupby("case", sort=False):
            r = g.iloc[0]
            out.append(dict(family=r["family"], layers=str(r["layers"]), attn_implementation=r["attn_implementation"],
                            mode="prefill", precision="bf16-true", optimizer="adamw", checkpointing="none",
                            seq_len=str(r["seq_len"]), batch="1", decode_tokens="16", overrides="", no_reset="0",
                            status="ok", decode_warm_ms_per_token=str(r["wall_ms"])))
        return out
    return [r for r in frame.to_dict("records") if r.get("decode_warm_ms_per_token", "") not in ("", None)]


def fit_decode(frames: list[pd.DataFrame]) -> tuple[float, float, list[float]]:
    """(host ms per kernel, per-model ms, relative errors) of decode_time's decode host constants that best match the
    warm decode steps (`decode_rows`): the grid point with the least mean squared log(planned / measured) (the
    same host-bound step measured in two processes differs by up to 1.8x, so no single row may steer the fit). The
    planner is pure Python: it is re-run with each candidate."""
    import estimator.model.decode_time as decode_time
    from validation.model.model_report import plan_row

    rows = [r for f in frames for r in decode_rows(f)]
    saved = decode_time.DECODE_KERNEL_HOST_MS, decode_time.DECODE_MODEL_PYTHON_MS
    best = None
    try:
        for per_kernel in DECODE_KERNEL_GRID:
            for model in DECODE_MODEL_GRID:
                decode_time.DECODE_KERNEL_HOST_MS, decode_time.DECODE_MODEL_PYTHON_MS = per_kernel, model
                errs = [plan_row(r).decode_steady_ms_per_token / float(r["decode_warm_ms_per_token"]) - 1
                        for r in rows]
                score = float(np.mean(np.log1p(errs) ** 2))
                if best is None or score < best[0]:
                    best = (score, per_kernel, model, [round(e, 3) for e in errs])
    finally:
        decode_time.DECODE_KERNEL_HOST_MS, decode_time.DECODE_MODEL_PYTHON_MS = saved
    return best[1], best[2], best[3]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.fit_time", description=__doc__.splitlines()[0])
    parser.add_argument("--decode", action="store_true",
                        help="fit the decode host constants from whole-model rows instead of the per-backend factors")
    parser.add_argument("csv", nargs="*", help="measured CSVs (default: the six H200 attention-call sets)")
    args = parser.parse_args(argv)
    if args.decode:
        per_kernel, model, errs = fit_decode([pd.read_csv(p, dtype=str, keep_default_na=False) for p in args.csv])
        print(f"DECODE_KERNEL_HOST_MS = {per_kernel}\nDECODE_MODEL_PYTHON_MS = {model}\nrelative errors {errs}")
        return 0
    paths = args.csv or [f"validation/data/h200_{name}.csv" for name in (
        "calibration", "heldout", "heldout2", "heldout3", "heldout4", "heldout5")]
    table = fit([pd.read_csv(p, dtype=str, keep_default_na=False) for p in paths])
    print(table.to_string(index=False))
    print(factors_source(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
