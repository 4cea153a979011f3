"""Unit host costs of transformers 5.17 continuous batching's per-step Python, timed on the machine's own CPU:

    python -m validation.serving.host_probe --out host_probe.csv [--device cuda]

Each row times one mechanism the engine runs every step (continuous_batching/cache_manager.py,
input_outputs.py, utils.py), called as the engine calls it, over a range of sizes, so that its cost per unit
(per token, per request) is the slope:
- `full_read`: FullAttentionCacheAllocator.get_read_indices (one `range` extended per block) for N cached tokens;
- `sliding_read`: SlidingAttentionCacheAllocator.get_read_indices (one loop iteration per token) for N tokens;
- `to_tensor`: torch.tensor(list of N ints, dtype=int64, device=device), how prepare_batch_tensors copies an index
  list to the device;
- `mask_full`, `mask_sliding`: build_attention_mask for R one-token requests (a decode step), per layer type.
Rows: mechanism, size, calls, ms_per_call (median of `--repeat` timings).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time


def _time(fn, repeat: int) -> float:
    fn()
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out)


def probe(device: str, repeat: int = 7) -> list[dict]:
    import torch
    from transformers.generation.continuous_batching import cache_manager as cm
    from transformers.generation.continuous_batching.utils import build_attention_mask

    rows = []
    block = 256
    full = cm.FullAttentionCacheAllocator(0, block, allow_block_sharing=False)
    window = 4096
    sliding = cm.SlidingAttentionCacheAllocator(1, block, window, sentinel_index=0, write_trash_index=1)
    full.block_table["r"] = list(range(64))
    sliding.block_table["r"] = list(range(window // block))
    for n in (256, 1024, 4095):
        rows.append({"mechanism": "full_read", "size": n,
                     "ms_per_call": _time(lambda n=n: full.get_read_indices("r", n - 1, 1), repeat)})
        rows.append({"mechanism": "sliding_read", "size": n,
                     "ms_per_call": _time(lambda n=n: sliding.get_read_indices("r", n, 1), repeat)})
    for n in (1024, 8192, 32768):
        data = list(range(n))
        dev = torch.device(device)
        rows.append({"mechanism": "to_tensor", "size": n, "ms_per_call": _time(
            lambda d=data, dev=dev: torch.tensor(d, dtype=torch.int64, device=dev), repeat)})
    for r in (1, 8, 32):
        mask = torch.zeros((1, 1, 64, 64 * 600), dtype=torch.bfloat16, device=device)
        cq = list(range(r + 1))
        ck = [i * 500 for i in range(r + 1)]
        for name, w in (("mask_full", 1), ("mask_sliding", window)):
            def fn(w=w, mask=mask, cq=cq, ck=ck):
                build_attention_mask(mask, cq, ck, sliding_window=w)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
            rows.append({"mechanism": name, "size": r, "ms_per_call": _time(fn, repeat)})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m validation.serving.host_probe", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="CSV to write")
    p.add_argument("--device", default="cuda", help="device of the tensors (default cuda)")
    p.add_argument("--repeat", type=int, default=7, help="timings per point, the median kept (default 7)")
    args = p.parse_args(argv)
    rows = probe(args.device, args.repeat)
    with open(args.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["mechanism", "size", "ms_per_call"])
        w.writeheader()
        for r in rows:
            w.writerow({**r, "ms_per_call": f"{r['ms_per_call']:.5f}"})
    for r in rows:
        print(f"{r['mechanism']:13s} {r['size']:6d} {r['ms_per_call']:.4f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
