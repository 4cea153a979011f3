"""The share of HBM bandwidth each kernel family of the math and eager op chains reaches, from per-kernel durations
(estimator/call/op_chain.py KERNEL_CLASS_BW_SHARE).

    python -m validation.timing.kernel_classes [validation/data/h200_kernel_probe.csv]

The probe (validation/timing/kernel_probe.py) timed every GPU kernel of 664 math and eager calls. Each kernel is put
in its family by name, as PyTorch 2.11 names them: `vectorized_elementwise_kernel` (vec: contiguous operands),
`unrolled_elementwise_kernel<direct_copy...>` (cast: a dtype conversion copy), the other `elementwise_kernel<...>`
and `triu_tril_kernel` (strided: a broadcast or permuted operand, TensorIterator's non-vectorized path), softmax
kernels, `reduce_kernel`; the non-vectorized families (op_chain.ELEMENT_RATE_FAMILIES) apart for 16-bit elements.
Per call, the family's measured time is set against the op chain's bytes of that family at the GPU's HBM bandwidth;
the share printed is the median over calls where the family ran at least MIN_US (shorter
kernels are latency, not bandwidth). GEMMs: each GEMM kernel matched, in launch order, to its bmm of the chain, and
its roofline (estimator/call/timing.py gemm_roofline_ms) set against its time, per precision and alignment
(op_chain.gemm_class) and role (op_chain.GEMM_ROOFLINE_SHARE); the gemmSN kernels apart, as microseconds per key
(op_chain.GEMM_SN_US_PER_K).
Pure pandas + numpy.
"""

from __future__ import annotations

import argparse
import re

import numpy as np
import pandas as pd

MIN_US = 50.0  # a family's time in a call below which it is latency-bound, not priced by its bytes
GEMM_SN_MIN_US = 20.0  # a gemmSN kernel's time below which its launch, not its walk over the keys, is what is seen
SOFTMAX_NAMES = (("softmax_warp_forward", "softmax_fwd:warp"), ("cunn_SoftMaxForwardReg", "softmax_fwd:reg"),
                 ("cunn_SoftMaxForward", "softmax_fwd:block"), ("softmax_warp_backward", "softmax_bwd:warp"),
                 ("cunn_SoftMaxBackwardSmem", "softmax_bwd:smem"), ("cunn_SoftMaxBackward", "softmax_bwd:block"))


def family(name: str, S: int = 0) -> str:
    """The kernel family of a CUDA kernel name (the module docstring; S: the call's row length, which splits the
    block softmax kernels at 16384); 'gemm' or 'other' outside the bandwidth-priced families (dropout's two kernels:
    dropout_fwd, dropout_bwd)."""
    if re.search(r"nvjet|xmma_gemm|gemmSN|gemvx|gemv2|splitKreduce|cutlass", name):
        return "gemm"
    if "fused_dropout" in name:
        return "dropout_fwd"
    if "masked_scale" in name:
        return "dropout_bwd"
    for pattern, fam in SOFTMAX_NAMES:
        if pattern + "<" in name or pattern + "(" in name:
            return fam + ("_long" if fam.endswith(":block") and S > 16384 else "")
    if "reduce_kernel" in name:
        return "reduce"
    if "vectorized_elementwise_kernel" in name:
        return "vec"
    if "unrolled_elementwise_kernel" in name and "direct_copy" in name:
        return "cast"
    if "elementwise_kernel" in name and "direct_copy" in name:
        return "copy"
    if "elementwise_kernel" in name or "triu_tril" in name:
        return "broadcast"
    return "other"


