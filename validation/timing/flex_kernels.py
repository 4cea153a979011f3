"""The rates flex_attention's compiled Triton kernels reach on the H200, from per-kernel durations
(estimator/call/flex_time.py FWD_SHARE, BWD_SHARE, EXP_SHARE, DECODE_*, OVERHEAD_MS).

    python -m validation.timing.flex_kernels

The two probes (`python -m validation.timing.kernel_probe --triton` on validation/cases/h200_flex_probe.csv and
h200_flex_probe2.csv) timed every kernel of 65 flex calls. Per call, the forward template kernel
(`triton_tem_fused_*flex_attention*`), the backward one (`*flex_attention_backward*`) and, for decoding-shaped
calls, the split-KV template are set against
flex_time.kernel_work's dot FLOPs at the dtype's peak and its score elements at the exp rate (1/256 of the 16-bit
peak): time = FLOPs / (peak · share[class]) + exps / (exp rate · exp share). The exp share (one per pass) is the
grid value whose per-class median shares leave the lowest median |log error|; each class's share is then the
median over its kernels of MIN_US or longer (shorter ones are launch latency). The decoding kernel's time per
64-key block against its tile's registers
(flex_time.decode_tile_bytes): a least-squares line a + b·KB through the unspilled blocks and the median us per KB
of the spilled ones, per precision, with flex_time.DECODE_SPILLS_ABOVE_KB between them (the cells either side
printed). The compiled call's host floor and overhead per (backward, own BlockMask), time = max(GPU, host) +
overhead: the grid pair that leaves the lowest median |error| of the call times (CUDA events) of the probes and of
the flex call sets (CALL_SETS) against the model. Pure pandas + numpy.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

MIN_US = 50.0  # a template kernel shorter than this is latency, not its class's rate
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
    scores, fwd, bwd, parts = flex_time.kernel_work(c)
    fwd_sched = flex_time.forward_schedule(c, gpu.sm_count)
    bwd_sched = flex_time.backward_schedule(c, gpu.sm_count, parts)
    peak = np.where(c.fp32, gpu.peak_flops_per_s["float32"], gpu.peak_flops_per_s["bfloat16"]) / 1e6
    exp_rate = gpu.peak_flops_per_s["bfloat16"] / 256 / 1e6
    block_m, _, blocks, ctas = flex_time.decode_geometry(c, gpu.sm_count)
    blocks = blocks * np.maximum(1.0, ctas / (flex_time.DECODE_CTAS_PER_SM * gpu.sm_count))
    out = pd.DataFrame({
        "id": frame["id"], "precision": np.where(each(c.fp32), "fp32", "16-bit"),
        "decodes": each(flex_time.decodes(c)), "fwd_class": [flex_time.FWD_CLASSES[i] for i in
                                                             each(flex_time.forward_class(c))],
        "bwd_class": [flex_time.BWD_CLASSES[i] for i in each(flex_time.backward_class(c))],
        "fwd_peak_us": each(fwd / peak * fwd_sched), "bwd_peak_us": each(bwd / peak * bwd_sched),
        "exp_us": each(scores / exp_rate),
        "bwd_exp_us": each(scores / exp_rate * bwd_sched), "fwd_exp_us": each(scores / exp_rate * fwd_sched),
        "block_m": each(block_m), "head_dim_rounded": each(flex_time.rounded_head_dim(c.D)),
        "blocks": each(blocks), "tile_kb": each(flex_time.decode_tile_bytes(c, block_m) / 1024.0)})
    return out.join(us, on="id")


def _shares(t: pd.DataFrame, measured: str, peak_us: str, cls: str, exps: float, x: float,
            exp_us: str) -> pd.Series:
    rest = t[measured] - exps * t[exp_us] / x
    return (t[peak_us] / rest.where(rest > 0)).groupby(t[cls]).median()


def _model(t, peak_us, cls, exps, exp_us, share, x):
    """A pass's modelled us: its dots at the class's share of the peak plus its exps at x of the exp rate."""
    return t[peak_us] / t[cls].map(share) + exps * t[exp_us] / x


def fit_pass(t: pd.DataFrame, measured: str, peak_us: str, cls: str, exps: float,
             exp_us: str) -> tuple[float, pd.Series]:
    """(exp share, share per class) of one pass: `exps` exp passes per score element."""
    t = t[t[measured].notna() & (t[measured] >= MIN_US)]
    best = None
    for x in EXP_GRID:
        share = _shares(t, measured, peak_us, cls, exps, x, exp_us)
        model = _model(t, peak_us, cls, exps, exp_us, share, x)
        if share.isna().any() or (share > 1).any():  # the exps alone outlast a kernel, or a dot beats its peak
            continue
        err = float(np.median(np.abs(np.log(model / t[measured]))))
        if best is None or err < best[0]:
            best = (err, float(x), share)
    return best[1], best[2].round(4)


def kernel_errors(t: pd.DataFrame, measured: str, peak_us: str, cls: str, exps: float, exp_us: str,
                  share: pd.Series, x: float) -> pd.Series:
    """(model / measured - 1) of one pass's kernels of MIN_US or longer at the fitted shares."""
    t = t[t[measured].notna() & (t[measured] >= MIN_US)]
    return _model(t, peak_us, cls, exps, exp_us, share, x) / t[measured] - 1


