"""Measure the two efficiencies the plan's roofline assumes (estimator/model/time.py GEMM_EFFICIENCY, HBM_EFFICIENCY)
on the local GPU, at the GEMM shapes of a preset's layers.

    python -m bench.bench_plan_gemm --preset llama-3-8b --gpu h200 --out bench_plan_gemm.csv

Prefill GEMMs (tokens × hidden @ hidden × out, bf16) give achieved / dense-peak FLOP/s; decode GEMVs
(batch 1..8 rows against each weight matrix) and a device-to-device copy give achieved / datasheet HBM
bandwidth. Writes one CSV row per measurement with the GPU name, driver, torch and CUDA versions, then prints
the median efficiencies. Needs torch with CUDA; the estimator imports are pure Python.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys

from estimator.hardware import get_gpu
from estimator.model.presets import get_preset


def _time_ms(fn, repeats: int) -> float:
    import torch

    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="llama-3-8b")
    parser.add_argument("--gpu", required=True, help="catalog name of the GPU this runs on (for its peaks)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--tokens", default="512,2048,8192,32768")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", default="bench_plan_gemm.csv")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    gpu, model = get_gpu(args.gpu), get_preset(args.preset)
    dtype = getattr(torch, args.dtype)
    es = torch.empty((), dtype=dtype).element_size()
    peak, bandwidth = gpu.peak_flops_per_s[args.dtype], gpu.hbm_bytes_per_s
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = "unknown"
    meta = {"device": torch.cuda.get_device_name(), "driver": driver, "torch": torch.__version__,
            "cuda": torch.version.cuda, "catalog_gpu": gpu.name, "preset": model.name, "dtype": args.dtype}
    H, F = model.hidden, model.ffn
    shapes = {"qkv": (H, model.q_dim + 2 * model.kv_dim), "o": (model.q_dim, H), "gate_up": (H, 2 * F),
              "down": (F, H), "lm_head": (H, model.vocab)}
    rows = []
    for name, (k, n) in shapes.items():
        weight = torch.randn(k, n, device="cuda", dtype=dtype)
        for tokens in [int(t) for t in args.tokens.split(",")]:
            x = torch.randn(tokens, k, device="cuda", dtype=dtype)
            ms = _time_ms(lambda x=x, weight=weight: x @ weight, args.repeats)
            flops = 2 * tokens * k * n
            rows.append({**meta, "kind": "prefill_gemm", "matrix": name, "rows": tokens, "k": k, "n": n,
                         "time_ms": ms, "efficiency": flops / (ms / 1e3) / peak})
        for batch in (1, 8):
            x = torch.randn(batch, k, device="cuda", dtype=dtype)
            ms = _time_ms(lambda x=x, weight=weight: x @ weight, args.repeats)
            moved = (k * n + batch * (k + n)) * es
            rows.append({**meta, "kind": "decode_gemv", "matrix": name, "rows": batch, "k": k, "n": n,
                         "time_ms": ms, "efficiency": moved / (ms / 1e3) / bandwidth})
        del weight
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src), args.repeats)
    rows.append({**meta, "kind": "copy", "matrix": "1GiB", "rows": 0, "k": 0, "n": 0, "time_ms": ms,
                 "efficiency": 2 * src.numel() / (ms / 1e3) / bandwidth})
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for kind in ("prefill_gemm", "decode_gemv", "copy"):
        values = [r["efficiency"] for r in rows if r["kind"] == kind]
        print(f"{kind}: median efficiency {statistics.median(values):.3f} over {len(values)} shapes "
              f"(min {min(values):.3f}, max {max(values):.3f})")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
