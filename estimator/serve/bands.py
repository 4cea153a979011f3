"""How far the simulated serving times were from transformers' continuous batching on the H200 (hf-cb only).

Each band is (simulated - measured) / measured, its lowest and highest value over every run of the held-out sets
measured after the step-time model was final (validation/data/h200_serve_heldout4_summary.csv,
h200_serve_heldout5_summary.csv, h200_serve_heldout6_summary.csv and h200_serve_heldout7_summary.csv: 23 runs of 9
families, MoE included, each in its own process, each case list committed before it was measured and nothing fitted
on them; set 7 on a warm CUDA JIT cache, whose fresh-cache first pass falls inside the same band);
tests/test_serve_bands.py recomputes it with `python -m validation.serving.compare`. A negative band means the
simulation was faster than the engine: the engine's figure is simulated / (1 + error), so for TPOT P50 the measured
value ran 0.62-1.76x the simulated one.
Other engines have no measurement behind their times: no band is claimed for them.
"""

from __future__ import annotations

HF_CB_HELD_OUT_SETS = ("h200_serve_heldout4", "h200_serve_heldout5", "h200_serve_heldout6", "h200_serve_heldout7")

# metric -> (lowest, highest) (simulated - measured) / measured over the held-out runs
HF_CB_TIME_ERROR_BANDS: dict[str, tuple[float, float]] = {
    "throughput_output_tokens_per_s": (-0.28, 0.722),
    "ttft_ms.p50": (-0.859, 0.48),
    "ttft_ms.p99": (-0.859, 0.391),
    "tpot_ms.p50": (-0.433, 0.611),
    "tpot_ms.p99": (-0.499, 0.571),
}


def time_error_band(engine: str) -> dict | None:
    """The band the JSON carries beside the simulated times (None where nothing was measured)."""
    if engine != "hf-cb":
        return None
    return {"definition": "(simulated - measured) / measured, lowest and highest over the held-out H200 runs",
            "sets": [f"validation/data/{s}_summary.csv" for s in HF_CB_HELD_OUT_SETS],
            "bands": {k: list(v) for k, v in HF_CB_TIME_ERROR_BANDS.items()}}
