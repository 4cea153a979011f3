"""The estimator's command lines never destroy or half-write a file: an output that is the input is refused,
every output is written through a temporary file renamed when whole (a failure mid-stream leaves the earlier
file intact and no temporary behind), a stray quote costs one row, a user's own `error` column survives, and
calibration or config files that are pipes, devices, too deep, or hold non-finite numbers are refused in one line.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from estimator.cli import plan as plan_cli
from estimator.cli import predict as predict_cli
from estimator.files import atomic_output, refuse_same_file, strict_json, write_atomic
from estimator.model.calibration import DEFAULT_FILE, constants_from_json, load_constants

HEADER = "id,backend,dtype,batch,q_heads,kv_heads,head_dim,q_len,kv_len,causal,mask,dropout,mode"
GOOD = "a,auto,bfloat16,2,16,16,128,1024,1024,0,none,0.0,forward"
PLAN = ["--preset", "llama-3-8b", "--seq-len", "4096"]


def rows_of(path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(Path(path).read_text())))


def one_line_error(rc, err, needle):
    assert rc == 2 and err.startswith("error:") and err.strip().count("\n") == 0 and needle in err, err


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in Path(folder).iterdir() if p.name.endswith(".tmp"))


def case_file(tmp_path, n: int = 3) -> Path:
    src = tmp_path / "in.csv"
    src.write_text(HEADER + "\n" + "\n".join(GOOD.replace("a,", f"r{i},", 1) for i in range(n)) + "\n")
    return src


# --- the output is the input -----------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["same", "symlink", "hardlink"])
def test_predict_refuses_writing_over_its_input(tmp_path, capsys, how):
    src = case_file(tmp_path, 120)
    before = src.read_bytes()
    dst = src
    if how == "symlink":
        dst = tmp_path / "link.csv"
        dst.symlink_to(src)
    elif how == "hardlink":
        dst = tmp_path / "hard.csv"
        os.link(src, dst)
    one_line_error(predict_cli.main([str(src), "-o", str(dst), "--gpu", "h200"]), capsys.readouterr().err,
                   "is the input file")
    assert src.read_bytes() == before


def test_plan_xlsx_refuses_writing_over_the_config(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_bytes((Path(__file__).parent / "data" / "gemma-2-9b.config.json").read_bytes())
    before = config.read_bytes()
    rc = plan_cli.main(["--config", str(config), "--seq-len", "4096", "--xlsx", str(config)])
    one_line_error(rc, capsys.readouterr().err, "is the input file")
    assert config.read_bytes() == before


def test_a_device_output_is_never_the_same_file():
    refuse_same_file("/dev/null", ["/dev/null"], "-o")  # not a regular file: written in place, no refusal


# --- a failed write leaves the earlier file --------------------------------------------------------------


def test_predict_failing_mid_stream_keeps_the_earlier_output(tmp_path, monkeypatch, capsys):
    src = case_file(tmp_path, 30)
    dst = tmp_path / "out.csv"
    dst.write_text("earlier results\n")
    real, calls = predict_cli._csv_bytes, []

    def failing(df, header):
        calls.append(len(df))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")  # the disk fills after the first chunk
        return real(df, header)

    monkeypatch.setattr(predict_cli, "_csv_bytes", failing)
    reader = predict_cli.read_csv_chunks
    monkeypatch.setattr(predict_cli, "read_csv_chunks", lambda path, chunk_rows: reader(path, 10))
    rc = predict_cli.main([str(src), "-o", str(dst), "--gpu", "h200"])
    one_line_error(rc, capsys.readouterr().err, "No space left on device")
    assert dst.read_text() == "earlier results\n" and leftovers(tmp_path) == []


def test_predict_writes_the_whole_file_on_success_and_keeps_permissions(tmp_path):
    src = case_file(tmp_path, 25)
    dst = tmp_path / "out.csv"
    dst.write_text("old\n")
    dst.chmod(0o640)
    assert predict_cli.predict_file(src, dst, "h200", chunk_rows=7) == 25
    assert len(rows_of(dst)) == 25 and (dst.stat().st_mode & 0o777) == 0o640 and leftovers(tmp_path) == []


def test_a_symlinked_output_replaces_its_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    write_atomic(link, "new\n", "-o")
    assert link.is_symlink() and target.read_text() == "new\n"


def test_atomic_output_removes_the_temporary_on_any_failure(tmp_path):
    dst = tmp_path / "f.txt"
    dst.write_text("keep")
    with pytest.raises(KeyboardInterrupt), atomic_output(dst, "--out") as fh:
        fh.write("half")
        raise KeyboardInterrupt
    assert dst.read_text() == "keep" and leftovers(tmp_path) == []


def test_dev_full_is_a_one_line_error_naming_the_flag():
    with pytest.raises(ValueError, match=r"^--md /dev/full: cannot write \(No space left on device\)$"):
        write_atomic("/dev/full", "x" * 100_000, "--md")


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations): the workbook
def test_plan_xlsx_failing_keeps_the_earlier_workbook(tmp_path, monkeypatch, capsys):
    from estimator.report import xlsx

    out = tmp_path / "plan.xlsx"
    out.write_bytes(b"earlier workbook")

    def half_then_full_disk(path, data, flag):  # the real writer, with the disk filling half-way
        with atomic_output(path, flag, "wb") as fh:
            fh.write(data[: len(data) // 2])
            fh.flush()
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(xlsx, "write_atomic", half_then_full_disk)
    rc = plan_cli.main([*PLAN, "--xlsx", str(out)])
    one_line_error(rc, capsys.readouterr().err, "--xlsx")
    assert out.read_bytes() == b"earlier workbook" and leftovers(tmp_path) == []


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations): the workbook
def test_plan_xlsx_to_dev_full_says_what_failed(capsys):
    one_line_error(plan_cli.main([*PLAN, "--xlsx", "/dev/full"]), capsys.readouterr().err,
                   "--xlsx /dev/full: cannot write (No space left on device)")


# --- predict's reader: a stray quote, the user's error column --------------------------------------------


def test_a_stray_quote_costs_its_row_and_the_rest_are_predicted(tmp_path, capsys):
    lines = [GOOD.replace("a,", f"r{i},", 1) for i in range(6)]
    lines[1] = lines[1].replace(",auto,", ',"auto,')  # an opening quote never closed on its line
    lines[4] = lines[4].replace(",none,", ',"none",')  # a later quoted cell closes it (the old reader's trap)
    src = tmp_path / "in.csv"
    src.write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    assert predict_cli.main([str(src), "-o", str(tmp_path / "out.csv"), "--gpu", "h200"]) == 0
    out = rows_of(tmp_path / "out.csv")
    assert [r["id"] for r in out] == [f"r{i}" for i in range(6)]
    assert "line 3" in out[1]["error"] and "unbalanced quote" in out[1]["error"] and out[1]["supported"] == ""
    assert all(r["error"] == "" and r["supported"] == "true" for i, r in enumerate(out) if i != 1)


def test_a_quote_left_open_to_the_end_costs_one_row(tmp_path):
    lines = [GOOD.replace("a,", f"r{i},", 1) for i in range(5)]
    lines[2] = lines[2].replace(",forward", ',"forward')
    src = tmp_path / "in.csv"
    src.write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    predict_cli.predict_file(src, tmp_path / "out.csv", "h200")
    out = rows_of(tmp_path / "out.csv")
    assert len(out) == 5 and "line 4" in out[2]["error"] and sum(r["error"] == "" for r in out) == 4


def test_a_stray_quote_past_the_field_size_limit_still_costs_one_row(tmp_path, monkeypatch):
    monkeypatch.setattr(predict_cli, "MAX_LINE_CHARS", 400)  # the reader's field limit; the file is 40 lines
    lines = [GOOD.replace("a,", f"r{i},", 1) for i in range(40)]
    lines[1] = lines[1].replace(",auto,", ',"auto,')  # swallows the rest: a field past the limit, csv.Error
    src = tmp_path / "in.csv"
    src.write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    predict_cli.predict_file(src, tmp_path / "out.csv", "h200")
    out = rows_of(tmp_path / "out.csv")
    assert len(out) == 40 and "unbalanced quote" in out[1]["error"] and sum(r["error"] == "" for r in out) == 39


def test_a_quoted_cell_with_a_line_break_is_no_stray_quote(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text(HEADER + ",note\n" + GOOD + ',"two\nlines, and a comma"\n' + GOOD.replace("a,", "b,", 1) + ",x\n")
    predict_cli.predict_file(src, tmp_path / "out.csv", "h200")
    out = rows_of(tmp_path / "out.csv")
    assert [r["note"] for r in out] == ["two\nlines, and a comma", "x"] and "error" not in out[0]


def test_the_users_own_error_column_is_kept(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text(HEADER + ",error\n" + GOOD + ",mine\n" + "b,auto,bfloat16,0,16,16,128,8,8,0,none,0,forward,\n")
    assert predict_cli.main([str(src), "-o", str(tmp_path / "out.csv"), "--gpu", "h200"]) == 0
    assert "predict_error" in capsys.readouterr().err
    out = rows_of(tmp_path / "out.csv")
    assert [r["error"] for r in out] == ["mine", ""]
    assert out[0]["predict_error"] == "" and out[1]["predict_error"].startswith("batch")


# --- calibration and config files ------------------------------------------------------------------------


def shipped() -> dict:
    return json.loads(DEFAULT_FILE.read_text())


def test_a_deeply_nested_calibration_is_one_line(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested deeper"):
        load_constants(str(path))


@pytest.mark.parametrize(("where", "value"), [
    (("gemm", 0, "ms"), float("nan")), (("gemm", 0, "ms"), float("inf")), (("gemm", 0, "m"), -4),
    (("memory_bound", 0, "elements"), float("nan")), (("launch_floor_ms",), float("nan")),
    (("launch_floor_ms",), 1e300), (("gemm", 0, "ms"), 1e-308), (("gemm", 0, "ms"), True)])
def test_calibration_numbers_are_strict(tmp_path, where, value):
    data = shipped()
    node = data
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))  # NaN / Infinity as Python writes them, which json.loads accepts
    with pytest.raises(ValueError, match=where[-1]) as info:
        load_constants(str(path))
    assert "\n" not in str(info.value)


def test_the_shipped_calibration_still_reads():
    assert constants_from_json(shipped(), "shipped").gemms


@pytest.mark.parametrize("flag", ["--calibration", "--config"])
def test_a_fifo_is_refused_not_waited_on(tmp_path, flag):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    argv = ["--seq-len", "4096", flag, str(fifo)] + ([] if flag == "--config" else ["--preset", "llama-3-8b"])
    res = subprocess.run([sys.executable, "-m", "estimator", "plan", *argv], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).parent.parent)
    assert res.returncode == 2 and "not a regular file" in res.stderr and res.stderr.count("\n") == 1, res.stderr


@pytest.mark.parametrize("value", ["1e-308", "nan", "inf", "-0.5", "0"])
def test_an_absurd_efficiency_is_refused_by_name(capsys, value):
    one_line_error(plan_cli.main([*PLAN, "--gemm-efficiency", value, "--json"]), capsys.readouterr().err,
                   "--gemm-efficiency")


def test_plan_json_is_always_valid_json():
    with pytest.raises(ValueError, match=r"plan: components\[1\]\.bytes \(nan\) is not a finite number"):
        strict_json({"components": [{"bytes": 1}, {"bytes": float("nan")}]}, "plan")
    assert json.loads(strict_json({"a": [1.5, 2]}, "plan")) == {"a": [1.5, 2]}
