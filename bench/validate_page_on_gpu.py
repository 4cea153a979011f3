"""Run the Validate page where it matters: on a machine with a CUDA GPU, through Streamlit's AppTest (no browser),
press "Run validation" for the default plan's attention calls, and save what the page rendered: the result table
as CSV and the page's text.

python -m bench.validate_page_on_gpu --out DIR [--seq-len 8192]

Run on the H200 with streamlit and plotly installed as wheels beside the CUDA torch (pip install --target; such an
install counts as a development install, which refuses the configured server.port: drop that line from
.streamlit/config.toml on that machine). On a machine
without a GPU the page says so and nothing is measured (the script still writes what it rendered).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.validate_page_on_gpu")
    parser.add_argument("--out", required=True, help="folder for validate_page_table.csv and validate_page.txt")
    parser.add_argument("--seq-len", type=int, default=8192)
    args = parser.parse_args(argv)
    from streamlit.testing.v1 import AppTest

    os.environ.setdefault("PLANNER_ENABLE_GPU_JOBS", "1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "pages" / "validate.py"), default_timeout=600)
    from ui import state

    at.session_state["plan_inputs"] = state.plan_inputs({**state.PLAN_DEFAULTS, "seq_len": args.seq_len})
    at.run()
    runs = [b for b in at.button if b.key == "validate_run"]
    if runs and not runs[0].disabled:
        runs[0].click()
        at.run()
    texts = []
    for kind in ("title", "caption", "markdown", "success", "warning", "error", "code"):
        for element in getattr(at, kind, []):
            texts.append(f"[{kind}] {element.value}")
    (out / "validate_page.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    tables = {}
    for frame in at.dataframe:
        tables[frame.key or f"table{len(tables)}"] = frame.value
    for frame in tables.values():  # the result table is the one with measurements
        if "measured_peak_extra_bytes" in frame.columns:
            frame.to_csv(out / "validate_page_table.csv", index=False)
    (out / "validate_page_tables.json").write_text(
        json.dumps({k: len(v) for k, v in tables.items()}, indent=1), encoding="utf-8")
    print("\n".join(texts[-12:]))
    print("tables:", {k: len(v) for k, v in tables.items()}, "exceptions:", [e.value for e in at.exception])
    return 0 if not at.exception else 1


if __name__ == "__main__":
    raise SystemExit(main())
