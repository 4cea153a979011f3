"""The GEMM sections of `python -m validation calibrate`: cuBLAS GEMMs by shape class (a Llama-like step's linear
layers, forward and both backward GEMMs) and torch's grouped GEMM as transformers' mixture-of-experts layers call it.
Each `measure_*` returns the rows of its JSON section (format in validation/timing/calibrate.py) and appends what it
could not measure to `skipped`."""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from validation.errors import typed_line
from validation.timing.calibrate_sections import DTYPES, GIB, sig

# ---------------------------------------------------------------- GEMMs

def gemm_grid(quick: bool) -> list[tuple[int, int, int, str, str]]:
    """(M, N, K, dtype, kind): ~60 shape classes of a Llama-like step (hidden 4096/8192, FFN 14336/28672,
    kv 1024, vocab 128256)."""
    if quick:
        return [(m, n, k, "bfloat16", "forward") for m in (1, 8, 64) for n, k in ((128, 64), (256, 128))] + [
            (64, 1000, 64, "bfloat16", "forward"), (64, 128, 64, "float16", "forward"),
            (64, 128, 64, "float32", "forward"), (64, 256, 128, "bfloat16", "grad_input"),
            (64, 256, 128, "bfloat16", "grad_weight")]
    b = "bfloat16"
    fwd = {(4096, 4096): (1, 8, 64, 512, 2048, 8192, 32768),   # q/o projections, 8B
           (14336, 4096): (1, 64, 2048, 8192, 32768),          # gate/up, 8B
           (4096, 14336): (1, 2048, 8192, 32768),              # down, 8B
           (1024, 4096): (1, 2048, 8192),                      # k/v projections, 8B
           (8192, 8192): (1, 512, 8192, 32768),                # q/o projections, 70B
           (28672, 8192): (8, 2048, 8192),                     # gate/up, 70B
           (8192, 28672): (8192,),                             # down, 70B
           (2048, 2048): (64, 2048, 8192),                     # small models
           (128256, 4096): (1, 512, 2048, 8192)}               # lm head
    grid = [(m, n, k, b, "forward") for (n, k), ms in fwd.items() for m in ms]
    for d in ("float16", "float32"):
        grid += [(2048, 4096, 4096, d, "forward"), (8192, 4096, 4096, d, "forward"),
                 (8192, 14336, 4096, d, "forward"), (2048, 128256, 4096, d, "forward")]
    for m, n, k in ((8192, 4096, 4096), (2048, 14336, 4096), (8192, 14336, 4096), (8192, 4096, 14336),
                    (8192, 28672, 8192), (2048, 128256, 4096), (8192, 128256, 4096), (8192, 1024, 4096)):
        grid += [(m, n, k, b, "grad_input"), (m, n, k, b, "grad_weight")]
    grid += [(8192, 14336, 4096, "float16", "grad_input"), (8192, 14336, 4096, "float16", "grad_weight")]
    return grid


def _gemm_operands(m, n, k, kind):
    """(a shape, b shape, out shape) as materialised tensors; b of grad_weight is used transposed."""
    if kind == "forward":
        return (m, k), (n, k), (m, n)
    if kind == "grad_input":
        return (m, n), (n, k), (m, k)
    return (m, n), (m, k), (n, k)


def measure_gemms(timer, device, quick, budget, skipped) -> list[dict]:
    rows = []
    for m, n, k, dname, kind in gemm_grid(quick):
        what = f"{kind} m={m} n={n} k={k} {dname}"
        dtype = DTYPES[dname]
        a_shape, b_shape, o_shape = _gemm_operands(m, n, k, kind)
        size = torch.tensor([], dtype=dtype).element_size()
        if max(math.prod(s) for s in (a_shape, b_shape, o_shape)) * size > 8 * GIB:
            skipped.append(dict(section="gemm", what=what, reason="an operand exceeds 8 GiB"))
            continue
        if budget.over():
            skipped.append(dict(section="gemm", what=what, reason="time budget"))
            continue
        try:
            a = torch.randn(a_shape, device=device, dtype=dtype)
            w = torch.randn(b_shape, device=device, dtype=dtype)
            if kind == "forward":
                fn = functools.partial(F.linear, a, w)  # x @ W.T
            elif kind == "grad_input":
                fn = functools.partial(torch.matmul, a, w)  # dY @ W
            else:
                fn = functools.partial(torch.matmul, a.t(), w)  # dY.T @ x
            ms = timer(fn)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a skipped entry
            skipped.append(dict(section="gemm", what=what, reason=typed_line(exc)))
            continue
        finally:
            a = w = fn = None
        rows.append(dict(m=m, n=n, k=k, dtype=dname, kind=kind, ms=sig(ms),
                         tflops=sig(2.0 * m * n * k / ms / 1e9, 5)))
    return rows


