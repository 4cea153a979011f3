"""`python -m validation run` on the CPU, and its bookkeeping: OOM (through a fake), skipped cases,
time-outs, incremental writes and --resume, malformed input. Small shapes: the whole file runs in seconds."""

from __future__ import annotations

import csv
import sys
import time
import types

import pandas as pd
import pytest
import torch

from estimator.call.backends import DEFAULT_TORCH
from validation.call import runner
from validation.call import sweep as sweep_module
from validation.call.grid import case, number, write_csv
from validation.call.guard import input_bytes
from validation.call.rows import call_from_row, read_cases
from validation.call.runner import RunOptions
from validation.call.sweep import sweep
from validation.cli import main

SMALL = dict(batch=1, q_heads=2, head_dim=16, q_len=64)


def fake_predict_module(peak_bytes=1 << 20, time_ms=0.01, supported=True):
    """A stand-in for estimator.call.table with fixed predictions, so the bookkeeping tests do not depend on
    the estimator's numbers."""
    def predict_frame(df, gpu, torch_version=DEFAULT_TORCH):
        out = df.copy()
        out["supported"] = supported
        out["selected_backend"] = [b if b != "auto" else "cudnn" for b in df["backend"]]
        out["peak_extra_bytes"] = peak_bytes
        out["fits"] = True
        out["flops"] = 1000
        out["time_ms"] = time_ms
        return out
    return types.SimpleNamespace(predict_frame=predict_frame)


@pytest.fixture
def fake_predict(monkeypatch):
    monkeypatch.setitem(sys.modules, "estimator.call.table", fake_predict_module())


