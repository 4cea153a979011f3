"""Does a long attention kernel run slower the longer the GPU runs it (clocks under the power limit)?

    python -m validation.timing.sustain_probe --out OUT.csv [--repeats 12]

For a few long prefill-shaped calls (batch 1, 32 query / 8 key-value heads, head_dim 128, causal, bf16) it runs
the call `repeats` times back to back, each timed with CUDA events, after a 2 s idle pause: a first call after idle
against the same call after seconds of sustained load. Run `nvidia-smi --query-gpu=clocks.sm,power.draw,...
-lms 100` beside it to see the clocks. Self-contained: torch only.
"""

from __future__ import annotations

import argparse
import csv
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=12)
    a = ap.parse_args(argv)
    rows = []
    for backend, L, H in (("cudnn", 131072, 32), ("flash", 65536, 32), ("cudnn", 32768, 32)):
        q = torch.randn(1, H, L, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 8, L, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        with sdpa_kernel([BACKENDS[backend]]):
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # warm-up (graph build)
            torch.cuda.synchronize()
            time.sleep(2.0)
            t0 = time.perf_counter()
            for i in range(a.repeats):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                e.record()
                e.synchronize()
                rows.append(dict(backend=backend, batch=1, q_heads=H, kv_heads=8, head_dim=128, q_len=L, kv_len=L,
                                 causal=1, run=i, ms=round(s.elapsed_time(e), 4),
                                 t_s=round(time.perf_counter() - t0, 3)))
        del q, k, v
        torch.cuda.empty_cache()
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