def load(probe_path, cases_path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The probe's rows (all text; `error` NaN where the call ran) and its case list."""
    probe = pd.read_csv(probe_path, dtype=str, keep_default_na=False)
    probe["error"] = probe["error"].replace("", np.nan)
    return probe, pd.read_csv(cases_path, dtype=str, keep_default_na=False)


def kernel_us(probe: pd.DataFrame, cases: pd.DataFrame, prefix: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per call id: its first kernel named `prefix`* and the us of all of them, the cases that ran one)."""
    k = probe[probe["error"].isna() & probe["kernel"].str.contains(prefix)].copy()
    k["duration_us"] = pd.to_numeric(k["duration_us"])
    us = k.groupby("id").agg(kernel=("kernel", "first"), us=("duration_us", "sum"))
    return us, cases[cases["id"].isin(us.index)].reset_index(drop=True)


def measured_by_family(probe: pd.DataFrame, cases: pd.DataFrame) -> pd.DataFrame:
    """Per call id, the microseconds its kernels of each family ran."""
    k = probe[probe["error"].isna()].copy()
    rows = dict(zip(cases["id"], pd.to_numeric(cases["kv_len"]), strict=True))
    k["family"] = [family(n, rows.get(i, 0)) for n, i in zip(k["kernel"], k["id"], strict=True)]
    k["duration_us"] = pd.to_numeric(k["duration_us"])
    return k.pivot_table(index="id", columns="family", values="duration_us", aggfunc="sum", fill_value=0.0)


def modelled_by_family(cases: pd.DataFrame, gpu_name: str = "h200") -> pd.DataFrame:
    """Per case id and family, the op chain's bytes over HBM bandwidth in microseconds (a share of 1)."""
    from estimator.call import op_chain
    from estimator.call.table import calls_from_frame
    from estimator.hardware import get_gpu

    bw = get_gpu(gpu_name).hbm_bytes_per_s / 1e6
    out = {}
    for backend in ("math", "eager"):
        rows = cases[cases["backend"] == backend].reset_index(drop=True)
        if rows.empty:
            continue
        c, _, _ = calls_from_frame(rows)
        for op in op_chain.chain_ops(c, backend):
            if op.kind not in ("ew", "dropout"):
                continue
            us = np.broadcast_to(op.bytes, (len(rows),)) / bw
            keys = np.broadcast_to(op_chain.share_key(op, c), (len(rows),))
            for i, key, v in zip(rows["id"], keys, us, strict=True):
                out.setdefault(key, {}).setdefault(i, 0.0)
                out[key][i] += float(v)
    return pd.DataFrame(out).reindex(cases["id"]).fillna(0.0)


def shares(probe: pd.DataFrame, cases: pd.DataFrame) -> pd.DataFrame:
    """Per family (the element-rate families split by width: op_chain.share_key): calls used, median share of HBM
    bandwidth (modelled us at full bandwidth over measured us) and its interquartile range."""
    meas = measured_by_family(probe, cases)
    model = modelled_by_family(cases[cases["id"].isin(meas.index)])
    meas = meas.reindex(model.index).fillna(0.0)
    for key in [k for k in model.columns if k.endswith(":16-bit")]:  # a call's kernels of a family are of one width
        base = key.split(":")[0]
        narrow = model[key] > 0
        meas[key] = np.where(narrow, meas.get(base, 0.0), 0.0)
        meas[base] = np.where(narrow, 0.0, meas.get(base, 0.0))
    rows = []
    for fam in sorted(model.columns):
        m = meas.get(fam, pd.Series(0.0, index=meas.index)).reindex(model.index).fillna(0.0)
        use = (m >= MIN_US) & (model[fam] > 0)
        ratio = model.loc[use, fam] / m[use]
        rows.append({"family": fam, "calls": int(use.sum()),
                     "share": round(float(ratio.median()), 3) if use.any() else None,
                     "q25": round(float(ratio.quantile(0.25)), 3) if use.any() else None,
                     "q75": round(float(ratio.quantile(0.75)), 3) if use.any() else None})
    return pd.DataFrame(rows)


def gemm_kernels(probe: pd.DataFrame, cases: pd.DataFrame, gpu_name: str = "h200") -> pd.DataFrame:
    """One row per GEMM kernel of the probe matched to its bmm of the op chain (in launch order; calls whose GEMM
    kernel count differs from the chain's, a split-K reduction among them, are left out): id, precision, role,
    measured us, the roofline us (timing.gemm_roofline_ms), the reduction length k and whether the chain says it runs
    cuBLAS's gemmSN kernel (op_chain.runs_gemm_sn)."""
    from estimator.call import op_chain, timing
    from estimator.call.table import calls_from_frame
    from estimator.hardware import get_gpu

    gpu = get_gpu(gpu_name)
    k = probe[probe["error"].isna() & (probe["kernel"].map(family) == "gemm")]
    measured = {i: pd.to_numeric(g["duration_us"]).tolist() for i, g in k.groupby("id", sort=False)}
    rows = []
    for backend in ("math", "eager"):
        frame = cases[(cases["backend"] == backend) & cases["id"].isin(measured)].reset_index(drop=True)
        if frame.empty:
            continue
        c, _, _ = calls_from_frame(frame)
        fp32 = np.broadcast_to(np.asarray(c.fp32 | (backend == "math")), (len(frame),))
        kind = np.broadcast_to(op_chain.gemm_class(c, fp32), (len(frame),))
        ops = [op for op in op_chain.chain_ops(c, backend) if op.kind == "gemm"]
        n = len(frame)
        each = lambda x, n=n: np.broadcast_to(x, (n,))  # noqa: E731
        roof = [each(timing.gemm_roofline_ms(op, fp32, gpu) * 1e3) for op in ops]
        sn = [each(op_chain.runs_gemm_sn(op, c, fp32)) for op in ops]
        on = [each(op.kernels > 0) for op in ops]
        red = [each(op.gemm[3]) for op in ops]
        for i, cid in enumerate(frame["id"]):
            present = [j for j in range(len(ops)) if on[j][i]]
            if len(present) != len(measured[cid]):
                continue
            for j, us in zip(present, measured[cid], strict=True):
                rows.append({"id": cid, "precision": kind[i], "role": ops[j].cls,
                             "us": us, "roofline_us": float(roof[j][i]), "k": float(red[j][i]),
                             "gemm_sn": bool(sn[j][i])})
    return pd.DataFrame(rows)


def gemm_shares(kernels: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """Per (precision, role): kernels used (MIN_US or longer, gemmSN ones left out), the median share of the
    roofline they reach and its interquartile range; and the gemmSN kernels' median us per key of the reduction."""
    use = kernels[(kernels["us"] >= MIN_US) & ~kernels["gemm_sn"]]
    ratio = use["roofline_us"] / use["us"]
    table = ratio.groupby([use["precision"], use["role"]]).agg(
        kernels="size", share="median", q25=lambda r: r.quantile(0.25), q75=lambda r: r.quantile(0.75))
    sn = kernels[kernels["gemm_sn"] & (kernels["us"] >= GEMM_SN_MIN_US)]
    return table.round(3).reset_index(), round(float((sn["us"] / sn["k"]).median()), 4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.timing.kernel_classes",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("probe", nargs="?", default="validation/data/h200_kernel_probe.csv")
    parser.add_argument("--cases", default="validation/cases/h200_kernel_probe.csv")
    args = parser.parse_args(argv)
    probe, cases = load(args.probe, args.cases)
    table = shares(probe, cases)
    print(table.to_string(index=False))
    print("KERNEL_CLASS_BW_SHARE = {" + ", ".join(f'"{r.family}": {r.share}' for r in table.itertuples()) + "}")
    gemms, sn_us = gemm_shares(gemm_kernels(probe, cases))
    print(gemms.to_string(index=False))
    print("GEMM_ROOFLINE_SHARE = {" + ", ".join(
        f'"{p}": {{' + ", ".join(f'"{r.role}": {r.share}' for r in g.itertuples()) + "}"
        for p, g in gemms.groupby("precision")) + "}")
    print(f"GEMM_SN_US_PER_K = {sn_us}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
