"""The hf-cb time error band the serve JSON carries is what the committed held-out H200 sets give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from estimator.serve.bands import HF_CB_HELD_OUT_SETS, HF_CB_TIME_ERROR_BANDS, time_error_band

ROOT = Path(__file__).resolve().parents[1]
CASES = {"h200_serve_heldout4": "h200_heldout4.txt", "h200_serve_heldout5": "h200_heldout5.txt",
         "h200_serve_heldout6": "h200_heldout6.txt", "h200_serve_heldout7": "h200_heldout7.txt"}


@pytest.mark.slow
def test_the_band_is_recomputed_from_the_committed_held_out_sets():
    from validation.serving.compare import compare_rows

    rows = []
    for name in HF_CB_HELD_OUT_SETS:
        rows += compare_rows(str(ROOT / "validation/serving/cases" / CASES[name]),
                             str(ROOT / "validation/data" / f"{name}_summary.csv"))
    assert len(rows) == 23
    columns = {"throughput_output_tokens_per_s": "throughput_error", "ttft_ms.p50": "ttft_p50_ms_error",
               "ttft_ms.p99": "ttft_p99_ms_error", "tpot_ms.p50": "tpot_p50_ms_error",
               "tpot_ms.p99": "tpot_p99_ms_error"}
    for metric, column in columns.items():
        errors = [r[column] for r in rows if r[column] is not None]
        assert HF_CB_TIME_ERROR_BANDS[metric] == pytest.approx((min(errors), max(errors)), abs=1e-3), metric


def test_the_serve_json_carries_the_band_for_hf_cb_only(capsys):
    from estimator.cli import serve

    argv = ["--preset", "llama-3.1-8b", "--gpu", "h200", "--rate", "2", "--requests", "8", "--prompt-tokens", "512",
            "--output-tokens", "16", "--seed", "1", "--json"]
    assert serve.main([*argv, "--engine", "hf-cb"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["time_error_band"] == time_error_band("hf-cb")
    assert serve.main([*argv, "--engine", "vllm"]) == 0
    assert "time_error_band" not in json.loads(capsys.readouterr().out)
