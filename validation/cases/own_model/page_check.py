"""The Validate page's "this model, this workload, on this GPU" on a real GPU (streamlit AppTest): the plan on screen
is the llama-3.1-8b preset, training bf16-mixed at n = 8192, cut to 4 layers; its measured row is written to
OUT/page.csv and checked equal (validation.model.own_report.same_as) to the command's row of the same case in
OUT/own.csv. Usage: PLANNER_ENABLE_GPU_JOBS=true python validation/cases/own_model/page_check.py OUT_DIR"""

import csv
import sys
from pathlib import Path

from streamlit.testing.v1 import AppTest

from estimator.model.inputs import PlanInputs
from estimator.model.presets import get_preset
from validation.model.own_report import same_as

ROOT = Path(__file__).resolve().parents[3]
out = Path(sys.argv[1])
at = AppTest.from_file(str(ROOT / "pages" / "validate.py"), default_timeout=600)
at.session_state["plan_inputs"] = PlanInputs(model=get_preset("llama-3.1-8b"), seq_len=8192, mode="training",
                                             gpu="h200")
at.session_state["own_layers"] = 4
at.run()
at.button(key="own_run").click().run()
errors = [e.value for e in at.error] + [str(e.value) for e in at.exception]
print("page errors:", errors or "none")
try:
    result = at.session_state["own_result"]
except KeyError:
    sys.exit("page: no result (errors above)")
result.to_csv(out / "page.csv", index=False)
row = result.iloc[0].to_dict()
print("page:", row["status"], "peak", row["peak_bytes"], "plan", row["plan_peak_bytes"], row.get("reason", ""))
with open(out / "own.csv", newline="") as fh:
    own = [r for r in csv.DictReader(fh) if r["config_source"] == "preset llama-3.1-8b" and r["mode"] == "train"]
for r in own:
    r["family"] = row["family"]  # the page builds the preset's config from a file: family = its model_type
diff = same_as(row, own)
print("page row equal to the command's:", "yes" if not diff else "NO: " + "; ".join(diff))
sys.exit(1 if diff or errors else 0)
