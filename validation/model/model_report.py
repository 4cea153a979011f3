"""Whole-model measurements (`python -m validation.hf_models`) against `plan`: for every measured row, the plan
for the very config the model was built from, the relative error of its peak, and of its times (prefill,
training step, decode per token: planned / measured - 1, and how many rows are within 15%).

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
from estimator.files import refuse_same_file, write_atomic
from estimator.model.hf_config import from_hf_config
from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from validation.call.schema import tolerance_bytes
from validation.errors import first_line
from validation.model.hf_configs import family_config
from validation.model.hf_vision import is_vision

# HF attn_implementation -> the planner's backend
BACKEND_OF = {"sdpa": "auto", "eager": "eager", "flex_attention": "flex"}
CHECKPOINTING_OF = {"none": "none", "hf": "hf"}


def plan_row(row: dict):
    """The plan for one measured row (raises ValueError when the planner cannot model it)."""
    if is_vision(row["family"]):
        from validation.model.vision_report import vision_plan_row

        return vision_plan_row(row)
    cfg = family_config(row["family"], int(row["layers"]), row.get("overrides") or None)
    model = from_hf_config(cfg, name=f"{row['family']} ({row['layers']} layers)")
    training = row["mode"] == "train"
    kw = dict(precision=row["precision"], optimizer=row["optimizer"],
              checkpointing=CHECKPOINTING_OF[row["checkpointing"]]) if training else dict(dtype="bfloat16")
    if training and str(row.get("finetune") or "full") != "full":  # validation.model.hf_finetune's cases
        kw.update(finetune=row["finetune"], lora_rank=int(float(row["lora_rank"])), lora_targets=row["lora_targets"])
    inputs = PlanInputs(model=model, seq_len=int(row["seq_len"]), batch=int(row["batch"]),
                        mode="training" if training else "inference",
                        backend=BACKEND_OF[row["attn_implementation"]], gpu="h200", **kw)
    return make_plan(inputs, solve=False)


def _decode_key(row: dict, plan):
    """What cuDNN's graph cache keys a decode step's single-token calls on (batch, the growing key lengths, heads,
    head_dim), with the file the row came from (one process per file): a later row of the same key decodes on
    graphs the earlier one built."""
    if not hasattr(plan, "inputs"):  # a vision plan: its decoder's decode is not compared per process
        return None
    m = plan.inputs.model
    return (row.get("_source", ""), row["batch"], row["seq_len"], row.get("decode_tokens", ""), m.q_heads,
            m.kv_heads, m.head_dim)


def compare(df: pd.DataFrame) -> pd.DataFrame:
    """One output row per measured row that ran or ran out of memory: measured and planned peak, error, fits.
    Decode: where an earlier row of the same file (process) ran the same decode shapes and lengths, cuDNN's graphs
    were built already, so the row's first decode pass is compared with the plan's steady step
    (`prebuilt_decode`)."""
    out = []
    built = set()
    for row in df.to_dict("records"):
        row = {k: ("" if pd.isna(v) else v) for k, v in row.items()}
        if row["status"] not in ("ok", "oom"):
            continue
        rec = {k: row[k] for k in ("family", "layers", "attn_implementation", "mode", "precision", "optimizer",
                                   "checkpointing", "seq_len", "batch", "status")}
        if str(row.get("finetune") or "full") != "full":
            rec.update({k: row[k] for k in ("finetune", "lora_rank", "lora_targets")})
        try:
            plan = plan_row(row)
        except ValueError as exc:
            out.append({**rec, "plan_error": first_line(exc)})
            continue
        planned = plan.total_bytes - CUDA_CONTEXT_BYTES
        rec.update(planned_peak_bytes=planned, plan_fits=plan.fits, plan_error="",
                   planned_params=plan.params)
        key = _decode_key(row, plan)
        rec["prebuilt_decode"] = key is not None and key in built and bool(plan.decode_graph_builds_per_step)
        if key is not None and row["mode"] == "prefill" and row["status"] == "ok":
            built.add(key)
        rec.update(_time_columns(row, plan, prebuilt=rec["prebuilt_decode"]))
        if row["status"] == "ok":
            measured = int(float(row["peak_bytes"]))
            rec.update(measured_peak_bytes=measured, rel_err=round((planned - measured) / measured, 4),
                       within_tolerance=abs(planned - measured) <= tolerance_bytes(measured),
                       measured_params=int(float(row["n_params"])) if row.get("n_params") != "" else None)
        else:
            rec.update(measured_peak_bytes=None, rel_err=None, within_tolerance=not plan.fits)
        out.append(rec)
    return pd.DataFrame(out)


TIME_TOLERANCE = 0.15  # "within 15%" of the measured time
# (measured column of validation.model.hf_models, plan key, mode the row must have)
TIME_COLUMNS = (("prefill", "time_prefill_ms", "prefill_time_ms", "prefill"),
                ("step", "time_step_ms", "step_time_ms", "train"),
                # the headline: decode as generate runs it (the process's first pass through these lengths, a cuDNN
                # graph built per step); rows whose process had already built them (an earlier case of the same
                # shapes) measure the steady state here
                ("decode", "decode_ms_per_token", "decode_time_ms_per_token", "prefill"),
                # the same steps again: every length seen before
                ("decode steady", "decode_warm_ms_per_token", "decode_steady_ms_per_token", "prefill"))


def _time_columns(row: dict, plan, prebuilt: bool = False) -> dict:
    """measured_*, planned_* and *_err (planned / measured - 1) for prefill, step and decode per token. A time of
    one call only (n_timed 1: flex_attention's first call includes compiling, hf_models.py) is not steady state
    and is left out."""
    out = {}
    steady = str(row.get("n_timed", "")) not in ("1", "1.0")
    for name, col, key, mode in TIME_COLUMNS:
        if row["mode"] != mode or row["status"] != "ok":
            continue
        value = row.get(col, "")
        planned = getattr(plan, "decode_steady_ms_per_token" if prebuilt and name == "decode" else key, None)
        if value in ("", None) or planned is None or not steady:
            continue
        measured = float(value)
        if measured <= 0:
            continue
        out[f"measured_{name}_ms"] = measured
        out[f"planned_{name}_ms"] = round(float(planned), 4)
        out[f"{name}_err"] = round(float(planned) / measured - 1, 4)
    return out


def time_summary(result: pd.DataFrame) -> list[str]:
    """One line per time column: rows, median |error|, rows within 15%."""
    lines = []
    for name, *_ in TIME_COLUMNS:
        col = f"{name}_err"
        if col not in result:
            continue
        err = result[col].dropna().astype(float)
        if not len(err):
            continue
        within = int((err.abs() <= TIME_TOLERANCE).sum())
        ratio = (1 / (1 + err) - 1).sort_values()  # measured / planned - 1, the band's quantity
        lo, hi = ratio.quantile(0.1), ratio.quantile(0.9)
        lines.append(f"{name} time: {len(err)} rows, median |error| {err.abs().median():.1%}, within 15% "
                     f"{within}/{len(err)} ({within / len(err):.0%}), median planned/measured {1 + err.median():.2f}, "
                     f"measured/planned - 1 from {lo:+.2f} to {hi:+.2f} (10th-90th percentile).")
    return lines


def markdown(result: pd.DataFrame, sources: list[str]) -> str:
    lines = [f"# Whole models on the GPU against `plan` ({', '.join(sources)})", "",
             "Regenerate: `python -m validation.model_report " + " ".join(sources) + " --md THIS.md`", ""]
    ok = result[result["status"] == "ok"] if "status" in result else result
    if "rel_err" in result and len(ok):
        good = ok["within_tolerance"] == True  # noqa: E712 - pandas column
        lines.append(f"Peak within max(3%, 2 MiB): {int(good.sum())}/{len(ok)} rows that ran; "
                     f"median |error| {ok['rel_err'].abs().median():.1%}, worst {ok['rel_err'].abs().max():.1%}.")
    lines += time_summary(result)
    oom = result[result["status"] == "oom"]
    if len(oom):
        called = int((oom["plan_fits"] == False).sum())  # noqa: E712
        lines.append(f"Out-of-memory runs planned \"does not fit\": {called}/{len(oom)}.")
    errors = result[result.get("plan_error", pd.Series(dtype=str)).fillna("") != ""] if "plan_error" in result else []
    if len(errors):
        lines.append(f"Rows the planner refused: {len(errors)} ({errors['plan_error'].iloc[0]}).")
    lines += ["", "| family | layers | attention | mode | precision | optimizer | ckpt | n | batch | status "
              "| measured GiB | plan GiB | error | time measured / plan ms | time error |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result.to_dict("records"):
        def gib(v):
            return "" if v is None or pd.isna(v) else f"{v / 2**30:.2f}"
        err = r.get("rel_err")
        err = "" if err is None or pd.isna(err) else f"{err:+.1%}"
        if r.get("plan_error"):
            err = "refused: " + str(r["plan_error"])[:60]
        recipe = r["precision"]
        if str(r.get("finetune") or "nan") not in ("nan", "", "full"):  # validation.model.hf_finetune's cases
            recipe += f", {r['finetune']} r{int(float(r['lora_rank']))} {r['lora_targets']}"
        lines.append(f"| {r['family']} | {r['layers']} | {r['attn_implementation']} | {r['mode']} | "
                     f"{recipe} | {r['optimizer']} | {r['checkpointing']} | {r['seq_len']} | {r['batch']} | "
                     f"{r['status']} | {gib(r.get('measured_peak_bytes'))} | {gib(r.get('planned_peak_bytes'))} | "
                     f"{err} | {_time_cell(r)} |")
    return "\n".join(lines) + "\n"


def _time_cell(r: dict) -> str:
    cells, errs = [], []
    for name, *_ in TIME_COLUMNS:
        m, p, e = r.get(f"measured_{name}_ms"), r.get(f"planned_{name}_ms"), r.get(f"{name}_err")
        if m is None or pd.isna(m):
            continue
        cells.append(f"{name} {m:,.1f} / {p:,.1f}")
        errs.append(f"{e:+.0%}")
    return " ; ".join(cells) + " | " + " ; ".join(errs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.model_report", description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", help="output of python -m validation.hf_models")
    parser.add_argument("--md", help="write the report here (Markdown)")
    parser.add_argument("--csv-out", help="write the per-row comparison here")
    args = parser.parse_args(argv)
    try:
        refuse_same_file(args.md, args.csv, "--md")
        refuse_same_file(args.csv_out, args.csv, "--csv-out")
        df = pd.concat([pd.read_csv(p, dtype=str, keep_default_na=False).assign(_source=p) for p in args.csv],
                       ignore_index=True)
        result = compare(df)
    except (OSError, ValueError, KeyError, pd.errors.ParserError) as exc:
        print(f"error: {first_line(exc)}", file=sys.stderr)
        return 2
    text = markdown(result, args.csv)
    try:
        if args.md:
            write_atomic(args.md, text, "--md")
        else:
            print(text)
        if args.csv_out:
            write_atomic(args.csv_out, result.to_csv(index=False), "--csv-out")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
