"""`python -m validation` never loses results: an earlier output is not emptied without --force, a case whose
process dies is a crash that --resume measures again (only a CUDA out-of-memory error is `oom`), SIGTERM keeps
the finished rows like Ctrl-C, the child's warm-up is off the case's clock, a failed write keeps every whole row
and no half one, an unmodelled --torch is refused before anything runs, a bad byte costs its row, and the
report and calibration writers go through the atomic writer (estimator/files.py)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_validation_runner import SMALL, fake_predict, read_out, write_cases  # noqa: F401 - a fixture
from validation.call import runner
from validation.call import sweep as sweep_module
from validation.call.grid import case, number
from validation.call.rows import call_from_row
from validation.call.runner import RunOptions
from validation.call.sweep import sweep
from validation.cli import main

ROOT = Path(__file__).parent.parent


def ok(call, device, repeats):
    return {"status": "ok", "measured_peak_extra_bytes": 1}


def cases(n: int) -> list[dict]:
    return number([case("math", "float32", batch=1, q_heads=1, head_dim=16, q_len=16 * (i + 1)) for i in range(n)],
                  "t")


def one_line_error(rc, err, needle):
    assert rc == 2 and err.startswith("error:") and err.strip().count("\n") == 0 and needle in err, err


# --- an earlier output -------------------------------------------------------------------------------------


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_a_second_run_without_resume_keeps_the_earlier_output(tmp_path, fake_predict, capsys):  # noqa: F811
    inp = write_cases(tmp_path, [case("math", "float32", **SMALL)])
    out = tmp_path / "o.csv"
    argv = ["run", "--in", str(inp), "--out", str(out), "--device", "cpu", "--repeats", "1"]
    assert main(argv) == 0
    before = out.read_bytes()
    capsys.readouterr()
    one_line_error(main(argv), capsys.readouterr().err, "--resume continues that run, --force replaces it")
    assert out.read_bytes() == before
    assert main([*argv, "--force"]) == 0 and len(read_out(out)) == 1


def test_run_refuses_writing_over_its_input(tmp_path, capsys):
    inp = write_cases(tmp_path, [case("math", "float32", **SMALL)])
    before = inp.read_bytes()
    one_line_error(main(["run", "--in", str(inp), "--out", str(inp), "--device", "cpu"]), capsys.readouterr().err,
                   "is the input file")
    assert inp.read_bytes() == before


def test_a_full_disk_mid_sweep_keeps_every_whole_row_and_no_half_one(tmp_path, fake_predict, monkeypatch):  # noqa: F811
    rows = cases(5)
    path = tmp_path / "o.csv"
    written = []

    class FillingDisk(csv.DictWriter):
        def writerow(self, rowdict):
            if rowdict["id"] == "id":  # the header (DictWriter.writeheader writes it through writerow)
                return super().writerow(rowdict)
            if len(written) == 3:
                self.writer.writerow(["half", "a", "row"])  # the first bytes of the row reach the file
                self.writer = None
                raise OSError(28, "No space left on device")
            written.append(rowdict["id"])
            return super().writerow(rowdict)

    monkeypatch.setattr(sweep_module.csv, "DictWriter", FillingDisk)
    with pytest.raises(ValueError, match=r"No space left on device.*the 3 row\(s\) measured before it are kept"):
        sweep(list(rows[0]), rows, str(path), RunOptions(), measure_fn=ok)
    monkeypatch.undo()
    assert [r["id"] for r in read_out(path)] == written == ["t-0000", "t-0001", "t-0002"]
    assert path.read_text().endswith("\n") and "half" not in path.read_text()


# --- a crashed case, SIGTERM, the warm-up -------------------------------------------------------------------


def test_a_crashed_case_is_measured_again_by_resume(tmp_path, fake_predict):  # noqa: F811
    rows = cases(3)
    path = tmp_path / "o.csv"

    def crashing(call, device, repeats):
        if call.q_len == 32:
            return {"status": "error", "error": f"{runner.CRASH} the case's process was killed (SIGKILL)"}
        return ok(call, device, repeats)

    sweep(list(rows[0]), rows, str(path), RunOptions(), measure_fn=crashing)
    assert [r["status"] for r in read_out(path)] == ["ok", "error", "ok"]
    again = []
    sweep(list(rows[0]), rows, str(path), RunOptions(), resume=True,
          measure_fn=lambda call, device, repeats: again.append(call.q_len) or ok(call, device, repeats))
    out = read_out(path)
    assert again == [32] and sorted(r["id"] for r in out) == ["t-0000", "t-0001", "t-0002"]
    assert all(r["status"] == "ok" for r in out)


def slow_first_call(call, device, repeats):  # module level: the watchdog's child imports it by name
    """The first call in a process pays a one-off cost (a CUDA context, kernel loading), later ones do not."""
    if not getattr(slow_first_call, "warm", False):
        slow_first_call.warm = True
        time.sleep(6)
    return {"status": "ok", "measured_peak_extra_bytes": 1}


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_the_childs_warm_up_is_not_the_first_cases_time():
    worker = runner.CaseWorker("cpu", measure_ref="tests.test_validation_safety:slow_first_call")
    try:
        result = worker.measure(call_from_row(case("math", "float32", **SMALL)), RunOptions(timeout_s=4))
        assert result["status"] == "ok", result
    finally:
        worker.stop()


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_sigterm_keeps_the_finished_rows_and_exits_cleanly(tmp_path):
    rows = cases(400)
    inp = tmp_path / "in.csv"
    with open(inp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out = tmp_path / "o.csv"
    proc = subprocess.Popen([sys.executable, "-m", "validation", "run", "--in", str(inp), "--out", str(out),
                             "--device", "cpu", "--repeats", "1"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and len(read_out(out)) >= 2:
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr
    assert "terminated (SIGTERM): the rows measured so far are in" in stderr and "Traceback" not in stderr, stderr
    kept = read_out(out)
    assert 2 <= len(kept) < 400 and all(r["status"] for r in kept)


# --- input checks -----------------------------------------------------------------------------------------


def test_an_unmodelled_torch_version_is_refused_before_the_sweep(tmp_path, capsys):
    inp = write_cases(tmp_path, [case("math", "float32", **SMALL)])
    out = tmp_path / "o.csv"
    one_line_error(main(["run", "--in", str(inp), "--out", str(out), "--device", "cpu", "--torch", "1.0"]),
                   capsys.readouterr().err, "--torch: unknown version '1.0'")
    assert not out.exists()


def test_a_bad_byte_costs_its_row_with_the_line_number(tmp_path, fake_predict):  # noqa: F811
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,backend,dtype,batch,q_heads,kv_heads,head_dim,q_len,kv_len,mode\n"
                     b"a,math,float32,1,1,1,16,32,32,forward\n"
                     b"b\xff,math,float32,1,1,1,16,32,32,forward\n"
                     b"c,math,float32,1,1,1,16,32,32,forward\n")
    out = tmp_path / "o.csv"
    assert main(["run", "--in", str(path), "--out", str(out), "--device", "cpu", "--repeats", "1"]) == 0
    rows = read_out(out)
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert rows[1]["error"].startswith("line 3: not UTF-8") and rows[1]["id"] == "b\ufffd"


# --- report and calibrate outputs --------------------------------------------------------------------------


@pytest.fixture
def run_output(tmp_path, fake_predict):  # noqa: F811
    inp = write_cases(tmp_path, [case("math", "float32", **SMALL)])
    out = tmp_path / "o.csv"
    assert main(["run", "--in", str(inp), "--out", str(out), "--device", "cpu", "--repeats", "1"]) == 0
    return out


def test_report_to_a_full_disk_says_what_failed(run_output, capsys):
    capsys.readouterr()
    one_line_error(main(["report", str(run_output), "--md", "/dev/full"]), capsys.readouterr().err,
                   "--md /dev/full: cannot write (No space left on device)")


def test_report_failing_mid_write_keeps_the_earlier_report(run_output, tmp_path, monkeypatch, capsys):
    md = tmp_path / "r.md"
    md.write_text("earlier report\n")
    import estimator.files as files

    real = files.os.fsync

    def full(fd):
        os.write(fd, b"half a report")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full)
    capsys.readouterr()
    one_line_error(main(["report", str(run_output), "--md", str(md)]), capsys.readouterr().err, "--md")
    monkeypatch.setattr(files.os, "fsync", real)
    assert md.read_text() == "earlier report\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_report_refuses_writing_over_the_run(run_output, capsys):
    before = run_output.read_bytes()
    capsys.readouterr()
    one_line_error(main(["report", str(run_output), "--md", str(run_output)]), capsys.readouterr().err,
                   "is the input file")
    assert run_output.read_bytes() == before


def test_model_report_outputs_are_refused_over_inputs_and_say_what_failed(tmp_path, capsys):
    from validation.model import model_report

    src = tmp_path / "m.csv"
    src.write_text("family\n")
    one_line_error(model_report.main([str(src), "--csv-out", str(src)]), capsys.readouterr().err,
                   "is the input file")
    assert src.read_text() == "family\n"


@pytest.mark.parametrize("value", ["nan", "-5", "inf", "1e9"])
def test_calibrate_budget_must_be_a_finite_number_of_seconds(tmp_path, capsys, value):
    out = tmp_path / "c.json"
    one_line_error(main(["calibrate", "--out", str(out), "--quick", "--device", "cpu", "--budget-s", value]),
                   capsys.readouterr().err, "--budget-s")
    assert not out.exists()


def test_calibrate_json_is_strict_and_written_whole(tmp_path, monkeypatch):
    from validation.timing import calibrate as cal

    def nan_launch(device):
        return {"launch_floor_ms": float("nan"), "sync_ms": 0.001, "launch_sync_ms": 0.002}

    monkeypatch.setattr(cal, "measure_launch", nan_launch)
    out = tmp_path / "c.json"
    out.write_text('{"earlier": true}\n')
    with pytest.raises(ValueError, match=r"launch_floor_ms \(nan\) is not a finite number"):
        cal.calibrate(str(out), device="cpu", quick=True, log=lambda msg: None)
    assert json.loads(out.read_text()) == {"earlier": True}