def decode_fit(t: pd.DataFrame) -> tuple[dict, dict, pd.DataFrame]:
    """({fp32: (a, b)}, {fp32: us per KB spilled}, the cells: precision, tile KB, us per block, spilled)."""
    from estimator.call import flex_time

    d = t[t["decodes"] & t["fwd"].notna()].copy()
    d["us_per_block"] = d["fwd"] / d["blocks"]
    d["fp32"] = d["precision"] == "fp32"
    d["spilled"] = d["tile_kb"] > d["fp32"].map(flex_time.DECODE_SPILLS_ABOVE_KB)
    base, spill = {}, {}
    for fp32, g in d.groupby("fp32"):
        fits = g[~g["spilled"]]
        b, a = np.polyfit(fits["tile_kb"], fits["us_per_block"], 1)
        base[bool(fp32)] = (round(float(a), 2), round(float(b), 3))
        spill[bool(fp32)] = round(float((g["us_per_block"] / g["tile_kb"])[g["spilled"]].median()), 2)
    cells = d[["precision", "block_m", "head_dim_rounded", "tile_kb", "us_per_block", "spilled"]]
    return base, spill, cells.sort_values(["precision", "tile_kb"]).round(1)


HOST_GRID = np.round(np.arange(0.0, 1.5001, 0.02), 2)
OVERHEAD_GRID = np.round(np.arange(0.0, 0.6001, 0.01), 2)
PROBES = (("validation/data/h200_flex_probe.csv", "validation/cases/h200_flex_probe.csv"),
          ("validation/data/h200_flex_probe2.csv", "validation/cases/h200_flex_probe2.csv"))
# `validation run` sets of flex calls (their dropout rows left out: flex_attention has no dropout)
CALL_SETS = ("validation/data/h200_flex_calls.csv", "validation/data/h200_flex_sweep.csv",
             "validation/data/h200_flex_heldout.csv")


def call_times(probe: pd.DataFrame, cases: pd.DataFrame) -> pd.DataFrame:
    """The probes' flex calls with their measured ms (the CUDA-event median each probe row carries): the same
    runs as their kernels, so the overhead is set against kernels of the same GPU and session."""
    ms = probe[probe["error"].isna()].groupby("id")["call_ms"].first().astype(float)
    return cases.set_index("id").join(ms.rename("ms"), how="inner").reset_index()


def call_set_times(paths=CALL_SETS) -> pd.DataFrame:
    """The flex calls of `validation run` outputs that ran, without dropout, with their measured ms."""
    frames = []
    for path in paths:
        d = pd.read_csv(path, dtype=str, keep_default_na=False)
        d = d[(d["backend"] == "flex") & (d["status"] == "ok") & (pd.to_numeric(d["dropout"]) == 0)]
        frames.append(d.assign(ms=pd.to_numeric(d["measured_time_ms"])))
    return pd.concat(frames, ignore_index=True)


