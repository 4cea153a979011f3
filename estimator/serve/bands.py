"""How far the simulated serving times were from transformers' continuous batching on the H200 (hf-cb only).

Each band is (simulated - measured) / measured, its lowest and highest value over every run of the held-out set
for the current step-time model (validation/data/h200_serve_heldout3_summary.csv, 6 runs of 5 families; no
constant is fitted on them, but the forward's form (estimator/serve/hf_host.py: a cuDNN graph build per new attention
shape) was chosen after they were measured, so this is a provisional band until HELD-OUT set 4
(validation/serving/cases/h200_heldout4.txt, measured after the model was final) replaces it;
tests/test_serve_bands.py recomputes it with `python -m validation.serving.compare`). A negative band means the
simulation was faster than the engine: the engine's figure is simulated / (1 + error), so for TPOT P50 the
measured value ran 0.95-1.21x the simulated one. Other engines have no measurement behind their times: no band is
claimed for them.
"""

from __future__ import annotations

HF_CB_HELD_OUT_SETS = ("h200_serve_heldout3",)

# metric -> (lowest, highest) (simulated - measured) / measured over the held-out runs
HF_CB_TIME_ERROR_BANDS: dict[str, tuple[float, float]] = {
    "throughput_output_tokens_per_s": (-0.053, 0.167),
    "ttft_ms.p50": (-0.234, 0.041),
    "ttft_ms.p99": (-0.587, 0.097),
    "tpot_ms.p50": (-0.175, 0.053),
    "tpot_ms.p99": (-0.194, 0.045),
}


def time_error_band(engine: str) -> dict | None:
    """The band the JSON carries beside the simulated times (None where nothing was measured)."""
    if engine != "hf-cb":
        return None
    return {"definition": "(simulated - measured) / measured, lowest and highest over the held-out H200 runs",
            "sets": [f"validation/data/{s}_summary.csv" for s in HF_CB_HELD_OUT_SETS],
            "bands": {k: list(v) for k, v in HF_CB_TIME_ERROR_BANDS.items()}}
