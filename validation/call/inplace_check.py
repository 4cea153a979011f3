"""The in-place masked_fill_ against the out-of-place eager reference (inference, causal): peak extra
bytes and kernel count of each, on the local GPU.

python -m validation.inplace_check [--out OUT.csv]
"""

from __future__ import annotations

import argparse

import torch

from validation.call.eager import eager_attention
from validation.call.grid import write_csv

SHAPES = [dict(batch=1, q_heads=32, seq=4096, head_dim=128, dtype=torch.bfloat16),
          dict(batch=1, q_heads=32, seq=4096, head_dim=128, dtype=torch.float32)]


def measure(shape: dict, inplace: bool) -> tuple[int, int]:
    from torch.profiler import ProfilerActivity, profile
    B, H, L, D = shape["batch"], shape["q_heads"], shape["seq"], shape["head_dim"]
    q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=shape["dtype"]) for _ in range(3))
    with torch.no_grad():
        eager_attention(q, k, v, is_causal=True, inplace_mask=inplace)  # warm-up
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        eager_attention(q, k, v, is_causal=True, inplace_mask=inplace)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            eager_attention(q, k, v, is_causal=True, inplace_mask=inplace)
            torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    return peak, kernels


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.inplace_check")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    rows = []
    for shape in SHAPES:
        for inplace in (False, True):
            peak, kernels = measure(shape, inplace)
            rows.append({"batch": shape["batch"], "q_heads": shape["q_heads"], "seq": shape["seq"],
                         "head_dim": shape["head_dim"], "dtype": str(shape["dtype"]).removeprefix("torch."),
                         "masked_fill": "in-place" if inplace else "out-of-place", "peak_extra_bytes": peak,
                         "cuda_events": kernels, "torch": torch.__version__})
            print(rows[-1], flush=True)
    if args.out:
        write_csv(rows, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