# ---------------------------------------------------------------- grouped GEMMs (mixture-of-experts)

def grouped_gemm_grid(quick: bool) -> list[tuple[int, int, int, int, str, str]]:
    """(experts, rows per expert, N, K, dtype, kind): the expert GEMMs of transformers' grouped_mm experts
    (gate_up: N = 2·ffn, K = hidden; down: N = hidden, K = ffn) of Mixtral-8x7B, Qwen3-30B-A3B,
    DeepSeek-V2-Lite and gpt-oss-20b at a few token counts; kind forward or forward_backward (the grouped GEMM's
    autograd backward: grad_input and grad_weight)."""
    if quick:
        return [(4, 64, 256, 128, "bfloat16", "forward"), (4, 64, 256, 128, "bfloat16", "forward_backward")]
    shapes = {  # experts: [(N, K) gate_up, (N, K) down], rows per expert
        8: ([(28672, 4096), (4096, 14336)], (1024, 4096, 8192)),
        128: ([(1536, 2048), (2048, 768)], (128, 512, 2048)),
        64: ([(2816, 2048), (2048, 1408)], (192, 768, 3072)),
        32: ([(5760, 2880), (2880, 2880)], (256, 1024, 4096)),
    }
    grid = []
    for e, (nks, rows) in shapes.items():
        for n, k in nks:
            grid += [(e, m, n, k, "bfloat16", "forward") for m in rows]
            grid += [(e, rows[1], n, k, "bfloat16", "forward_backward"), (e, rows[1], n, k, "float32", "forward")]
    return grid


def _grouped_mm():
    return getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def measure_grouped_gemms(timer, device, quick, budget, skipped) -> list[dict]:
    """Rows {experts, m, n, k, dtype, kind, ms, tflops}: one grouped GEMM over `experts` groups of m rows each,
    called as transformers 5.17 integrations/moe.py `_grouped_linear` calls it: x[E·m, K] @ W[E, N, K].mT with
    int32 offsets. flops = 2·E·m·N·K (x3 for forward_backward)."""
    mm = _grouped_mm()
    out = []
    for e, m, n, k, dname, kind in grouped_gemm_grid(quick):
        what = f"grouped {kind} experts={e} m={m} n={n} k={k} {dname}"
        if budget.over():
            skipped.append(dict(section="grouped_gemm", what=what, reason="time budget"))
            continue
        if mm is None or device != "cuda":
            skipped.append(dict(section="grouped_gemm", what=what, reason="no grouped_mm on this device"))
            continue
        dtype = DTYPES[dname]
        grad = kind == "forward_backward"
        x = w = offs = fn = None
        try:
            x = torch.randn(e * m, k, device=device, dtype=dtype, requires_grad=grad)
            w = torch.randn(e, n, k, device=device, dtype=dtype, requires_grad=grad)
            offs = torch.arange(1, e + 1, device=device, dtype=torch.int32) * m
            if grad:
                dy = torch.randn(e * m, n, device=device, dtype=dtype)

                def fn(x=x, w=w, offs=offs, dy=dy):
                    mm(x, w.transpose(-2, -1), offs=offs).backward(dy)
            else:
                fn = functools.partial(mm, x, w.transpose(-2, -1), offs=offs)
            ms = timer(fn)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a skipped entry
            skipped.append(dict(section="grouped_gemm", what=what, reason=typed_line(exc)))
            continue
        finally:
            x = w = offs = fn = None
            if device == "cuda":
                torch.cuda.empty_cache()
        flops = 2.0 * e * m * n * k * (3 if grad else 1)
        out.append(dict(experts=e, m=m, n=n, k=k, dtype=dname, kind=kind, ms=sig(ms),
                        tflops=sig(flops / ms / 1e9, 5)))
    return out