def read_out(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def write_cases(tmp_path, rows, name="in.csv"):
    path = tmp_path / name
    write_csv(number(rows, "t"), path)
    return path


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_cli_run_on_cpu_writes_ok_rows_with_peaks_and_predictions(tmp_path, fake_predict, capsys):
    inp = write_cases(tmp_path, [case("math", "float32", **SMALL), case("eager", "bfloat16", mode="forward_backward",
                                                                         causal=1, **SMALL),
                                 case("flash", "float32", kv_heads=1, **SMALL), case("efficient", "float32", **SMALL)])
    out = tmp_path / "out.csv"
    assert main(["run", "--in", str(inp), "--out", str(out), "--device", "cpu", "--repeats", "1"]) == 0
    rows = read_out(out)
    assert [r["status"] for r in rows] == ["ok", "ok", "ok", "unsupported"]
    for r in rows[:3]:
        assert int(r["measured_peak_extra_bytes"]) > 0
        assert float(r["measured_time_ms"]) > 0
        assert r["predicted_peak_extra_bytes"] == str(1 << 20)
        expected = (1 << 20) - int(r["measured_peak_extra_bytes"])
        assert int(r["abs_err_peak_bytes"]) == expected
        assert r["device_name"] == "cpu" and r["torch_version"] == torch.__version__
    assert [r["ran_backend"] for r in rows[:3]] == ["math", "eager", "flash"]
    assert int(rows[0]["torch_flops"]) == 4 * 1 * 2 * 64 * 64 * 16  # math forward: two bmms, 2·BHLSD each
    assert "cpu" in capsys.readouterr().err  # says plainly that no GPU was used
    assert (tmp_path / "out.csv.meta.json").exists()


def test_oom_from_measure_is_recorded_memory_freed_and_sweep_goes_on(tmp_path, fake_predict, monkeypatch):
    freed = []
    monkeypatch.setattr(runner, "free_memory", lambda device, collect=True: freed.append(collect))
    calls = []

    def measure(call, device, repeats):
        calls.append(call.q_len)
        if call.q_len == 128:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        return {"status": "ok", "measured_peak_extra_bytes": 1 << 20, "measured_time_ms": 1.0}

    rows = number([case("math", "float32", batch=1, q_heads=2, head_dim=16, q_len=n) for n in (64, 128, 256)], "t")
    counts = sweep(list(rows[0]), rows, str(tmp_path / "o.csv"), RunOptions(repeats=1), measure_fn=measure)
    out = read_out(tmp_path / "o.csv")
    assert [r["status"] for r in out] == ["ok", "oom", "ok"]
    assert "out of memory" in out[1]["error"] and out[1]["measured_peak_extra_bytes"] == ""
    assert calls == [64, 128, 256] and freed == [False, True, False]  # a full gc pass after the failure only
    assert counts["oom"] == 1 and counts["ok"] == 2


def test_case_predicted_beyond_free_memory_is_skipped_unless_forced(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "estimator.call.table", fake_predict_module(peak_bytes=1))
    monkeypatch.setattr(sweep_module, "free_bytes", lambda device: 4096)  # the CPU guard uses the math path's peak
    rows = number([case("math", "float32", **SMALL)], "t")
    ran = []

    def measure(call, device, repeats):
        ran.append(call)
        return {"status": "ok", "measured_peak_extra_bytes": 5}

    sweep(list(rows[0]), rows, str(tmp_path / "a.csv"), RunOptions(), measure_fn=measure)
    out = read_out(tmp_path / "a.csv")[0]
    assert out["status"] == "skipped" and "exceeds free cpu memory" in out["error"] and not ran
    sweep(list(rows[0]), rows, str(tmp_path / "b.csv"), RunOptions(force=True), measure_fn=measure)
    assert read_out(tmp_path / "b.csv")[0]["status"] == "ok" and len(ran) == 1


def test_guard_need_on_cuda_is_inputs_plus_predicted_peak():
    call = call_from_row(case("math", "bfloat16", batch=1, q_heads=1, head_dim=64, q_len=1024))
    inputs = input_bytes(call)
    assert inputs == 3 * 1024 * 64 * 2
    pred = {"predicted_peak_extra_bytes": 1000, "predicted_supported": True, "predicted_time_ms": 2.0}
    assert runner.guard_need(call, pred, "cuda", "h200") == (inputs + 1000, 0.002)
    # no prediction, or "unsupported": the requested backend's sequence as if it ran, never "run blind"
    for blind in ({}, {"predicted_supported": "false", "predicted_peak_extra_bytes": ""}):
        assert runner.guard_need(call, blind, "cuda", "h200")[0] > inputs + 1024 * 1024 * 2


def test_cpu_guard_uses_the_math_path_not_the_gpu_prediction():
    # The row: 4 MiB predicted on the GPU (flash); the process grew to 5.1 GB on a CPU (math, dropout).
    call = call_from_row(case("auto", "bfloat16", batch=1, q_heads=2, kv_heads=2, head_dim=64, q_len=16384,
                              dropout=0.1))
    pred = {"predicted_peak_extra_bytes": 4 << 20, "predicted_supported": True, "predicted_time_ms": 0.5}
    need, seconds = runner.guard_need(call, pred, "cpu", "h200")
    assert need > 6 * 10**9 and seconds > 0
    opts = RunOptions(margin_fraction=0.0, margin_bytes=0, timeout_s=0)
    assert "exceeds free cpu memory" in runner.skip_reason(call, pred, opts, free=4 * 10**9)
    assert runner.skip_reason(call, pred, opts, free=need) == ""
    # a predicted-time cap on the CPU as well
    assert "exceeds --timeout-s" in runner.skip_reason(call, pred, RunOptions(timeout_s=seconds), free=1 << 50)


def test_bool_mask_temporary_is_in_the_need():
    plain = call_from_row(case("math", "float32", batch=1, q_heads=1, head_dim=16, q_len=4096))
    masked = call_from_row(case("math", "float32", batch=1, q_heads=1, head_dim=16, q_len=4096, mask="bool"))
    pred = {"predicted_peak_extra_bytes": 0}
    extra = runner.guard_need(masked, pred, "cuda", "h200")[0] - runner.guard_need(plain, pred, "cuda", "h200")[0]
    assert extra == 4096 * 4096 * (1 + 4)  # the bool mask and its fp32 rand temporary


def test_absent_cpu_backends_are_unsupported_without_running(tmp_path, fake_predict):
    rows = number([case("efficient", "float32", **SMALL), case("cudnn", "float32", **SMALL)], "t")
    ran = []
    sweep(list(rows[0]), rows, str(tmp_path / "u.csv"), RunOptions(),
          measure_fn=lambda call, device, repeats: ran.append(call) or {"status": "ok"})
    assert [r["status"] for r in read_out(tmp_path / "u.csv")] == ["unsupported"] * 2 and not ran


def test_cpu_allocation_failure_is_oom(tmp_path, fake_predict):
    def measure(call, device, repeats):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 17179869184 bytes. Error code 12 (Cannot allocate memory)")

    rows = number([case("math", "float32", **SMALL)], "t")
    sweep(list(rows[0]), rows, str(tmp_path / "m.csv"), RunOptions(), measure_fn=measure)
    assert read_out(tmp_path / "m.csv")[0]["status"] == "oom"


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0, 1e12])
def test_timeout_must_be_a_finite_number_of_seconds(value):
    with pytest.raises(ValueError, match="timeout_s"):
        RunOptions(timeout_s=value)


