"""`python -m validation report` and the case grids: pure pandas / pure Python, no torch needed."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from estimator.call.backends import DEFAULT_TORCH
from estimator.call.config import AttentionCall
from estimator.call.registry import BACKENDS
from validation.call import kernels, report
from validation.call.case_lists import make_grid
from validation.call.grid import random_sample

MIB = 2**20


def row(backend="math", dtype="bfloat16", mode="forward", measured=100 * MIB, predicted=100 * MIB, ran=None,
        predicted_backend=None, status="ok", supported=True, q_len=1024, time_ms=1.0, predicted_time_ms=1.0,
        n_kernels=0, device="NVIDIA H200", torch_flops=None, predicted_flops=None, **call):
    base = dict(batch=1, q_heads=8, kv_heads=8, head_dim=64, q_len=q_len, kv_len=q_len, causal=0, mask="none",
                dropout=0.0)
    base.update(call)
    return {"id": f"r{len(call)}", "backend": backend, "dtype": dtype, "mode": mode, **base, "status": status,
            "measured_peak_extra_bytes": measured if status == "ok" else None,
            "measured_time_ms": time_ms if status == "ok" else None,
            "ran_backend": (ran or backend) if status == "ok" else "", "n_kernels": n_kernels,
            "torch_flops": torch_flops, "torch_version": "2.11.0+cu130", "device_name": device, "error": "",
            "predicted_supported": supported, "predicted_selected_backend": predicted_backend or backend,
            "predicted_peak_extra_bytes": predicted if supported else None, "predicted_fits": True,
            "predicted_flops": predicted_flops, "predicted_time_ms": predicted_time_ms}


def frame(*rows):
    return report.prepare(pd.DataFrame(list(rows)))


def test_tolerance_is_max_of_3_percent_and_2_mib():
    df = frame(row(measured=100 * MIB, predicted=102.9 * MIB),  # 2.9 %: within
               row(measured=100 * MIB, predicted=96.9 * MIB),  # -3.1 %: outside
               row(measured=10 * MIB, predicted=11.9 * MIB),  # 19 % but 1.9 MiB: within
               row(measured=10 * MIB, predicted=12.1 * MIB))  # 2.1 MiB over 10 MiB: outside
    assert df["peak_within_tol"].tolist() == [True, False, True, False]
    o = report.overall(df)
    assert (o["compared"], o["within"], o["passes"]) == (4, 2, False)
    assert report.overall(frame(*[row() for _ in range(19)], row(predicted=200 * MIB)))["passes"]  # 19/20 = 95 %


def test_error_table_counts_wrong_backend_and_supported_mismatch():
    df = frame(row(backend="auto", ran="efficient", predicted_backend="cudnn"),
               row(backend="auto", ran="cudnn", predicted_backend="cudnn", predicted=110 * MIB),
               row(backend="flash", status="unsupported", supported=True),
               row(backend="flash", supported=False),
               row(backend="flash", status="oom", supported=True))
    table = report.error_table(df).set_index("backend")
    assert table.loc["auto", "wrong_backend"] == 1
    assert table.loc["auto", "within_tol"] == "50.0%"
    assert table.loc["auto", "worst_rel_err"] == "10.0%"
    assert table.loc["flash", "supported_mismatch"] == 2  # ran though predicted unsupported; and the reverse
    assert table.loc["flash", "cases"] == 3 and table.loc["flash", "compared"] == 0
    flops = frame(row(torch_flops=100, predicted_flops=100), row(torch_flops=100, predicted_flops=125), row())
    assert report.error_table(flops)["flops_exact"].tolist() == ["1/2"]


def test_worst_cases_are_sorted_by_error_over_tolerance():
    df = frame(row(measured=100 * MIB, predicted=110 * MIB), row(measured=1000 * MIB, predicted=500 * MIB),
               row(measured=1 * MIB, predicted=1.5 * MIB))
    worst = report.worst_cases(df, 2)
    assert worst["measured_MiB"].tolist() == [1000.0, 100.0]
    assert worst["rel_err"].tolist() == ["-50.0%", "10.0%"]


def test_doubling_table_reports_time_ratios_per_doubling():
    rows = [row(backend="math", q_len=n, time_ms=t, predicted_time_ms=t, measured=n * n)
            for n, t in ((1024, 1.0), (2048, 3.0), (4096, 12.0))]
    rows += [row(backend="flash", q_len=n, time_ms=t, measured=n) for n, t in ((1024, 1.0), (2048, 1.5))]
    table = report.doubling_table(frame(*rows)).set_index("backend")
    assert table.loc["math", "time_x_per_doubling"] == "3.00, 4.00"
    assert table.loc["math", "last_time_x"] == 4.0 and table.loc["math", "peak_x_last"] == 4.0
    assert table.loc["math", "n"] == "1024→4096" and table.loc["math", "verdict"].startswith("≈4×")
    assert "below 4×" in table.loc["flash", "verdict"] and table.loc["flash", "peak_x_last"] == 2.0
    assert table.loc["math", "memory"] == "n² (scores)" and table.loc["flash", "memory"] == "linear"


@pytest.mark.parametrize("call, expected", [
    (dict(dtype="bfloat16"), (6, 0)),  # matmul, mul, float(), softmax, to(bf16), matmul
    (dict(dtype="float32"), (4, 0)),  # no casts
    (dict(dtype="bfloat16", causal=1), (9, 1)),  # + ones, triu, masked_fill_; memcpy of the out-of-place fill
    (dict(dtype="bfloat16", kv_heads=2), (8, 0)),  # + two repeat_interleave copies
    (dict(dtype="float16", mask="bool"), (8, 1)),
    (dict(dtype="float16", mask="float", dropout=0.1), (8, 0)),
    (dict(dtype="bfloat16", mode="forward_backward"), (16, 0)),
    (dict(dtype="float32", mode="forward_backward", causal=1, kv_heads=2), (4 + 2 + 3 + 8 + 1 + 1, 2)),
    # H200 rows of validation/data/h200_calibration.csv (torch 2.11) where 32-bit splits multiply launches:
    (dict(dtype="float16", batch=8, q_heads=32, kv_heads=4, head_dim=128, q_len=3000, kv_len=3000, causal=1), (31, 1)),
    (dict(dtype="float32", batch=4, q_heads=4, kv_heads=4, head_dim=128, q_len=16384, kv_len=16384, dropout=0.1,
          mode="forward_backward"), (42, 0)),
    (dict(dtype="bfloat16", batch=4, q_heads=32, kv_heads=8, head_dim=128, q_len=1, kv_len=131072), (10, 0)),
])
def test_expected_eager_kernel_counts(call, expected):
    r = {"dtype": "bfloat16", "batch": 1, "q_heads": 8, "kv_heads": 8, "head_dim": 64, "q_len": 1024,
         "kv_len": 1024, "causal": 0, "mask": "none", "dropout": 0.0, "mode": "forward", **call}
    assert kernels.expected_eager_kernels(r) == expected


def test_tensor_iterator_splits_past_32_bit_offsets():
    assert kernels.launches((1, 16, 8192, 8192), 2) == 1  # 2**31 bytes: the last offset is 2**31 - 1
    assert kernels.launches((1, 16, 8192, 8192), 4) == 2
    assert kernels.launches((1, 16, 16384, 16384), 2) == 4
    assert kernels.launches((3, 2**30), 1) == 3  # 3 -> 1 + 2 -> 1 + (1 + 1)


def test_kernel_table_sets_eager_beside_fused_backends():
    df = frame(row(backend="eager", n_kernels=6), row(backend="eager", n_kernels=7),  # B1 H8 L1024 D64 bf16
               row(backend="cudnn", n_kernels=1), row(backend="math", n_kernels=20),
               row(backend="eager", n_kernels=9, causal=1))
    table = kernels.kernel_table(df).set_index("variant")
    assert table.loc["16-bit", "eager_expected"] == "6" and table.loc["16-bit", "eager_measured"] == "6–7"
    assert table.loc["16-bit", "eager_match"] == "1/2" and table.loc["16-bit", "cudnn"] == "1"
    assert table.loc["16-bit causal", "eager_match"] == "1/1"


def test_report_cli_on_a_run_csv_with_predictions(tmp_path, capsys):
    path = tmp_path / "out.csv"
    pd.DataFrame([row(), row(backend="flash", status="unsupported", supported=False),
                  row(predicted=150 * MIB)]).to_csv(path, index=False)
    (tmp_path / "out.csv.meta.json").write_text(json.dumps({"driver": "580.1", "command": "python -m validation run"}))
    from validation.cli import main
    assert main(["report", str(path), "--md", str(tmp_path / "r.md"), "--recorded"]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "1/2 = 50.0%" in text and "does NOT meet" in text and "driver 580.1" in text
    for heading in ("## Peak error per backend × mode × dtype", "## Worst", "## Doubling n", "## Kernels launched"):
        assert heading in text


def test_report_pools_several_files(tmp_path):
    from validation.cli import main
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    pd.DataFrame([row(), row()]).to_csv(a, index=False)
    pd.DataFrame([row(predicted=150 * MIB)]).to_csv(b, index=False)
    assert main(["report", str(a), str(b), "--recorded", "--md", str(tmp_path / "r.md")]) == 0
    assert "2/3 = 66.7%" in (tmp_path / "r.md").read_text()


def test_report_re_predicts_with_the_current_estimator_unless_told_to_keep_the_recorded(tmp_path):
    from estimator.call.attention import estimate_call
    from estimator.hardware import get_gpu
    path = tmp_path / "out.csv"
    pd.DataFrame([row(backend="math", predicted=1)]).to_csv(path, index=False)
    call = AttentionCall(batch=1, q_heads=8, kv_heads=8, head_dim=64, q_len=1024, kv_len=1024, backend="math")
    expected = estimate_call(call, get_gpu("h200"), DEFAULT_TORCH).peak_extra_bytes
    df, meta = report.load(str(path))
    assert df["predicted_peak_extra_bytes"].tolist() == [expected] and meta["predictions"] == "current estimator"
    df, meta = report.load(str(path), recorded=True)
    assert df["predicted_peak_extra_bytes"].tolist() == [1] and meta["predictions"] == "as recorded by the run"


def test_report_rejects_a_csv_that_is_not_a_run_output(tmp_path, capsys):
    from validation.cli import main
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    assert main(["report", str(path)]) == 2
    assert "lacks columns" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.csv")]) == 2


def test_report_imports_neither_torch_nor_ui_libraries():
    code = "import sys, validation.call.report, validation.call.grid; " \
           "print(sorted(m for m in ('torch', 'streamlit', 'plotly') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_runner_imports_no_ui_libraries():
    code = "import sys, validation.call.runner, validation.cli; print(sorted(m for m in ('streamlit', 'plotly') " \
           "if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("kind", ["nsweep", "matrix", "random", "calibration", "cpu", "sweep"])
def test_every_grid_row_is_a_valid_call_with_a_unique_id(kind):
    rows = make_grid(kind, n=50)
    assert rows and len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        AttentionCall(**{k: v for k, v in r.items() if k != "id"})


def test_nsweep_doubles_n_and_random_is_seeded():
    rows = make_grid("nsweep")
    math_n = [r["q_len"] for r in rows if r["backend"] == "math"]
    assert all(b == 2 * a for a, b in zip(math_n, math_n[1:], strict=False)) and len(math_n) >= 8
    assert random_sample(30, seed=3) == random_sample(30, seed=3) != random_sample(30, seed=4)
    sample = random_sample(300, seed=0)
    assert {r["backend"] for r in sample} == set(BACKENDS)
    assert any(r["q_len"] <= 4 for r in sample)  # decode shapes are in the space


def test_unknown_grid_kind_or_option_is_a_value_error():
    with pytest.raises(ValueError, match="kind: unknown grid"):
        make_grid("everything")
    with pytest.raises(ValueError, match="mode: unknown"):
        make_grid("nsweep", mode="train")
    rows = make_grid("nsweep", dtype="float32", mode="forward_backward", stop=1024)
    assert {(r["dtype"], r["mode"]) for r in rows} == {("float32", "forward_backward")}
    assert max(r["q_len"] for r in rows) == 1024


@pytest.mark.parametrize("device_name, gpu", [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA L4", "l4"), ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("Tesla T4", "t4"), ("cpu", None),
])
def test_device_names_map_to_the_catalog(device_name, gpu):
    from estimator.hardware import gpu_from_device_name
    assert gpu_from_device_name(device_name) == gpu
