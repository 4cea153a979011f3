"""How far the simulated serving times were from transformers' continuous batching on the H200 (hf-cb only).

Each band is (simulated - measured) / measured, its lowest and highest value over every run of the held-out sets
(validation/data/h200_serve_heldout_summary.csv and h200_serve_heldout2_summary.csv, 11 runs of 5 families,
measured after the step-time constants were fitted; tests/test_serve_bands.py recomputes them from those files
with `python -m validation.serving.compare`). A negative band means the simulation was faster than the engine:
the engine's figure is simulated / (1 + error), so for TPOT the measured value ran 1.04-2.0x the simulated one.
Other engines have no measurement behind their times: no band is claimed for them.
"""

from __future__ import annotations

HF_CB_HELD_OUT_SETS = ("h200_serve_heldout", "h200_serve_heldout2")

# metric -> (lowest, highest) (simulated - measured) / measured over the held-out runs
HF_CB_TIME_ERROR_BANDS: dict[str, tuple[float, float]] = {
    "throughput_output_tokens_per_s": (0.034, 0.731),
    "ttft_ms.p50": (-0.618, 0.042),
    "ttft_ms.p99": (-0.581, 0.050),
    "tpot_ms.p50": (-0.500, -0.023),
    "tpot_ms.p99": (-0.484, -0.014),
}


def time_error_band(engine: str) -> dict | None:
    """The band the JSON carries beside the simulated times (None where nothing was measured)."""
    if engine != "hf-cb":
        return None
    return {"definition": "(simulated - measured) / measured, lowest and highest over the held-out H200 runs",
            "sets": [f"validation/data/{s}_summary.csv" for s in HF_CB_HELD_OUT_SETS],
            "bands": {k: list(v) for k, v in HF_CB_TIME_ERROR_BANDS.items()}}
