"""The tool's own speed, the three figures side by side in one run (targets: `predict` at most 2x pandas' own read +
write of the same 100,000-row CSV; the planning page's re-run after a changed n at most 150 ms median in headless
Chromium; the budget workbook under 1 s or built with a progress bar):

    taskset -c 0,1 python -m bench.bench_speed [--rows N] [--repeats R]

Runs bench/bench_predict.py, the browser part of bench/bench_app.py (`streamlit run` + Chromium: fill n, click
Plan, time in the page until the new total is shown and until the re-run has settled) and bench/bench_xlsx.py one
after the other, and prints one JSON object with the machine's CPU count and load average. Chromium: the system
browser (`apt-get install -y chromium`, or CHROMIUM=/path); without one the browser figure is null.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from bench import bench_app, bench_predict, bench_xlsx

    out = {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "cpus": len(os.sched_getaffinity(0)),
           "machine": platform.processor() or platform.machine(), "load_average_1m_at_start": os.getloadavg()[0]}
    out["predict"] = bench_predict.run(args.rows, args.repeats)
    browser = bench_app.browser_render_s()
    out["app_browser"] = browser
    out["xlsx"] = bench_xlsx.run()
    out["load_average_1m_at_end"] = os.getloadavg()[0]
    rerun = (browser or {}).get("rerun", {})
    out["verdicts"] = {
        "predict_ratio_le_2": out["predict"]["ratio"] <= 2,
        "app_rerun_shown_median_le_150_ms": rerun.get("new_n_shown_median_ms", float("inf")) <= 150,
        "app_rerun_settled_median_le_150_ms": rerun.get("new_n_settled_median_ms", float("inf")) <= 150,
        "xlsx_under_1_s_or_progress_bar": all(out["xlsx"][m]["wall_s"] < 1 or out["xlsx"][m]["progress_updates"] > 0
                                              for m in ("inference", "training")),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
