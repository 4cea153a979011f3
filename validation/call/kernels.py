"""Kernels launched per call: the count expected for the hand-written eager attention (validation/call/eager.py),
written op by op before looking at the traces, and the table of measured counts per variant for the report."""

from __future__ import annotations

import pandas as pd

from validation.call.schema import CALL_FIELDS


def _flag(value) -> bool:
    return str(value).strip().lower() in ("1", "1.0", "true")


def variant_label(r) -> str:
    """'bf16 causal gqa' etc.: the features that change the eager kernel sequence."""
    parts = ["fp32" if r["dtype"] == "float32" else "16-bit"]
    if _flag(r["causal"]):
        parts.append("causal")
    if r["mask"] != "none":
        parts.append(f"{r['mask']}-mask")
    if int(r["kv_heads"]) != int(r["q_heads"]):
        parts.append("gqa")
    if float(r["dropout"] or 0) > 0:
        parts.append("dropout")
    return " ".join(parts)


INT32_MAX = 2**31 - 1


def launches(shape: tuple[int, ...], element_bytes: int) -> int:
    """Kernel launches of one TensorIterator op whose largest operand is a contiguous `shape` tensor:
    past 2**31 - 1 elements or bytes of offset, TensorIterator halves the outermost splittable dimension
    until every piece fits 32-bit indexing, one launch per piece (TensorIterator.cpp: can_use_32bit_indexing,
    SplitUntil32Bit; split gives size // 2 and size - size // 2)."""
    strides, acc = [], 1
    for size in reversed(shape):
        strides.insert(0, acc * element_bytes)
        acc *= size

    def count(sizes: tuple[int, ...]) -> int:
        numel = 1
        for size in sizes:
            numel *= size
        offset = 1 + sum((size - 1) * stride for size, stride in zip(sizes, strides, strict=True))
        if numel <= INT32_MAX and offset <= INT32_MAX:
            return 1
        dim = max(range(len(sizes)), key=lambda d: (sizes[d] - 1) * strides[d])
        half = sizes[dim] // 2
        return (count(sizes[:dim] + (half,) + sizes[dim + 1:])
                + count(sizes[:dim] + (sizes[dim] - half,) + sizes[dim + 1:]))

    return count(tuple(int(x) for x in shape))


def expected_eager_kernels(r) -> tuple[int, int]:
    """(CUDA kernels, device-to-device memcpys) that validation/call/eager.py launches for one call, counted
    the way protocol.ran_backend_and_kernels counts (Memcpy/Memset excluded from n_kernels).

    Written op by op before looking at the traces, then corrected where the H200 data said
    otherwise (the softmax-backward product and TensorIterator's 32-bit splits). `E(x)` is
    launches(x): 1 below 2**31 bytes. P = (B, Hq, L, S) scores, es the input element size.
      forward  GQA: repeat_interleave (expand + clone) E(KE) for k and for v · q@kᵀ 1 GEMM · ×D^-½ E(P·es)
               · causal: ones E(L·S), triu 1, memcpy, masked_fill_ E(P·es) · bool mask: ~mask E(B·L·S),
               memcpy, masked_fill_ E(P·es) · float mask: add E(P·es) · 16-bit: .float() E(P·4)
               · softmax 1 · 16-bit: .to(dtype) E(P·4) · dropout 1 (fused, 64-bit indexing) · p@v 1 GEMM
      backward p@v 2 GEMMs · dropout: masked scale E(P·es) · 16-bit: cast E(P·4) · softmax backward
               E(P·4) + 1 (CUDA first computes tmp = grad·p: SoftMax.cu softmax_backward_cuda_out; the
               CPU kernel has no tmp) · 16-bit: cast E(P·4) · causal or bool mask: memcpy + masked_fill_
               E(P·es) · ×D^-½ E(P·es) · q@kᵀ 2 GEMMs · GQA: two sums E(KE) (repeat_interleave backward)
               · no GQA: k.grad layout copy E(K) (the kᵀ GEMM's grad is transposed; AccumulateGrad clones it)
    One kernel per GEMM, except where cuBLAS picks split-K (+1 reduction kernel per split GEMM): seen only for
    single-head calls (B·Hq = 1) with few output tiles and a long reduction, e.g. p@v at D = 128, S ≥ 1024;
    not modelled (4 of the 69 held-out H200 eager rows, all with B·Hq = 1)."""
    half = r["dtype"] != "float32"
    es = 4 if not half else 2
    B, Hq, Hk = int(r["batch"]), int(r["q_heads"]), int(r["kv_heads"])
    L, S, D = int(r["q_len"]), int(r["kv_len"]), int(r.get("head_dim", 64))
    gqa = Hk != Hq
    causal, mask, dropout = _flag(r["causal"]), r["mask"], float(r["dropout"] or 0) > 0
    P = (B, Hq, L, S)
    scores, scores32 = launches(P, es), launches(P, 4)
    kv_rep = launches((B, Hk, Hq // Hk, S, D), es)
    kernels = 2 + scores + 2 * kv_rep * gqa + 1 + 2 * scores32 * half + dropout
    kernels += (launches((L, S), 1) + 1 + scores) * causal
    kernels += (launches((B, 1, L, S), 1) + scores) * (mask == "bool") + scores * (mask == "float")
    memcpy = causal + (mask == "bool")
    if r["mode"] == "forward_backward":
        kernels += 4 + scores * dropout + 2 * scores32 * half + scores32 + 1 + scores
        kernels += scores * (causal + (mask == "bool"))
        kernels += 2 * kv_rep if gqa else launches((B, Hk, S, D), es)
        memcpy += causal + (mask == "bool")
    return int(kernels), int(memcpy)


def kernel_table(df: pd.DataFrame) -> pd.DataFrame:
    """Kernels launched per variant on CUDA: eager measured vs expected (expected_eager_kernels below),
    beside the SDPA backends' measured counts for the same variant."""
    cuda = df[df["status"].eq("ok") & df["n_kernels"].gt(0)].copy()
    if cuda.empty:
        return pd.DataFrame()
    # plain dicts of the call columns: DataFrame.apply row by row is an order of magnitude slower
    records = cuda[[c for c in CALL_FIELDS if c != "backend"]].to_dict("records")
    cuda["variant"] = [variant_label(r) for r in records]
    cuda["who"] = cuda["ran_backend"].where(cuda["ran_backend"].ne(""), cuda["backend"])
    cuda["expected"] = [expected_eager_kernels(r)[0] if who == "eager" else -1
                        for r, who in zip(records, cuda["who"], strict=True)]
    rows = []
    for (mode, variant), g in cuda.groupby(["mode", "variant"], sort=True):
        row = {"mode": mode, "variant": variant}
        eager = g[g["who"].eq("eager")]
        if len(eager):
            expected = eager["expected"]
            row["eager_expected"] = _span(expected)
            row["eager_measured"] = _span(eager["n_kernels"])
            row["eager_match"] = f"{int((eager['n_kernels'] == expected).sum())}/{len(eager)}"
        for b in ("math", "flash", "efficient", "cudnn"):
            sel = g[g["who"].eq(b)]
            row[b] = _span(sel["n_kernels"]) if len(sel) else ""
        rows.append(row)
    cols = ["mode", "variant", "eager_expected", "eager_measured", "eager_match", "math", "flash", "efficient", "cudnn"]
    return pd.DataFrame(rows).reindex(columns=cols).fillna("")


def _span(values) -> str:
    values = pd.Series(values).dropna().astype(int)
    lo, hi = int(values.min()), int(values.max())
    return str(lo) if lo == hi else f"{lo}–{hi}"
