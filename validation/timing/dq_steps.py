"""The memory-efficient backward's dQ lock step per kernel, relative to the 16-bit 64x64 kernel's
(estimator/call/dq_chain.py DQ_STEP_WEIGHT), from per-kernel durations of decode-shaped backwards.

    python -m validation.timing.dq_steps [validation/data/h200_eff_decode_probe.csv]

The probe (`python -m validation.timing.kernel_probe`, validation/cases/h200_eff_decode_probe.csv) timed the
kernels of 24 efficient backwards of 1-64 queries over 4k-131k keys. Per call, its `fmha_cutlassB_*` kernel's
microseconds over dq_chain.dq_chain_steps' unweighted steps (keys split by the kernel's key block) is the step's
cost; the median per kernel class over the 16-bit 64x64 class's is the weight. Pure pandas + numpy.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd


def step_us(probe: pd.DataFrame, cases: pd.DataFrame, gpu_name: str = "h200") -> pd.DataFrame:
    """Per call: its kernel class, the backward kernel's name and us, and us per (unweighted) lock step."""
    from estimator.call import dq_chain
    from estimator.call.table import calls_from_frame
    from estimator.hardware import get_gpu
    from validation.timing.kernel_classes import kernel_us

    us, frame = kernel_us(probe, cases, "fmha_cutlassB")
    c, _, _ = calls_from_frame(frame)
    n = len(frame)
    fp32 = np.broadcast_to(c.fp32, (n,))
    cls = np.broadcast_to(dq_chain.efficient_kernel_class(c), (n,))
    steps = np.broadcast_to(dq_chain.dq_chain_steps(c, get_gpu(gpu_name).sm_count)[0], (n,))
    out = pd.DataFrame({"id": frame["id"], "fp32": fp32, "head_dim_class": cls, "steps": steps})
    out = out.join(us, on="id")
    out["us_per_step"] = out["us"] / out["steps"]
    out["kernel"] = out["kernel"].str.extract(r"fmha_cutlassB_(\w+?)_sm80")[0]
    return out


def weights(t: pd.DataFrame) -> dict:
    med = t.groupby(["fp32", "head_dim_class"])["us_per_step"].median()
    return {(bool(f), int(k)): round(float(v / med[(False, 0)]), 2) for (f, k), v in med.items()}


def load_eff_decode_probe(prog: str, description: str, argv: list[str] | None):
    """(probe rows, cases) of the efficient decode probe, or of the probe and cases named on the command line."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("probe", nargs="?", default="validation/data/h200_eff_decode_probe.csv")
    parser.add_argument("--cases", default="validation/cases/h200_eff_decode_probe.csv")
    args = parser.parse_args(argv)
    from validation.timing.kernel_classes import load

    return load(args.probe, args.cases)


def main(argv: list[str] | None = None) -> int:
    t = step_us(*load_eff_decode_probe("python -m validation.timing.dq_steps", __doc__.splitlines()[0], argv))
    print(t[["id", "fp32", "head_dim_class", "kernel", "steps", "us", "us_per_step"]].round(2).to_string(index=False))
    print(f"DQ_STEP_WEIGHT = {weights(t)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
