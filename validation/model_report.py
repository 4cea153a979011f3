"""Whole-model measurements (`python -m validation.hf_models`) against `plan`: for every measured row, the plan
for the very config the model was built from, and the relative error of its peak.

python -m validation.model_report validation/data/h200_hf_recipes.csv [...] --md REPORT.md [--csv OUT.csv]

The measurement is `torch.cuda.max_memory_allocated()` of the whole process (weights, optimizer state, cuBLAS
workspaces and the step's tensors; not the CUDA context, which the allocator does not see), so the plan's total
minus `CUDA_CONTEXT_BYTES` is compared. Training rows are one optimizer step after a first step (the optimizer
state exists); prefill rows keep the KV cache and the last position's logits. A row that ran out of memory must
be planned "does not fit". Pure Python + pandas: it runs where the data is committed (CI included).
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from estimator.call.attention import CUDA_CONTEXT_BYTES
from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.specs import from_hf_config
from validation.hf_configs import family_config
from validation.schema import tolerance_bytes

# HF attn_implementation -> the planner's backend
BACKEND_OF = {"sdpa": "auto", "eager": "eager", "flex_attention": "flex"}
CHECKPOINTING_OF = {"none": "none", "hf": "hf"}


def plan_row(row: dict):
    """The plan for one measured row (raises ValueError when the planner cannot model it)."""
    cfg = family_config(row["family"], int(row["layers"]), row.get("overrides") or None)
    model = from_hf_config(cfg, name=f"{row['family']} ({row['layers']} layers)")
    training = row["mode"] == "train"
    kw = dict(precision=row["precision"], optimizer=row["optimizer"],
              checkpointing=CHECKPOINTING_OF[row["checkpointing"]]) if training else dict(dtype="bfloat16")
    inputs = PlanInputs(model=model, seq_len=int(row["seq_len"]), batch=int(row["batch"]),
                        mode="training" if training else "inference",
                        backend=BACKEND_OF[row["attn_implementation"]], gpu="h200", **kw)
    return make_plan(inputs, solve=False)


def compare(df: pd.DataFrame) -> pd.DataFrame:
    """One output row per measured row that ran or ran out of memory: measured and planned peak, error, fits."""
    out = []
    for row in df.to_dict("records"):
        row = {k: ("" if pd.isna(v) else v) for k, v in row.items()}
        if row["status"] not in ("ok", "oom"):
            continue
        rec = {k: row[k] for k in ("family", "layers", "attn_implementation", "mode", "precision", "optimizer",
                                   "checkpointing", "seq_len", "batch", "status")}
        try:
            plan = plan_row(row)
        except ValueError as exc:
            out.append({**rec, "plan_error": str(exc).splitlines()[0]})
            continue
        planned = plan.total_bytes - CUDA_CONTEXT_BYTES
        rec.update(planned_peak_bytes=planned, plan_fits=plan.fits, plan_error="",
                   planned_params=plan.params)
        if row["status"] == "ok":
            measured = int(float(row["peak_bytes"]))
            rec.update(measured_peak_bytes=measured, rel_err=round((planned - measured) / measured, 4),
                       within_tolerance=abs(planned - measured) <= tolerance_bytes(measured),
                       measured_params=int(float(row["n_params"])) if row.get("n_params") != "" else None)
        else:
            rec.update(measured_peak_bytes=None, rel_err=None, within_tolerance=not plan.fits)
        out.append(rec)
    return pd.DataFrame(out)


def markdown(result: pd.DataFrame, sources: list[str]) -> str:
    lines = [f"# Whole models on the GPU against `plan` ({', '.join(sources)})", "",
             "Regenerate: `python -m validation.model_report " + " ".join(sources) + " --md THIS.md`", ""]
    ok = result[result["status"] == "ok"] if "status" in result else result
    if "rel_err" in result and len(ok):
        good = ok["within_tolerance"] == True  # noqa: E712 - pandas column
        lines.append(f"Peak within max(3%, 2 MiB): {int(good.sum())}/{len(ok)} rows that ran; "
                     f"median |error| {ok['rel_err'].abs().median():.1%}, worst {ok['rel_err'].abs().max():.1%}.")
    oom = result[result["status"] == "oom"]
    if len(oom):
        called = int((oom["plan_fits"] == False).sum())  # noqa: E712
        lines.append(f"Out-of-memory runs planned \"does not fit\": {called}/{len(oom)}.")
    errors = result[result.get("plan_error", pd.Series(dtype=str)).fillna("") != ""] if "plan_error" in result else []
    if len(errors):
        lines.append(f"Rows the planner refused: {len(errors)} ({errors['plan_error'].iloc[0]}).")
    lines += ["", "| family | layers | attention | mode | precision | optimizer | ckpt | n | batch | status "
              "| measured GiB | plan GiB | error |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result.to_dict("records"):
        def gib(v):
            return "" if v is None or pd.isna(v) else f"{v / 2**30:.2f}"
        err = r.get("rel_err")
        err = "" if err is None or pd.isna(err) else f"{err:+.1%}"
        if r.get("plan_error"):
            err = "refused: " + str(r["plan_error"])[:60]
        lines.append(f"| {r['family']} | {r['layers']} | {r['attn_implementation']} | {r['mode']} | "
                     f"{r['precision']} | {r['optimizer']} | {r['checkpointing']} | {r['seq_len']} | {r['batch']} | "
                     f"{r['status']} | {gib(r.get('measured_peak_bytes'))} | {gib(r.get('planned_peak_bytes'))} | "
                     f"{err} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.model_report", description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", help="output of python -m validation.hf_models")
    parser.add_argument("--md", help="write the report here (Markdown)")
    parser.add_argument("--csv-out", help="write the per-row comparison here")
    args = parser.parse_args(argv)
    try:
        df = pd.concat([pd.read_csv(p, dtype=str, keep_default_na=False) for p in args.csv], ignore_index=True)
        result = compare(df)
    except (OSError, ValueError, KeyError, pd.errors.ParserError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    text = markdown(result, args.csv)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(text)
    else:
        print(text)
    if args.csv_out:
        result.to_csv(args.csv_out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
