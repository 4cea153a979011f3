"""validation/timing/host_speed.py: one row of host-dispatch figures, appended to a CSV."""

import csv

from validation.timing import host_speed


def test_host_speed_appends_one_row_per_call(tmp_path):
    out = tmp_path / "hs.csv"
    assert host_speed.main(["--out", str(out), "--label", "a", "--device", "cpu"]) == 0
    assert host_speed.main(["--out", str(out), "--label", "b", "--device", "cpu"]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["label"] for r in rows] == ["a", "b"]
    for r in rows:
        assert set(r) == set(host_speed.COLUMNS)
        assert float(r["python_loop_ns"]) > 0 and float(r["launch_us"]) > 0 and float(r["module_call_us"]) > 0
        assert r["device_name"] == "cpu" and r["cpu_model"]
