"""GPU ms of the Mamba2 torch fallback's broadcast products and their reductions (transformers 5.17
mamba2_chunk_scan: C·B, M·x, B_decay·x, C·states), a contiguous fp32 mul of the same size, and the backward's
grad·other + sum_to of each, at a few (b, L, heads, head_dim, state, chunk) shapes. torch only.

python validation/model/probe_scan_ops.py --out DIR [--device cpu --tiny]
The H200 run is validation/data/h200_hybrid_scan_ops.csv, read by estimator/model/hybrid_time.py.
"""

from __future__ import annotations

import argparse
import csv
import os
import time

import torch

SHAPES = ((1, 4096, 32, 64, 64, 256), (1, 1024, 128, 8, 256, 256), (1, 1024, 128, 64, 128, 256),
          (1, 8192, 16, 64, 32, 128))
TINY = ((1, 64, 4, 8, 16, 16),)


def timed(fn, dev, reps: int = 5) -> float:
    """Mean ms of `reps` calls after one warm-up (CUDA events on a GPU)."""
    fn()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / reps
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) * 1e3 / reps


def shape_rows(shape, dev) -> list[tuple]:
    b, L, h, P, n, l = shape
    c = L // l
    f = dict(device=dev, dtype=torch.float32)
    t = {"C": torch.randn(b, c, l, h, n, **f), "B": torch.randn(b, c, l, h, n, **f),
         "x": torch.randn(b, c, l, h, P, **f), "M": torch.randn(b, c, l, l, h, **f),
         "Bd": torch.randn(b, c, l, h, n, **f), "st": torch.randn(b, c, h, P, n, **f)}
    # name: (the two broadcast operands, the reduction dim of the forward, the dims sum_to reduces per operand)
    ops = {"G": (t["C"][:, :, :, None], t["B"][:, :, None], -1, (3, 2)),
           "Y": (t["M"][..., None], t["x"][:, :, None], 3, (-1, 2)),
           "S": (t["Bd"][..., None, :], t["x"][..., None], 2, (-2, -1)),
           "CTS": (t["C"][..., None, :], t["st"][:, :, None], -1, (-2, 2))}
    tag = f"b{b}_L{L}_h{h}_P{P}_n{n}_l{l}"
    rows = []
    for name, (u, v, red, back) in ops.items():
        try:
            prod = u * v
            elems = prod.numel()
            rows.append((tag, f"{name}_mul", elems, timed(lambda u=u, v=v: u * v, dev)))
            rows.append((tag, f"{name}_sum", elems, timed(lambda p=prod, r=red: p.sum(dim=r), dev)))
            flat = prod.reshape(-1)
            rows.append((tag, f"{name}_contig_mul", elems, timed(lambda q=flat: q * q, dev)))
            shape_of = prod.shape
            del prod, flat
            g = torch.ones(shape_of, **f)

            def bwd(g=g, u=u, v=v, back=back):
                return (g * v).sum(back[0]), (g * u).sum(back[1])

            rows.append((tag, f"{name}_bwd", elems, timed(bwd, dev, 3)))
            del g
        except torch.OutOfMemoryError:
            rows.append((tag, f"{name}_mul", 0, float("nan")))
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    dev = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)
    rows = [r for shape in (TINY if args.tiny else SHAPES) for r in shape_rows(shape, dev)]
    path = os.path.join(args.out, "scan_ops.csv")
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["shape", "op", "elements", "ms"])
        writer.writerows(rows)
    print(open(path).read())


if __name__ == "__main__":
    main()
