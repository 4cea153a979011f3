"""What the first SDPA call at a new (Q, K) costs in a fresh process, as hf-cb's `paged|sdpa` makes it.

    python -m validation.serving.first_build_probe --out OUT.csv [--tiny] [--budget-s 240] [--cache-plan [PLAN]]

transformers 5.17 `paged|sdpa` calls `scaled_dot_product_attention` once per layer with q (1, heads, Q, d), the
gathered and repeated k and v (1, heads, K, d) and the slice `[..., :Q, :K]` of the engine's static
(1, 1, max_batch_tokens, pages + max_batch_tokens) float bias. On cuDNN, PyTorch builds an execution graph per
distinct shape and strides (aten/src/ATen/native/cudnn/MHA.cpp) and keeps it for the process. Committed hf-cb
runs show single engine steps of 0.45-1.6 s, where their neighbours take 70-280 ms, at a packed key length K that
is a multiple of 128 not seen before in the process, and at the first Q = 1 step of a process.

Each sequence below runs in its own fresh process (`--child`), so nothing is cached from another: for every
(Q, K, heads, head_dim) of the sequence, in order, the first call (wall ms, synchronised at both ends: host
build + GPU), then the same call repeated (`seen`, median of 3 wall ms and GPU ms between CUDA events). The
sequences cover K a multiple of 128 and not, in both orders, Q = 1 and decode-sized Q, prefill-shaped Q = K, and
head_dim 96 / 128 / 256. Self-contained: torch only (no estimator/ imports).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

DECODE = [(4, 1000), (4, 1001), (4, 1280), (4, 1281), (4, 2560), (4, 2600), (4, 3840), (4, 5000),
          (17, 5120), (17, 5121), (6, 6272), (6, 6300), (1, 3000), (1, 3072), (1, 4096), (1, 4100)]
PREFILL = [(1000, 1000), (1024, 1024), (1500, 1500), (2048, 2048), (3000, 3000), (4096, 4096), (6000, 6000),
           (6144, 6144), (8192, 8192)]
Q_SWEEP = [(q, 5000) for q in (1, 2, 4, 8, 16, 17, 32, 64, 128, 129, 256)] + [(q, 5120) for q in (1, 4, 17, 128)]
# (name, heads, head_dim, shapes)
SEQUENCES = [
    ("decode_d128", 32, 128, DECODE),
    ("decode_d128_reversed", 32, 128, DECODE[::-1]),
    ("prefill_d128", 32, 128, PREFILL),
    ("qsweep_d128", 32, 128, Q_SWEEP),
    ("mixed_d256", 16, 256, [(4, 1000), (4, 1280), (4, 2600), (4, 3840), (1, 3000), (1, 3072), (1024, 1024),
                             (3000, 3000), (3840, 3840)]),
    ("mixed_d96", 32, 96, [(4, 1000), (4, 1280), (4, 2600), (4, 3840), (1, 3000), (1, 3072), (1024, 1024),
                           (3000, 3000), (3840, 3840)]),
]
Q1_SWEEP = [(1, k) for k in (100, 200, 247, 256, 300, 374, 384, 500, 512, 600, 692, 768, 1000, 1024, 2000, 2048,
                             4000, 4096, 8000, 8192)]
SEQUENCES.append(("q1_sweep_d128", 32, 128, Q1_SWEEP))
SEQUENCES.append(("q4_sweep_d128", 32, 128, [(4, k) for _, k in Q1_SWEEP]))
TINY = [("tiny", 2, 16, [(3, 40), (5, 64), (16, 16)])]
# --cache-plan: which CUDA JIT cache each child runs with, to tell a compile cached on the machine (the driver's
# ComputeCache, CUDA_CACHE_PATH, kept across processes) from one paid per process: `default` (the machine's),
# `fresh:NAME` (a new directory NAME, shared by later children that name it), `off` (CUDA_CACHE_DISABLE=1)
CACHE_PLAN = ("q1_sweep_d128@fresh:a,q1_sweep_d128@fresh:a,q1_sweep_d128@off,q1_sweep_d128@off,"
              "q4_sweep_d128@fresh:b,decode_d128@fresh:b,decode_d128_reversed@fresh:c,mixed_d96@fresh:d,"
              "prefill_d128@fresh:e,mixed_d256@fresh:f,mixed_d256@fresh:f")
COLUMNS = ["sequence", "cache", "child", "order", "heads", "head_dim", "q", "k", "k_mod_128", "first_ms", "seen_ms",
           "seen_gpu_ms", "first_minus_seen_ms", "device_name", "torch_version"]


def child(name: str, heads: int, d: int, shapes: list, tiny: bool) -> list[dict]:
    import torch
    import torch.nn.functional as F

    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    dt = torch.bfloat16
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    M, pool = (64, 256) if tiny else (8192, 65_536)
    mask = torch.zeros((1, 1, M, pool + M), device=dev, dtype=dt)  # the engine's static bias
    torch.randn(8, device=dev).sum().item()  # the CUDA context, before any timed call
    sync()
    rows = []
    for order, (Q, K) in enumerate(shapes):
        q = torch.randn(1, heads, Q, d, device=dev, dtype=dt)
        k = torch.randn(1, heads, K, d, device=dev, dtype=dt)
        v = torch.randn(1, heads, K, d, device=dev, dtype=dt)
        m = mask[..., :Q, :K]
        sync()
        t = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        sync()
        first = (time.perf_counter() - t) * 1e3
        walls, gpus = [], []
        for _ in range(3):
            sync()
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
            t = time.perf_counter()
            F.scaled_dot_product_attention(q, k, v, attn_mask=m)
            if cuda:
                b.record()
            sync()
            walls.append((time.perf_counter() - t) * 1e3)
            gpus.append(a.elapsed_time(b) if cuda else float("nan"))
        seen = statistics.median(walls)
        rows.append({"sequence": name, "order": order, "heads": heads, "head_dim": d, "q": Q, "k": K,
                     "k_mod_128": K % 128, "first_ms": round(first, 3), "seen_ms": round(seen, 4),
                     "seen_gpu_ms": round(statistics.median(gpus), 4), "first_minus_seen_ms": round(first - seen, 3),
                     "device_name": torch.cuda.get_device_name() if cuda else "cpu",
                     "torch_version": torch.__version__})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m validation.serving.first_build_probe",
                                description=__doc__.splitlines()[0])
    p.add_argument("--out", help="CSV to write (parent)")
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a CPU smoke test)")
    p.add_argument("--budget-s", type=float, default=240.0, help="stop starting sequences after this many seconds")
    p.add_argument("--cache-plan", nargs="?", const=CACHE_PLAN, default=None,
                   help="children as SEQUENCE@CACHE,... (CACHE: default, fresh:NAME, off); without a value, the "
                        "built-in plan; without the flag, every sequence once on the machine's cache")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    sequences = TINY if a.tiny else SEQUENCES
    if a.child is not None:
        name, heads, d, shapes = sequences[int(a.child)]
        print(json.dumps(child(name, heads, d, shapes, a.tiny)))
        return 0
    if not a.out:
        p.error("--out is required")
    t0 = time.perf_counter()
    rows: list[dict] = []
    names = [name for name, *_ in sequences]
    plan = [(n, "default") for n in names] if a.cache_plan is None else \
        [tuple(item.split("@", 1)) if "@" in item else (item, "default") for item in a.cache_plan.split(",")]
    root = tempfile.mkdtemp(prefix="first_build_cache_")
    for child_no, (name, cache) in enumerate(plan):
        if name not in names:
            p.error(f"--cache-plan: unknown sequence {name!r}; expected one of {', '.join(names)}")
        if time.perf_counter() - t0 > a.budget_s:
            print(f"budget reached before {name}", file=sys.stderr)
            break
        env = dict(os.environ)
        if cache == "off":
            env["CUDA_CACHE_DISABLE"] = "1"
        elif cache.startswith("fresh:"):
            env["CUDA_CACHE_PATH"] = os.path.join(root, cache.split(":", 1)[1])
        elif cache != "default":
            p.error(f"--cache-plan: unknown cache {cache!r}; expected default, fresh:NAME or off")
        cmd = [sys.executable, "-m", "validation.serving.first_build_probe", "--child", str(names.index(name))]
        if a.tiny:
            cmd.append("--tiny")
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=max(30.0, a.budget_s), env=env)
        if res.returncode != 0:
            print(f"{name}: exit {res.returncode}: {res.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            continue
        got = [{**r, "cache": cache, "child": child_no} for r in json.loads(res.stdout.strip().splitlines()[-1])]
        rows.extend(got)
        print(f"{name}@{cache}: {len(got)} shapes, first calls {[r['first_ms'] for r in got]}", file=sys.stderr)
    with open(a.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
