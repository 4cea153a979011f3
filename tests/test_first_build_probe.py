"""validation.serving.first_build_probe on the CPU: each sequence in a fresh child process, a row per shape."""

import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tiny_probe_writes_a_row_per_shape_from_a_child_process(tmp_path):
    out = tmp_path / "probe.csv"
    res = subprocess.run([sys.executable, "-m", "validation.serving.first_build_probe", "--tiny", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(out.open()))
    assert [(int(r["q"]), int(r["k"])) for r in rows] == [(3, 40), (5, 64), (16, 16)]
    assert {(r["cache"], r["child"]) for r in rows} == {("default", "0")}
    assert [int(r["k_mod_128"]) for r in rows] == [40, 64, 16]
    assert all(float(r["first_ms"]) >= 0 and float(r["seen_ms"]) >= 0 for r in rows)
    assert {r["sequence"] for r in rows} == {"tiny"}


def test_probe_without_out_is_a_one_line_error():
    res = subprocess.run([sys.executable, "-m", "validation.serving.first_build_probe"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--out is required" in res.stderr


def test_cache_plan_runs_each_child_on_its_cache_and_names_a_bad_one(tmp_path):
    out = tmp_path / "probe.csv"
    res = subprocess.run([sys.executable, "-m", "validation.serving.first_build_probe", "--tiny", "--out", str(out),
                          "--cache-plan", "tiny@fresh:a,tiny@off"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(out.open()))
    assert [(r["cache"], r["child"]) for r in rows] == [("fresh:a", "0")] * 3 + [("off", "1")] * 3
    bad = subprocess.run([sys.executable, "-m", "validation.serving.first_build_probe", "--tiny", "--out", str(out),
                          "--cache-plan", "tiny@warm"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--cache-plan: unknown cache 'warm'" in bad.stderr