def fit_overhead(calls: pd.DataFrame, gpu_name: str = "h200") -> tuple[dict, dict, float]:
    """({(grad, own BlockMask): host ms}, {...: overhead ms}, median |error|): per group the grid pair whose model
    (max(flex_time.gpu_ms, from the fitted shares, host) + overhead) leaves the lowest median |relative error|."""
    from estimator.call import flex_time
    from estimator.call.table import calls_from_frame
    from estimator.hardware import get_gpu

    calls = calls.reset_index(drop=True)
    c, _, _ = calls_from_frame(calls)
    n = len(calls)
    gpu_ms = np.broadcast_to(flex_time.gpu_ms(c, get_gpu(gpu_name)), (n,))
    grad, own = np.broadcast_to(c.grad, (n,)), np.broadcast_to(flex_time.own_mask(c), (n,))
    ms = calls["ms"].to_numpy(dtype=float)
    host, overhead, errs = {}, {}, []
    for key in flex_time.OVERHEAD_MS:
        sel = (grad == key[0]) & (own == key[1])
        if not sel.any():
            continue
        g, m = gpu_ms[sel], ms[sel]
        floor = np.maximum(g[None, :], HOST_GRID[:, None])  # (host, call)
        scores = np.median(np.abs((floor[:, None, :] + OVERHEAD_GRID[None, :, None]) / m - 1), axis=-1)
        i, j = np.unravel_index(int(np.argmin(scores)), scores.shape)
        host[key], overhead[key] = float(HOST_GRID[i]), float(OVERHEAD_GRID[j])
        errs.append(np.abs((np.maximum(g, host[key]) + overhead[key]) / m - 1))
    return host, overhead, float(np.median(np.concatenate(errs)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.timing.flex_kernels",
                                     description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    from validation.timing.kernel_classes import load

    loaded = [load(p, c) for p, c in PROBES]
    probe = pd.concat([p for p, _ in loaded], ignore_index=True)
    cases = pd.concat([c for _, c in loaded], ignore_index=True)
    t = kernels(probe, cases)
    prefill = t[~t["decodes"]]
    fx, fwd = fit_pass(prefill, "fwd", "fwd_peak_us", "fwd_class", 1.0, "fwd_exp_us")
    bx, bwd = fit_pass(t, "bwd", "bwd_peak_us", "bwd_class", 2.0, "bwd_exp_us")
    fwd_err = kernel_errors(prefill, "fwd", "fwd_peak_us", "fwd_class", 1.0, "fwd_exp_us", fwd, fx)
    bwd_err = kernel_errors(t, "bwd", "bwd_peak_us", "bwd_class", 2.0, "bwd_exp_us", bwd, bx)
    print(f"EXP_SHARE = {{'fwd': {fx}, 'bwd': {bx}}}  # kernels >= {MIN_US:.0f} us: median |error| forward "
          f"{fwd_err.abs().median():.3f} ({len(fwd_err)}), backward {bwd_err.abs().median():.3f} ({len(bwd_err)})")
    print("FWD_SHARE = {" + ", ".join(f'"{k}": {v}' for k, v in fwd.items()) + "}")
    print("BWD_SHARE = {" + ", ".join(f'"{k}": {v}' for k, v in bwd.items()) + "}")
    base, spill, cells = decode_fit(t)
    print(cells.to_string(index=False))
    print(f"DECODE_BASE_US = {base}\nDECODE_SPILL_US_PER_KB = {spill}")
    from estimator.call import flex_time

    # the overhead is fitted against the GPU time these constants give, not the ones committed
    flex_time.EXP_SHARE.update(fwd=fx, bwd=bx)
    flex_time.FWD_SHARE.update(fwd)
    flex_time.BWD_SHARE.update(bwd)
    flex_time.DECODE_BASE_US.update(base)
    flex_time.DECODE_SPILL_US_PER_KB.update(spill)
    host, overhead, err = fit_overhead(pd.concat([call_times(probe, cases), call_set_times()], ignore_index=True))
    print("HOST_MS = {" + ", ".join(f"{k}: {v}" for k, v in host.items()) + "}")
    print("OVERHEAD_MS = {" + ", ".join(f"{k}: {v}" for k, v in overhead.items()) + "}"
          f"  # median |error| {err:.3f} on the fit's calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
