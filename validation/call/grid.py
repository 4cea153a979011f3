"""Predict-style case grids (contract §2 columns) for validation sweeps: pure Python, seeded, reproducible."""

from __future__ import annotations

import itertools
import random

from estimator.call.config import MODES
from estimator.call.registry import BACKENDS, OP_CHAIN
from validation.call.schema import CALL_FIELDS

COLUMNS = ("id", *CALL_FIELDS)
DTYPES = ("bfloat16", "float16", "float32")  # the order the grids draw them in


def case(backend="auto", dtype="bfloat16", batch=2, q_heads=16, kv_heads=None, head_dim=128, q_len=1024,
         kv_len=None, causal=0, mask="none", dropout=0.0, mode="forward") -> dict:
    return {"backend": backend, "dtype": dtype, "batch": batch, "q_heads": q_heads,
            "kv_heads": q_heads if kv_heads is None else kv_heads, "head_dim": head_dim, "q_len": q_len,
            "kv_len": q_len if kv_len is None else kv_len, "causal": int(causal), "mask": mask,
            "dropout": dropout, "mode": mode}


def number(rows: list[dict], prefix: str) -> list[dict]:
    return [{"id": f"{prefix}-{i:04d}", **row} for i, row in enumerate(rows)]


def n_sweep(backends=BACKENDS, dtype="bfloat16", mode="forward", start=128, stop=32768, **shape) -> list[dict]:
    """Sequence length in ×2 steps for each backend (the doubling check: quadratic paths take about 4× the
    time per doubling)."""
    rows, n = [], start
    while n <= stop:
        rows += [case(b, dtype, q_len=n, mode=mode, **shape) for b in backends]
        n *= 2
    return number(rows, "nsweep")


def matrix(q_len=1024, **shape) -> list[dict]:
    """Backend × dtype × mode at one shape."""
    return number([case(b, d, q_len=q_len, mode=m, **shape)
                   for b, d, m in itertools.product(BACKENDS, DTYPES, MODES)], "matrix")


def random_sample(n: int, seed: int = 0, max_elements: int = 2**33, backend: str | None = None) -> list[dict]:
    """A seeded random sample over the whole space; shapes whose score matrix exceeds
    `max_elements` elements are kept rare so that a sweep is mostly runnable. `backend`: every row on that
    backend (the other fields drawn as before, so some rows are ones it does not support)."""
    rng = random.Random(seed)
    rows = []
    while len(rows) < n:
        q_heads = rng.choice([1, 4, 8, 12, 16, 32])
        kv_heads = rng.choice([h for h in (1, 2, 4, 8, 16, 32) if q_heads % h == 0 and h <= q_heads])
        if rng.random() < 0.4:
            kv_heads = q_heads
        decode = rng.random() < 0.2
        q_len = rng.choice([1, 2, 3, 4]) if decode else rng.choice([128, 256, 500, 512, 1000, 1024, 2048, 3000,
                                                                     4096, 8192, 16384, 32768])
        kv_len = rng.choice([1024, 4096, 16384, 65536, 131072]) if decode else q_len
        mask = rng.choice(["none", "none", "none", "bool", "float"])
        row = case(backend=backend or rng.choice(BACKENDS), dtype=rng.choice(DTYPES), batch=rng.choice([1, 2, 4, 8]),
                   q_heads=q_heads, kv_heads=kv_heads,
                   head_dim=rng.choice([32, 40, 64, 80, 96, 100, 128, 128, 160, 192, 256]),
                   q_len=q_len, kv_len=kv_len, causal=int(mask == "none" and q_len == kv_len and rng.random() < 0.4),
                   mask=mask, dropout=rng.choice([0.0, 0.0, 0.0, 0.1]), mode=rng.choice(MODES))
        if row["batch"] * q_heads * q_len * kv_len > max_elements and rng.random() < 0.8:
            continue
        rows.append(row)
    return number(rows, f"random{seed}")


HEAD_DIMS = (32, 40, 64, 80, 96, 128, 160, 192, 256)


def head_dim_sweep() -> list[dict]:
    """Each head_dim the kernels instantiate or pad (32-256) on the fused backends at two fixed shapes (B2 H16 at
    4096 tokens, causal or not; B8 H16 L4 over 16384 keys, decode-shaped), 16-bit unmasked and bool-masked, fp32 on
    the efficient kernel, forward and training: what a fit needs to separate the per-score work (softmax) from
    the per-FLOP work (MMAs), which the random sets cannot (their unmasked 16-bit efficient forwards of 1 ms or
    more are head_dim 128)."""
    rows = []
    for mode, d in itertools.product(MODES, HEAD_DIMS):
        for b in ("flash", "efficient", "cudnn"):
            for causal, mask in ((0, "none"), (1, "none"), (0, "bool")):
                if b == "flash" and mask != "none":
                    continue  # flash takes no attn_mask
                rows.append(case(b, "bfloat16", q_len=4096, head_dim=d, causal=causal, mask=mask, mode=mode))
            rows.append(case(b, "bfloat16", batch=8, q_len=4, kv_len=16384, head_dim=d, mode=mode))
        rows.append(case("efficient", "float32", q_len=4096, head_dim=d, mode=mode))
    return number(rows, "headdim")


def cpu_grid() -> list[dict]:
    """Small shapes a CPU measures in seconds: every backend (efficient and cudnn come out
    `unsupported` on a CPU), both modes, fp32 and bf16, with causal, masks, GQA and dropout."""
    shape = dict(batch=1, q_heads=4, head_dim=32, q_len=128)
    features = (dict(), dict(causal=1), dict(mask="bool"), dict(mask="float"), dict(kv_heads=2), dict(dropout=0.1))
    rows = [case(b, d, mode=m, **shape, **f) for b in ("math", "eager", "flash", "auto")
            for d in ("float32", "bfloat16") for m in MODES for f in features]
    rows += [case(b, "float32", **shape) for b in ("efficient", "cudnn")]
    rows += [case(b, "float32", batch=1, q_heads=2, head_dim=32, q_len=n)
             for b in OP_CHAIN for n in (256, 512)]
    return number(rows, "cpu")


def all_kinds_sample(seed: int = 0, n: int = 200) -> list[dict]:
    """The sweep for a fresh GPU: n sweeps (both modes, bf16 and fp32) + the matrix + a random sample."""
    rows = n_sweep(mode="forward") + n_sweep(mode="forward_backward", stop=16384)
    rows += n_sweep(backends=("math", "efficient", "eager", "auto"), dtype="float32", stop=16384)
    rows += matrix() + random_sample(n, seed=seed)
    return number([{k: v for k, v in r.items() if k != "id"} for r in rows], "sweep")


def write_csv(rows: list[dict], path) -> None:
    import csv
    if not rows:
        raise ValueError("grid: no cases to write")
    from estimator.files import atomic_output
    with atomic_output(path, "--out", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
