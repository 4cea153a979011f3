"""The calibration set: cases chosen to pin down each backend's allocations (mechanism, not fit).

`python -m validation.call.calibration_cases OUT_DIR` writes calibration.csv (≈700 rows) and traces.csv (a
subset whose allocation traces are recorded)."""

from __future__ import annotations

import sys

from estimator.call.config import MODES
from estimator.call.registry import BACKENDS, OP_CHAIN, SDPA_BACKENDS, SDPA_FUSED, names
from validation.call.grid import DTYPES, case, number, random_sample, write_csv


def calibration_rows() -> list[dict]:
    rows = []
    # A. every backend × dtype × mode × feature at the reference shape (B2 H16 L1024 D128).
    features = [dict(), dict(causal=1), dict(mask="bool"), dict(mask="float"), dict(dropout=0.1),
                dict(kv_heads=4), dict(kv_heads=1)]
    for b in BACKENDS:
        for d in DTYPES:
            for m in MODES:
                for f in features:
                    rows.append(case(b, d, mode=m, **f))
    # B. head dims (odd ones included) for each backend, 16-bit and fp32, both modes.
    for D in (32, 40, 64, 72, 80, 96, 100, 112, 160, 192, 200, 256, 288):
        for b in ("auto", *SDPA_BACKENDS):
            for d in ("bfloat16", "float32"):
                for m in MODES:
                    rows.append(case(b, d, batch=1, q_heads=8, head_dim=D, q_len=2048, mode=m))
    # C. odd sequence lengths and q_len != kv_len.
    for L, S in ((1000, 1000), (777, 777), (130, 130), (4097, 4097), (512, 2048), (2048, 512), (100, 3000)):
        for b in ("auto", *SDPA_BACKENDS, "eager"):
            for m in MODES:
                rows.append(case(b, "bfloat16", batch=2, q_heads=8, q_len=L, kv_len=S, mode=m))
                if L != S:
                    rows.append(case(b, "bfloat16", batch=2, q_heads=8, q_len=L, kv_len=S, mode=m, causal=1))
    # D. small B·H·L (flash split-KV territory) and mid sizes.
    for B, H, L in ((1, 1, 128), (1, 8, 256), (1, 8, 1024), (1, 4, 4096), (1, 32, 512), (4, 8, 512)):
        for b in ("auto", *SDPA_FUSED, "math"):
            for m in MODES:
                rows.append(case(b, "bfloat16", batch=B, q_heads=H, head_dim=64, q_len=L, mode=m))
                rows.append(case(b, "bfloat16", batch=B, q_heads=H, head_dim=128, q_len=L, mode=m))
    # E. decode shapes: q_len 1..4 against long caches, GQA 32/8.
    for L in (1, 2, 4):
        for S in (1024, 8192, 32768, 131072):
            for b in ("auto", *SDPA_FUSED, *OP_CHAIN):
                rows.append(case(b, "bfloat16", batch=4, q_heads=32, kv_heads=8, q_len=L, kv_len=S))
                if S <= 8192:
                    rows.append(case(b, "bfloat16", batch=1, q_heads=32, q_len=L, kv_len=S, mode="forward_backward"))
        for b in ("auto", "efficient", "math"):
            rows.append(case(b, "float32", batch=2, q_heads=8, q_len=L, kv_len=16384))
    # F. long sequences, and sizes that run out of memory.
    for L in (8192, 16384, 32768):
        for b in ("auto", *SDPA_FUSED):
            for m in MODES:
                rows.append(case(b, "bfloat16", batch=1, q_heads=16, q_len=L, mode=m, causal=1))
    for L in (8192, 16384, 32768, 65536):
        rows.append(case("math", "bfloat16", batch=1, q_heads=16, q_len=L, mode="forward_backward"))
        rows.append(case("eager", "bfloat16", batch=1, q_heads=16, q_len=L, mode="forward"))
    rows.append(case("auto", "float32", batch=8, q_heads=32, kv_heads=8, q_len=32768, mode="forward_backward"))
    # G. larger batch, masks with fused backends at other shapes.
    for b in ("auto", "efficient", "cudnn", "math", "eager"):
        for mk in ("bool", "float"):
            for m in MODES:
                rows.append(case(b, "float16", batch=8, q_heads=8, head_dim=64, q_len=1000, mask=mk, mode=m))
    rows = number(rows, "cal")
    return rows + random_sample(160, seed=1)


TRACE_IDS = names(traced=True)


def trace_rows() -> list[dict]:
    rows = []
    for b in TRACE_IDS:
        for d in ("bfloat16", "float32"):
            for m in MODES:
                for f in (dict(), dict(causal=1), dict(mask="bool"), dict(kv_heads=4), dict(dropout=0.1)):
                    rows.append(case(b, d, batch=1, q_heads=4, q_len=512, head_dim=64, mode=m, **f))
        rows.append(case(b, "bfloat16", batch=2, q_heads=8, kv_heads=2, q_len=1, kv_len=4096))
        rows.append(case(b, "bfloat16", batch=1, q_heads=4, head_dim=256, q_len=512, mode="forward_backward"))
        rows.append(case(b, "bfloat16", batch=1, q_heads=4, head_dim=80, q_len=512, mode="forward_backward"))
    return number(rows, "trace")


def efficient_backward_rows() -> list[dict]:
    """Shapes that pin down the efficient backward workspace (key splits, head-dim rounding)."""
    rows = []
    for L, S in ((1, 1024), (1, 8192), (4, 4096), (16, 2048), (63, 512), (64, 512), (65, 512), (100, 3000),
                 (128, 128), (200, 1000), (256, 8192), (1000, 1000), (2048, 2048), (512, 4096)):
        for D in (32, 64, 96, 128, 160, 256):
            for B, H in ((1, 8), (1, 32), (4, 32)):
                for dt in ("bfloat16", "float32"):
                    if B * H * S * max(L, 64) * D > 2**33:
                        continue
                    rows.append(case("efficient", dt, batch=B, q_heads=H, head_dim=D, q_len=L, kv_len=S,
                                     mode="forward_backward"))
    return number(rows, "effbwd")


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    write_csv(calibration_rows(), f"{out}/calibration.csv")
    write_csv(trace_rows(), f"{out}/traces.csv")
