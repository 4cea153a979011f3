"""`python -m estimator predict` (contract §2): columns, pass-through, malformed rows, errors."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd

from estimator.call.table import predict_frame
from estimator.cli.predict import main

ROW = dict(id="a", backend="auto", dtype="bfloat16", batch=2, q_heads=16, kv_heads=16, head_dim=128,
           q_len=1024, kv_len=1024, causal=0, mask="none", dropout=0.0, mode="forward")


def test_predict_writes_contract_columns(tmp_path):
    rows = [ROW, {**ROW, "id": "b", "kv_heads": 3}, {**ROW, "id": "c", "dtype": "float64"},
            {**ROW, "id": "d", "backend": "flash", "dtype": "float32"}, {**ROW, "id": "e", "batch": "-2"}]
    src = tmp_path / "in.csv"
    pd.DataFrame(rows)[list(reversed(list(ROW)))].to_csv(src, index=False)  # columns in any order
    assert main([str(src), "-o", str(tmp_path / "out.csv"), "--gpu", "h200"]) == 0
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False).set_index("id")
    for col in ("supported", "selected_backend", "peak_extra_bytes", "fits", "flops", "time_ms", "error"):
        assert col in out.columns
    assert out.loc["a", "selected_backend"] == "cudnn" and out.loc["a", "supported"] == "true"
    # cuDNN forward: the output (8 MiB) + seed, offset and a 256-B workspace, 512 B each
    assert int(out.loc["a", "peak_extra_bytes"]) == 8 * 2**20 + 3 * 512
    assert out.loc["b", "error"].startswith("kv_heads") and out.loc["b", "peak_extra_bytes"] == ""
    assert out.loc["c", "error"].startswith("dtype")
    assert out.loc["e", "error"].startswith("batch")
    assert out.loc["d", "supported"] == "false" and out.loc["d", "selected_backend"] == "none"
    assert out.loc["d", "peak_extra_bytes"] == "" and out.loc["d", "error"] == ""


def test_unknown_gpu_is_one_line_error(tmp_path, capsys):
    src = tmp_path / "in.csv"
    pd.DataFrame([ROW]).to_csv(src, index=False)
    assert main([str(src), "-o", str(tmp_path / "o.csv"), "--gpu", "b200"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "h200" in err


def test_missing_column_is_one_line_error(tmp_path, capsys):
    src = tmp_path / "in.csv"
    pd.DataFrame([{k: v for k, v in ROW.items() if k != "mode"}]).to_csv(src, index=False)
    assert main([str(src), "-o", str(tmp_path / "o.csv"), "--gpu", "h200"]) == 2
    assert "mode" in capsys.readouterr().err


def test_frame_and_single_call_agree():
    from estimator import AttentionCall, estimate_call, get_gpu
    frame = predict_frame(pd.DataFrame([{**ROW, "mode": "forward_backward", "backend": "math"}]), "a100-80gb")
    call = AttentionCall(**{k: v for k, v in ROW.items() if k != "id"} | {"mode": "forward_backward",
                                                                           "backend": "math"})
    assert int(frame.peak_extra_bytes[0]) == estimate_call(call, get_gpu("a100-80gb")).peak_extra_bytes


def test_module_entry_point(tmp_path):
    src = tmp_path / "in.csv"
    pd.DataFrame([ROW]).to_csv(src, index=False)
    done = subprocess.run([sys.executable, "-m", "estimator", "predict", str(src), "-o", str(tmp_path / "o.csv"),
                           "--gpu", "h100-sxm"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert pd.read_csv(tmp_path / "o.csv").selected_backend[0] == "cudnn"


def test_flops_beyond_int64_stay_exact(tmp_path):
    big = {**ROW, "batch": 8, "q_heads": 32, "kv_heads": 8, "head_dim": 256, "q_len": 1 << 22, "kv_len": 1 << 22,
           "mode": "forward_backward"}
    out = predict_frame(pd.DataFrame([big]), "h200")
    exact = 8 * 32 * (1 << 22) ** 2 * 256 * 14  # fused forward 4 + backward 10 per B·H·L·S·D
    assert exact > 2**63 and int(out.flops[0]) == exact
    assert out.fits[0] == "false"


def test_a_garbled_row_gets_an_error_and_the_others_run(tmp_path):
    header = ",".join(ROW)
    good = ",".join(str(v) for v in ROW.values())
    src = tmp_path / "in.csv"
    src.write_text(f"{header}\n{good}\n{good},surplus\n{good.rsplit(',', 3)[0]}\n")
    assert main([str(src), "-o", str(tmp_path / "out.csv"), "--gpu", "h200"]) == 0
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert list(out.error) == ["", "row 3: expected 13 fields, got 14", "row 4: expected 13 fields, got 10"]
    assert out.supported[0] == "true" and out.supported[1] == "" and out.peak_extra_bytes[2] == ""
