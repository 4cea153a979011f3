"""The Validate page's "this model, this workload, on this GPU" on a real GPU (streamlit AppTest), for two plans on
screen: `preset` is the llama-3.1-8b preset, `config` is a user's config.json that is not a built-in family
(qwen3-8b-shapes.json beside this file, handed to the page as the Plan page hands an upload: the parsed spec in
`plan_inputs` and the dict in `plan_config`). Both are training bf16-mixed at n = 8192, cut to 4 layers. The page's
measured row is written to OUT/page_CASE.csv and checked equal (validation.model.own_report.same_as) to the
command's row of the same case in OUT/own.csv.
Usage: PLANNER_ENABLE_GPU_JOBS=true python validation/cases/own_model/page_check.py OUT_DIR {preset,config}"""

import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the project's packages come from its checkout

from streamlit.testing.v1 import AppTest  # noqa: E402

from estimator.model.hf_config import from_hf_config_bytes  # noqa: E402
from estimator.model.inputs import PlanInputs  # noqa: E402
from estimator.model.presets import get_preset  # noqa: E402
from validation.model.own_report import same_as  # noqa: E402

out = Path(sys.argv[1])
case = sys.argv[2] if len(sys.argv) > 2 else "preset"
at = AppTest.from_file(str(ROOT / "pages" / "validate.py"), default_timeout=600)
if case == "config":
    data = (HERE / "qwen3-8b-shapes.json").read_bytes()
    model, source = from_hf_config_bytes(data, name="qwen3-8b-shapes"), "qwen3-8b-shapes.json"
    at.session_state["plan_config"] = json.loads(data)
else:
    model, source = get_preset("llama-3.1-8b"), "preset llama-3.1-8b"
at.session_state["plan_inputs"] = PlanInputs(model=model, seq_len=8192, mode="training", gpu="h200")
at.session_state["own_layers"] = 4
at.run()
if "own_run" not in [b.key for b in at.button]:  # no GPU here, or the guard refused: say what the page said
    sys.exit("page: no 'Run this model' button; the page said: " + " | ".join(
        str(e.value) for kind in ("error", "warning", "info") for e in getattr(at, kind)))
at.button(key="own_run").click().run()
errors = [e.value for e in at.error] + [str(e.value) for e in at.exception]
print(f"page ({case}) errors:", errors or "none")
try:
    result = at.session_state["own_result"]
except KeyError:
    sys.exit("page: no result (errors above)")
result.to_csv(out / f"page_{case}.csv", index=False)
row = result.iloc[0].to_dict()
print("page:", row["status"], "peak", row["peak_bytes"], "plan", row["plan_peak_bytes"], row.get("reason", ""))
with open(out / "own.csv", newline="") as fh:
    own = [r for r in csv.DictReader(fh) if r["config_source"].endswith(source) and r["mode"] == "train"
           and r["seq_len"] == "8192"]
for r in own:
    r["family"] = row["family"]  # the page builds the preset's config from a file: family = its model_type
diff = same_as(row, own)
print(f"page row ({case}) equal to the command's:", "yes" if not diff else "NO: " + "; ".join(diff))
sys.exit(1 if diff or errors else 0)
