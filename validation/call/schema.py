"""What a validation run's CSV holds, and the one peak tolerance, max(3 %, 2 MiB) (docs/contract.md §1, §5).

Pure Python: the runner (torch), the report (pandas) and the app all read their columns and the tolerance here.
"""

from __future__ import annotations

from estimator.call.config import CALL_COLUMNS, SIZE_LIMITS
from estimator.units import MIB

CALL_FIELDS = CALL_COLUMNS  # the input columns of one call, contract §2 order
REQUIRED_FIELDS = tuple(SIZE_LIMITS)  # batch, q_heads, kv_heads, head_dim, q_len, kv_len
MEASURED = ("status", "measured_peak_extra_bytes", "measured_time_ms", "ran_backend", "n_kernels",
            "torch_flops", "first_call_ms", "torch_version", "device_name", "error")
PREDICTED = ("predicted_supported", "predicted_selected_backend", "predicted_peak_extra_bytes", "predicted_fits",
             "predicted_flops", "predicted_time_ms", "predicted_error")
COMPARED = ("rel_err_peak", "abs_err_peak_bytes", "peak_within_tol", "rel_err_time", "rel_err_flops")
OUTPUT_FIELDS = MEASURED + PREDICTED + COMPARED
STATUSES = ("ok", "oom", "unsupported", "error", "skipped")
# AttentionCall's defaults, for optional columns a case list leaves out or blank.
CALL_DEFAULTS = {"backend": "auto", "dtype": "bfloat16", "causal": "0", "mask": "none", "dropout": "0.0",
                 "mode": "forward"}

# A predicted peak is right when it is within max(3 % of the measured peak, 2 MiB) of it.
TOL_REL, TOL_ABS_BYTES = 0.03, 2 * MIB
TARGET_SHARE = 0.95  # of the measured calls with a prediction


def tolerance_bytes(measured_peak):
    """max(3 % of the measured peak, 2 MiB): a number for a number, a pandas Series for a Series (NaN stays NaN)."""
    scaled = measured_peak * TOL_REL
    return scaled.clip(lower=TOL_ABS_BYTES) if hasattr(scaled, "clip") else max(scaled, TOL_ABS_BYTES)
