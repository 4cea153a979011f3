"""`python -m validation calibrate --quick` on the CPU: valid JSON with every documented key and positive times
(tiny shapes; the GPU run is the real measurement)."""

from __future__ import annotations

import json

from validation.cli import main
from validation.timing.calibrate_gemm import gemm_grid

KEYS = ("device_name", "torch_version", "cuda_version", "measured_at", "gemm", "memory_bound", "launch_floor_ms",
        "sync_ms", "attention", "optimizer")


def test_calibrate_quick_cpu(tmp_path):
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--quick", "--device", "cpu", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    for key in KEYS:
        assert key in data, key
    assert data["launch_floor_ms"] > 0 and data["sync_ms"] > 0
    for key, fields in (("gemm", ("m", "n", "k", "dtype", "kind", "ms", "tflops")),
                        ("memory_bound", ("op", "dtype", "elements", "bytes", "ms", "gbps")),
                        ("attention", ("backend", "mode", "q_len", "kv_len", "dtype", "ms", "tflops")),
                        ("optimizer", ("name", "dtype", "params", "ms"))):
        assert data[key], key
        for row in data[key]:
            assert set(fields) <= set(row), (key, row)
            assert row["ms"] > 0, (key, row)
    assert {r["kind"] for r in data["gemm"]} == {"forward", "grad_input", "grad_weight"}
    assert {r["op"] for r in data["memory_bound"]} >= {"add", "mul", "cast_bf16_fp32", "copy", "rmsnorm",
                                                      "silu_mul", "rope", "softmax", "cross_entropy_fwd_bwd"}
    assert {"flash", "math"} <= {r["backend"] for r in data["attention"]}  # both run on the CPU
    assert {r["name"] for r in data["optimizer"]} == {"adamw", "adamw_fused", "sgd_momentum"}


def test_full_grid_size():
    grid = gemm_grid(quick=False)
    assert 40 <= len(grid) <= 60 and len(set(grid)) == len(grid)


def test_budget_cuts_full_run(tmp_path):
    """Past the time budget every full-size measurement is skipped and listed, and the JSON is still written."""
    out = tmp_path / "cut.json"
    assert main(["calibrate", "--device", "cpu", "--budget-s", "1e-9", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["gemm"] == [] and data["optimizer"] == [] and data["launch_floor_ms"] > 0
    assert len(data["skipped"]) > 60 and all(s["reason"] in ("time budget", "an operand exceeds 8 GiB")
                                             for s in data["skipped"])
