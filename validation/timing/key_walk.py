"""The memory-efficient forward's per-CTA key walk (estimator/call/cta_floor.py WALK_BLOCK_US, WALK_MASK_US_PER_64),
from per-kernel durations of decode-shaped forwards.

    python -m validation.timing.key_walk [validation/data/h200_eff_decode_probe.csv]

The probe (`python -m validation.timing.kernel_probe`, validation/cases/h200_eff_decode_probe.csv) timed the kernels
of 24 efficient calls of 1-64 queries over 4k-131k keys on 4-128 (batch, head) pairs: one CTA each, fewer than the
SMs, so each `fmha_cutlassF_*` kernel's time is one CTA's walk over the keys. Per call, its microseconds over the
kernel's key blocks are the block's latency; a least-squares line in head_dim per (fp32, kernel class) over the
unmasked calls without dropout is WALK_BLOCK_US (a block loads head_dim-wide key and value rows), and the median of
the masked calls' extra time per 64 keys (over that line) is WALK_MASK_US_PER_64. Pure pandas + numpy.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def block_us(probe: pd.DataFrame, cases: pd.DataFrame) -> pd.DataFrame:
    """Per call: fp32, kernel class, mask, dropout, the forward kernel's name and us, and us per key block."""
    from estimator.call import cta_floor
    from estimator.call.dq_chain import efficient_kernel_class
    from estimator.call.table import calls_from_frame
    from estimator.units import cdiv
    from validation.timing.kernel_classes import kernel_us

    us, frame = kernel_us(probe, cases, "fmha_cutlassF")
    c, _, _ = calls_from_frame(frame)
    n = len(frame)
    cls = np.broadcast_to(efficient_kernel_class(c), (n,))
    block = np.array([cta_floor.WALK_KEY_BLOCK[int(v)] for v in cls])
    out = pd.DataFrame({"id": frame["id"], "fp32": np.broadcast_to(c.fp32, (n,)), "kernel_class": cls,
                        "head_dim": pd.to_numeric(frame["head_dim"]).to_numpy(), "masked": frame["mask"] != "none",
                        "dropout": pd.to_numeric(frame["dropout"]) > 0,
                        "blocks": cdiv(pd.to_numeric(frame["kv_len"]).to_numpy(), block), "key_block": block})
    out = out.join(us, on="id")
    out["us_per_block"] = out["us"] / out["blocks"]
    out["kernel"] = out["kernel"].str.extract(r"fmha_cutlassF_(\w+?)_sm80")[0]
    return out


def constants(t: pd.DataFrame) -> tuple[dict, dict]:
    """(WALK_BLOCK_US, WALK_MASK_US_PER_64) as cta_floor.py holds them."""
    plain = t[~t["masked"] & ~t["dropout"]]
    base = {}
    for (f, k), g in plain.groupby(["fp32", "kernel_class"]):
        slope, intercept = np.polyfit(g["head_dim"].astype(float), g["us_per_block"], 1)
        base[(bool(f), int(k))] = (round(float(intercept), 3), round(float(slope), 4))
    m = t[t["masked"] & ~t["dropout"]].copy()
    m["extra_per_64"] = [(u - (base[(bool(f), int(k))][0] + base[(bool(f), int(k))][1] * d)) * 64 / b
                         for u, f, k, b, d in zip(m["us_per_block"], m["fp32"], m["kernel_class"], m["key_block"],
                                                  m["head_dim"], strict=True)]
    mask = {bool(f): round(float(v), 2) for f, v in m.groupby("fp32")["extra_per_64"].median().items()}
    return base, mask


def main(argv: list[str] | None = None) -> int:
    from validation.timing.dq_steps import load_eff_decode_probe

    t = block_us(*load_eff_decode_probe("python -m validation.timing.key_walk", __doc__.splitlines()[0], argv))
    print(t[["id", "fp32", "kernel_class", "head_dim", "masked", "dropout", "kernel", "blocks", "us", "us_per_block"]]
          .round(2).to_string(index=False))
    base, mask = constants(t)
    print(f"WALK_BLOCK_US = {base}")
    print(f"WALK_MASK_US_PER_64 = {mask}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
