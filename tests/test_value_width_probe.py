"""validation/timing/value_width_probe.py on the CPU (a smoke run at tiny shapes): every route row names a backend and
says whether it ran; SDPA's own choice is recorded; the host rows carry the host's speed beside the launch chain."""

import csv

from validation.timing import value_width_probe


def test_probe_writes_route_and_host_rows(tmp_path):
    out = tmp_path / "vw.csv"
    value_width_probe.main(["--out", str(out), "--budget-s", "3", "--scale", "4"])
    rows = list(csv.DictReader(out.open()))
    route = [r for r in rows if r["part"] == "route"]
    host = [r for r in rows if r["part"] == "host"]
    assert route and host
    assert {r["backend"] for r in route} >= {"default", "cudnn", "efficient", "flash"}
    mla = [r for r in route if r["variant"] == "mla" and r["backend"] == "default"]
    assert mla and all(r["ok"] == "1" and float(r["ms"]) > 0 for r in mla)
    assert all(r["d_qk"] == "192" and r["d_v"] == "128" for r in mla)
    assert all(r["ok"] in ("0", "1") and (r["ok"] == "1" or r["error"]) for r in route)
    assert all(float(r["python_loop_ns"]) > 0 and float(r["chain_ms"]) > 0 for r in host)