@pytest.mark.parametrize("value", ["inf", "nan", "-3"])
def test_cli_timeout_inf_nan_is_a_one_line_error(tmp_path, value, capsys):
    inp = write_cases(tmp_path, [case("math", "float32", **SMALL)])
    assert main(["run", "--in", str(inp), "--out", str(tmp_path / "o.csv"), "--timeout-s", value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: timeout_s") and "\n" not in err


def slow_measure(call, device, repeats):  # module level: the watchdog's child imports it by name
    """One long operation for q_len 128 (an 8192² matmul on one thread: ~1 TFLOP), quick otherwise."""
    if call.q_len == 128:
        torch.set_num_threads(1)
        a = torch.ones(8192, 8192)
        a @ a  # noqa: B018 - SIGALRM would land only after this returns
    return {"status": "ok", "measured_peak_extra_bytes": 1}


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_watchdog_stops_a_case_mid_operation_and_the_next_case_runs():
    worker = runner.CaseWorker("cpu", measure_ref="tests.test_validation_runner:slow_measure")
    opts = RunOptions(timeout_s=1.0)
    try:
        worker._start()
        t0 = time.monotonic()
        hung = worker.measure(call_from_row(case("math", "float32", batch=1, q_heads=1, head_dim=16, q_len=128)),
                              opts)
        stopped_after = time.monotonic() - t0
        assert hung["status"] == "error" and "watchdog" in hung["error"]
        assert stopped_after < 10  # not a speed check: the matmul alone takes longer than this
        assert worker.measure(call_from_row(case("math", "float32", **SMALL)), opts)["status"] == "ok"
    finally:
        worker.stop()


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_a_child_killed_by_sigkill_is_a_crash_not_oom():
    worker = runner.CaseWorker("cpu", measure_ref="tests.test_validation_runner:killed_measure")
    try:
        result = worker.measure(call_from_row(case("math", "float32", **SMALL)), RunOptions(timeout_s=60))
        assert result["status"] == "error" and result["error"].startswith(runner.CRASH)
        assert "SIGKILL" in result["error"] and "--resume" in result["error"]
    finally:
        worker.stop()


def killed_measure(call, device, repeats):  # what the kernel's OOM killer does to a process
    import os
    import signal
    if call.q_len == SMALL["q_len"]:  # the case, not the child's warm-up calls
        os.kill(os.getpid(), signal.SIGKILL)
    return {"status": "ok", "measured_peak_extra_bytes": 1}


def test_per_case_time_limit_turns_a_hung_case_into_an_error_row(tmp_path, fake_predict):
    def measure(call, device, repeats):
        if call.q_len == 128:
            time.sleep(30)
        return {"status": "ok", "measured_peak_extra_bytes": 1}

    rows = number([case("math", "float32", batch=1, q_heads=1, head_dim=16, q_len=n) for n in (128, 64)], "t")
    sweep(list(rows[0]), rows, str(tmp_path / "t.csv"), RunOptions(timeout_s=0.2), measure_fn=measure)
    out = read_out(tmp_path / "t.csv")
    assert out[0]["status"] == "error" and out[0]["error"].startswith("timeout")
    assert out[1]["status"] == "ok"


def test_rows_are_on_disk_as_measured_and_resume_finishes_the_sweep(tmp_path, fake_predict):
    rows = number([case("math", "float32", batch=1, q_heads=1, head_dim=16, q_len=16 * (i + 1)) for i in range(6)], "t")
    path = tmp_path / "i.csv"
    seen = []

    def interrupted(call, device, repeats):
        if len(seen) == 3:
            raise KeyboardInterrupt
        seen.append(call.q_len)
        assert len(read_out(path)) == len(seen) - 1  # the previous rows are already flushed
        return {"status": "ok", "measured_peak_extra_bytes": 1}

    with pytest.raises(KeyboardInterrupt):
        sweep(list(rows[0]), rows, str(path), RunOptions(), measure_fn=interrupted)
    assert [r["id"] for r in read_out(path)] == ["t-0000", "t-0001", "t-0002"]
    again = []
    sweep(list(rows[0]), rows, str(path), RunOptions(), resume=True,
             measure_fn=lambda call, device, repeats: again.append(call.q_len) or {"status": "ok"})
    assert [r["id"] for r in read_out(path)] == [f"t-{i:04d}" for i in range(6)]
    assert again == [64, 80, 96]
    other = [{k: v for k, v in r.items() if k != "mask"} for r in rows]
    with pytest.raises(ValueError, match="other columns"):
        sweep(list(other[0]), other, str(path), RunOptions(), resume=True)


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_malformed_rows_become_error_rows_and_the_rest_is_measured(tmp_path, fake_predict):
    path = tmp_path / "bad.csv"
    path.write_text("id,backend,dtype,batch,q_heads,kv_heads,head_dim,q_len,kv_len,mode\n"
                    "a,math,float32,1,1,1,16,32,32,forward\n"
                    "b,math,float32,abc,1,1,16,32,32,forward\n"
                    "c,math,float32,1,4,3,16,32,32,forward\n"
                    "d,math,float99,1,1,1,16,32,32,forward\n"
                    "e,math,float32,1,1,1,16,32,32,forward,surplus\n"
                    "f,math,float32,1,1,1,16,,32,forward\n"
                    "g,math,float32,1,1,1,16,32,32,forward\n")
    out = tmp_path / "o.csv"
    assert main(["run", "--in", str(path), "--out", str(out), "--device", "cpu", "--repeats", "1"]) == 0
    rows = {r["id"]: r for r in read_out(out)}
    assert [rows[k]["status"] for k in "abcdefg"] == ["ok", "error", "error", "error", "error", "error", "ok"]
    assert rows["b"]["error"].startswith("batch:")
    assert rows["c"]["error"].startswith("kv_heads:")
    assert rows["d"]["error"].startswith("dtype:")
    assert rows["e"]["error"].startswith("row:")
    assert rows["f"]["error"].startswith("q_len:")
    assert main(["report", str(out), "--md", str(tmp_path / "r.md")]) == 0  # the report copes with them too
    assert "| math | float32 | forward | malformed row | batch:" in (tmp_path / "r.md").read_text()


@pytest.mark.parametrize("content, message", [
    ("", "empty file"),
    ("backend,dtype,batch,q_heads\nmath,float32,1,1\n", "missing columns kv_heads, head_dim, q_len, kv_len"),
    ("batch,batch,q_heads,kv_heads,head_dim,q_len,kv_len\n1,1,1,1,1,1,1\n", "duplicate columns batch"),
])
def test_malformed_input_file_is_one_clear_line_and_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "in.csv"
    path.write_text(content)
    assert main(["run", "--in", str(path), "--out", str(tmp_path / "o.csv"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --in") and message in err[0]


def test_missing_and_binary_input_files(tmp_path, capsys):
    assert main(["run", "--in", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "o.csv")]) == 2
    assert "no such file" in capsys.readouterr().err
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 50)
    assert main(["run", "--in", str(binary), "--out", str(tmp_path / "o.csv")]) == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_output_columns_of_an_earlier_run_are_not_duplicated(tmp_path, fake_predict):
    inp = write_cases(tmp_path, [case("math", "float32", **SMALL)])
    first, second = tmp_path / "1.csv", tmp_path / "2.csv"
    assert main(["run", "--in", str(inp), "--out", str(first), "--device", "cpu", "--repeats", "1"]) == 0
    inputs, rows = read_cases(str(first))
    assert "status" not in inputs and "predicted_time_ms" not in inputs
    assert main(["run", "--in", str(first), "--out", str(second), "--device", "cpu", "--repeats", "1"]) == 0
    header = pd.read_csv(second).columns
    assert len(header) == len(set(header)) and read_out(second)[0]["status"] == "ok"


def test_cuda_requested_without_gpu_is_a_plain_error(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")  # the CPU CI is where this case exists
    inp = write_cases(tmp_path, [case("math", "float32", **SMALL)])
    assert main(["run", "--in", str(inp), "--out", str(tmp_path / "o.csv"), "--device", "cuda"]) == 2
    assert "cuda requested but torch sees no GPU" in capsys.readouterr().err


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_cli_run_on_cpu_with_the_real_estimator_puts_its_predictions_beside(tmp_path):
    inp = write_cases(tmp_path, [case("math", "float32", batch=1, q_heads=4, head_dim=32, q_len=256),
                                 case("eager", "bfloat16", batch=1, q_heads=4, kv_heads=2, head_dim=32, q_len=256,
                                      causal=1),
                                 case("flash", "float32", **SMALL)])
    out = tmp_path / "out.csv"
    assert main(["run", "--in", str(inp), "--out", str(out), "--device", "cpu", "--repeats", "1"]) == 0
    math, eager, flash = read_out(out)
    for r in (math, eager):
        assert r["status"] == "ok" and int(r["measured_peak_extra_bytes"]) > 0
        assert r["predicted_selected_backend"] == r["ran_backend"] == r["backend"]
        assert r["peak_within_tol"] == "True"  # CPU forward peaks of math and eager follow the CUDA formulas
        assert abs(float(r["rel_err_peak"])) < 0.01 and float(r["predicted_time_ms"]) > 0
    assert flash["status"] == "ok" and flash["predicted_supported"] == "false"  # no fp32 flash on a GPU


def test_ctrl_c_in_the_cli_says_where_the_rows_are(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "sweep", interrupted)
    inp = write_cases(tmp_path, [case("math", "float32", **SMALL)])
    assert main(["run", "--in", str(inp), "--out", str(tmp_path / "o.csv"), "--device", "cpu"]) == 130
    assert "--resume continues" in capsys.readouterr().err
