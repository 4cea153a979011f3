"""The rates flex_attention's compiled Triton kernels reach on the H200, from per-kernel durations
(estimator/call/flex_time.py FWD_SHARE, BWD_SHARE, EXP_SHARE, DECODE_BLOCK_US).

    python -m validation.timing.flex_kernels [validation/data/h200_flex_probe.csv]

The probe (`python -m validation.timing.kernel_probe --triton`, validation/cases/h200_flex_probe.csv) timed every
kernel of 43 flex calls. Per call, the forward template kernel (`triton_tem_fused_*flex_attention*`), the backward
one (`*flex_attention_backward*`) and, for decoding-shaped calls, the split-KV template are set against
flex_time.kernel_work's dot FLOPs at the dtype's peak and its score elements at the exp rate (1/256 of the 16-bit
peak): time = FLOPs / (peak · share[class]) + exps / (exp rate · exp share). The exp share (one per pass) is the
grid value whose per-class median shares leave the lowest median |log error|; each class's share is then the
median over its kernels. The decoding kernel's time per 64-key block is the median per (precision, BLOCK_M,
rounded head_dim). Pure pandas + numpy.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

EXP_GRID = np.round(np.arange(0.3, 1.51, 0.02), 2)


def kernels(probe: pd.DataFrame, cases: pd.DataFrame, gpu_name: str = "h200") -> pd.DataFrame:
    """One row per call with its template kernels' microseconds (fwd, bwd, decode) beside the model's work."""
    from estimator.call import flex_time
    from estimator.call.table import calls_from_frame
    from estimator.hardware import get_gpu

    gpu = get_gpu(gpu_name)
    k = probe[probe["error"].isna() & probe["kernel"].str.startswith("triton_tem")].copy()
    k["duration_us"] = pd.to_numeric(k["duration_us"])
    k["pass"] = np.where(k["kernel"].str.contains("backward"), "bwd", "fwd")
    us = k.pivot_table(index="id", columns="pass", values="duration_us", aggfunc="sum")
    frame = cases[cases["id"].isin(us.index)].reset_index(drop=True)
    c, _, _ = calls_from_frame(frame)
    n = len(frame)
    each = lambda x: np.broadcast_to(x, (n,))  # noqa: E731
    scores, fwd, bwd = flex_time.kernel_work(c)
    peak = np.where(c.fp32, gpu.peak_flops_per_s["float32"], gpu.peak_flops_per_s["bfloat16"]) / 1e6
    exp_rate = gpu.peak_flops_per_s["bfloat16"] / 256 / 1e6
    block_m, _, blocks, ctas = flex_time.decode_geometry(c, gpu.sm_count)
    blocks = blocks * np.maximum(1.0, ctas / (flex_time.DECODE_CTAS_PER_SM * gpu.sm_count))
    out = pd.DataFrame({
        "id": frame["id"], "precision": np.where(each(c.fp32), "fp32", "16-bit"),
        "decodes": each(flex_time.decodes(c)), "fwd_class": [flex_time.FWD_CLASSES[i] for i in
                                                             each(flex_time.forward_class(c))],
        "bwd_class": [flex_time.BWD_CLASSES[i] for i in each(flex_time.backward_class(c))],
        "fwd_peak_us": each(fwd / peak * flex_time.forward_schedule(c, gpu.sm_count)),
        "bwd_peak_us": each(bwd / peak), "exp_us": each(scores / exp_rate),
        "fwd_exp_us": each(scores / exp_rate * flex_time.forward_schedule(c, gpu.sm_count)),
        "block_m": each(block_m), "head_dim_rounded": each(flex_time.rounded_head_dim(c.D)),
        "blocks": each(blocks)})
    return out.join(us, on="id")


def _shares(t: pd.DataFrame, measured: str, peak_us: str, cls: str, exps: float, x: float,
            exp_us: str) -> pd.Series:
    rest = t[measured] - exps * t[exp_us] / x
    return (t[peak_us] / rest.where(rest > 0)).groupby(t[cls]).median()


def fit_pass(t: pd.DataFrame, measured: str, peak_us: str, cls: str, exps: float,
             exp_us: str) -> tuple[float, pd.Series]:
    """(exp share, share per class) of one pass: `exps` exp passes per score element."""
    t = t[t[measured].notna()]
    best = None
    for x in EXP_GRID:
        share = _shares(t, measured, peak_us, cls, exps, x, exp_us)
        model = t[peak_us] / t[cls].map(share) + exps * t[exp_us] / x
        if share.isna().any() or (share > 1).any():  # the exps alone outlast a kernel, or a dot beats its peak
            continue
        err = float(np.median(np.abs(np.log(model / t[measured]))))
        if best is None or err < best[0]:
            best = (err, float(x), share)
    return best[1], best[2].round(4)


def decode_block_us(t: pd.DataFrame) -> pd.Series:
    """Median microseconds per 64-key block of the decoding kernel per (precision, BLOCK_M, rounded head_dim)."""
    d = t[t["decodes"] & t["fwd"].notna()]
    return (d["fwd"] / d["blocks"]).groupby([d["precision"], d["block_m"], d["head_dim_rounded"]]).median().round(1)


OVERHEAD_GRID = np.round(np.arange(0.0, 1.5001, 0.01), 2)
CALL_SETS = ("validation/data/h200_flex_sweep.csv", "validation/data/h200_flex_calls.csv")


def call_times(probe: pd.DataFrame, cases: pd.DataFrame, runs=CALL_SETS) -> pd.DataFrame:
    """The fit's flex calls with their measured ms: the probe's (CUDA-event median) and those of `runs`
    (`python -m validation run` outputs)."""
    ms = probe[probe["error"].isna()].groupby("id")["call_ms"].first().astype(float)
    rows = [cases.set_index("id").join(ms.rename("ms"), how="inner").reset_index()]
    for path in runs:
        run = pd.read_csv(path, dtype=str, keep_default_na=False)
        run = run[(run["backend"] == "flex") & (run["status"] == "ok")].copy()
        run["ms"] = pd.to_numeric(run["measured_time_ms"])
        rows.append(run[list(cases.columns) + ["ms"]])
    return pd.concat(rows, ignore_index=True)


def fit_overhead(calls: pd.DataFrame, gpu_name: str = "h200") -> tuple[dict, float]:
    """({(grad, own BlockMask): overhead ms}, median |error|): per group the grid value whose model
    (flex_time.gpu_ms, from the fitted shares, plus the overhead) leaves the lowest median |relative error|."""
    from estimator.call import flex_time
    from estimator.call.table import calls_from_frame
    from estimator.hardware import get_gpu

    c, _, _ = calls_from_frame(calls)
    n = len(calls)
    gpu_ms = np.broadcast_to(flex_time.gpu_ms(c, get_gpu(gpu_name)), (n,))
    grad, own = np.broadcast_to(c.grad, (n,)), np.broadcast_to(flex_time.own_mask(c), (n,))
    ms = calls["ms"].to_numpy(dtype=float)
    overhead, errs = {}, []
    for key in flex_time.OVERHEAD_MS:
        sel = (grad == key[0]) & (own == key[1])
        if not sel.any():
            continue
        scores = [np.median(np.abs((gpu_ms[sel] + o) / ms[sel] - 1)) for o in OVERHEAD_GRID]
        overhead[key] = float(OVERHEAD_GRID[int(np.argmin(scores))])
        errs.append(np.abs((gpu_ms[sel] + overhead[key]) / ms[sel] - 1))
    return overhead, float(np.median(np.concatenate(errs)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.timing.flex_kernels",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("probe", nargs="?", default="validation/data/h200_flex_probe.csv")
    parser.add_argument("--cases", default="validation/cases/h200_flex_probe.csv")
    args = parser.parse_args(argv)
    from validation.timing.kernel_classes import load

    probe, cases = load(args.probe, args.cases)
    t = kernels(probe, cases)
    prefill = t[~t["decodes"]]
    fx, fwd = fit_pass(prefill, "fwd", "fwd_peak_us", "fwd_class", 1.0, "fwd_exp_us")
    bx, bwd = fit_pass(prefill, "bwd", "bwd_peak_us", "bwd_class", 2.0, "exp_us")
    print(f"EXP_SHARE = {{'fwd': {fx}, 'bwd': {bx}}}")
    print("FWD_SHARE = {" + ", ".join(f'"{k}": {v}' for k, v in fwd.items()) + "}")
    print("BWD_SHARE = {" + ", ".join(f'"{k}": {v}' for k, v in bwd.items()) + "}")
    blocks = decode_block_us(t)
    print("DECODE_BLOCK_US = {" + ", ".join(f"({p == 'fp32'}, {m}, {d}): {v}" for (p, m, d), v in blocks.items())
          + "}")
    overhead, err = fit_overhead(call_times(probe, cases))
    print("OVERHEAD_MS = {" + ", ".join(f"{k}: {v}" for k, v in overhead.items()) + "}"
          f"  # median |error| {err:.3f} on the fit's calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
