"""Hybrid / state-space measurements (`python -m validation.hf_models` rows of the families in
validation/model/hf_hybrid.py) against `estimator.model.hybrid_plan`: peak above the process baseline, the cache
state bytes, and every out-of-memory row called "does not fit".

python -m validation.model.hybrid_report validation/data/h200_hf_hybrid.csv [...] --md REPORT.md

Measured: torch.cuda.max_memory_allocated() - baseline_bytes (the baseline holds the warm-up's cuBLAS
workspaces), so the plan's total less its workspace and CUDA context is compared (`measured_view_bytes`).
Prefill rows keep the cache and the last position's logits; decode rows are the peak over the single-token steps
after that prefill; train rows are the peak of a bf16-true optimizer step (`hybrid_plan(mode="training")`).
Tolerance max(3%, 2 MiB).
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from estimator.files import write_atomic
from estimator.model.hybrid import hybrid_from_hf_config
from estimator.model.hybrid_plan import hybrid_plan
from estimator.model.hybrid_time import FALLBACK_TIME_RATIO as RATIO
from validation.model.hf_configs import family_config
from validation.model.hf_hybrid import HYBRID_FAMILIES

TOL_REL, TOL_ABS = 0.03, 2 * 2**20


def plans_for(row: dict):
    cfg = family_config(row["family"], int(row["layers"]), row.get("overrides") or None)
    spec = hybrid_from_hf_config(cfg, name=f"{row['family']} ({row['layers']} layers)")
    kw = dict(seq_len=int(row["seq_len"]), batch=int(row["batch"]), gpu="h200")
    pre = hybrid_plan(spec, mode="prefill", **kw)
    dec = hybrid_plan(spec, mode="decode", **kw) if int(row.get("decode_tokens") or 0) else None
    return pre, dec


def _train_row(row: dict) -> dict:
    """A training row: the step's peak above the baseline against the training plan; an OOM called or not."""
    if row["precision"] != "bf16-true" or row["checkpointing"] != "none":
        raise ValueError(f"precision: only bf16-true steps without checkpointing are planned (row {row['family']})")
    cfg = family_config(row["family"], int(row["layers"]), row.get("overrides") or None)
    spec = hybrid_from_hf_config(cfg, name=f"{row['family']} ({row['layers']} layers)")
    plan = hybrid_plan(spec, mode="training", seq_len=int(row["seq_len"]), batch=int(row["batch"]), gpu="h200",
                       optimizer=row["optimizer"])
    rec = {k: row[k] for k in ("family", "layers", "seq_len", "batch", "overrides", "status")}
    rec.update(kind="train", planned_fit=plan.verdict.status, planned_total_gib=round(plan.total_bytes / 2**30, 2))
    if row["status"] == "oom":
        return {**rec, "called": not plan.fits}
    meas = int(row["peak_bytes"]) - int(row["baseline_bytes"] or 0)
    est = plan.measured_view_bytes
    return {**rec, "measured_bytes": meas, "planned_bytes": est, "err": est / meas - 1,
            "ok": abs(est - meas) <= max(TOL_REL * meas, TOL_ABS), **_times(plan, row.get("time_step_ms"))}


def _times(plan, measured) -> dict:
    """The measured time against the plan's figure and band (prefill, training step)."""
    if plan.time_ms is None or measured in ("", None):
        return {}
    lo, hi = plan.time_band_ms
    m = float(measured)
    return {"time_measured_ms": m, "time_planned_ms": plan.time_ms, "time_ratio": m / (plan.time_ms / RATIO[1]),
            "time_in_band": lo <= m <= hi}


def compare(df: pd.DataFrame) -> pd.DataFrame:
    out = []
    for row in df.to_dict("records"):
        row = {k: ("" if pd.isna(v) else v) for k, v in row.items()}
        if row["family"] not in HYBRID_FAMILIES or row["status"] not in ("ok", "oom"):
            continue
        if row["mode"] == "train":
            out.append(_train_row(row))
            continue
        if row["mode"] != "prefill":
            continue
        pre, dec = plans_for(row)
        base = int(row["baseline_bytes"] or 0)
        rec = {k: row[k] for k in ("family", "layers", "seq_len", "batch", "overrides", "status")}
        rec["planned_fit"] = pre.verdict.status
        rec["planned_total_gib"] = round(pre.total_bytes / 2**30, 2)
        if row["status"] == "oom":
            rec.update(kind="prefill", called=not pre.fits)
            out.append(rec)
            continue
        meas = int(row["peak_bytes"]) - base
        est = pre.measured_view_bytes
        rec["reserved_measured_bytes"] = int(row["peak_reserved_bytes"])
        rec["reserved_replayed_bytes"] = pre.detail["replayed_peak_reserved_bytes"]
        # the cache's own tensors (numel · element_size, recorded since the held-out run), else the allocator's
        # view (allocated after the prefill less weights, logits and ids: it includes any unsplit block tail)
        tensors = row.get("cache_tensor_bytes")
        cache_meas = int(tensors) if tensors not in ("", None) else int(row["kv_cache_bytes"])
        cache_est = pre.state_bytes + pre.kv_cache_bytes
        out.append({**rec, "kind": "prefill", "measured_bytes": meas, "planned_bytes": est,
                    "err": est / meas - 1, "ok": abs(est - meas) <= max(TOL_REL * meas, TOL_ABS),
                    "cache_measured_bytes": cache_meas, "cache_planned_bytes": cache_est,
                    "cache_source": "tensors" if tensors not in ("", None) else "allocator",
                    "cache_exact": cache_meas == cache_est, **_times(pre, row.get("time_prefill_ms"))})
        if dec is not None and row.get("peak_decode_bytes") not in ("", None):
            meas = int(row["peak_decode_bytes"]) - base
            est = dec.measured_view_bytes
            out.append({**rec, "kind": "decode", "measured_bytes": meas, "planned_bytes": est, "err": est / meas - 1,
                        "ok": abs(est - meas) <= max(TOL_REL * meas, TOL_ABS)})
    return pd.DataFrame(out)


def markdown(res: pd.DataFrame, sources: list[str]) -> str:
    lines = ["# Hybrid / state-space models on the H200: planned vs measured", "",
             f"Sources: {', '.join(sources)}. Command: `python -m validation.model.hybrid_report {' '.join(sources)}`.",
             "Peak = max_memory_allocated - baseline; planned = `hybrid_plan(...).measured_view_bytes` "
             "(torch fallback path). Tolerance max(3%, 2 MiB).", ""]
    ran = res[res["status"] == "ok"] if len(res) else res
    if len(ran):
        fams = sorted(set(ran["family"]))
        lines.append(f"Within tolerance: {int(ran['ok'].sum())} of {len(ran)} rows ({len(fams)} families: "
                     f"{', '.join(fams)}).")
        pre = ran[ran["kind"] == "prefill"]
        train = ran[ran["kind"] == "train"]
        if len(train):
            lines.append(f"Training steps within tolerance: {int(train['ok'].sum())} of {len(train)} "
                         f"(largest error {train['err'].abs().max():.2%}).")
        for source, part in (pre.groupby("cache_source") if len(pre) else ()):
            what = ("the cache's tensors (numel · element_size)" if source == "tensors" else
                    "memory_allocated() after the prefill less weights, logits and ids")
            lines.append(f"Cache bytes exact ({what}): {int(part['cache_exact'].sum())} of {len(part)} prefill rows.")
    timed = ran[ran["time_in_band"].notna()] if len(ran) and "time_in_band" in ran else ran.iloc[0:0]
    if len(timed):
        r = timed["time_ratio"]
        lines.append(f"Time (prefill, training step) within the plan's measured band: "
                     f"{int(timed['time_in_band'].astype(bool).sum())} of {len(timed)}; measured / priced "
                     f"{r.min():.2f}x to {r.max():.2f}x, median {r.median():.2f}x "
                     "(the price: estimator/model/hybrid_time.py).")
    ooms = res[res["status"] == "oom"] if len(res) else res
    lines.append(f"Out-of-memory rows called 'does not fit': {int(ooms['called'].sum()) if len(ooms) else 0} of "
                 f"{len(ooms)}.")
    lines += ["", "| family | layers | seq | batch | kind | status | measured MiB | planned MiB | err | ok | "
              "cache measured | cache planned | planned |", "|" + "---|" * 13]
    def mib(r, k):
        v = r.get(k)
        return "" if v in (None, "") or pd.isna(v) else f"{v / 2**20:,.1f}"

    for r in res.to_dict("records"):
        err = r.get("err")
        err = "" if err in (None, "") or pd.isna(err) else f"{err:+.2%}"
        ok = r.get("ok") if r["status"] == "ok" else r.get("called")
        lines.append(f"| {r['family']} | {r['layers']} | {r['seq_len']} | {r['batch']} | {r['kind']} | {r['status']} "
                     f"| {mib(r, 'measured_bytes')} | {mib(r, 'planned_bytes')} | {err} | {ok} | "
                     f"{r.get('cache_measured_bytes', '') if not pd.isna(r.get('cache_measured_bytes', 0)) else ''} | "
                     f"{r.get('cache_planned_bytes', '') if not pd.isna(r.get('cache_planned_bytes', 0)) else ''} | "
                     f"{r['planned_fit']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validation.model.hybrid_report", description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--md", help="write the markdown report here")
    args = ap.parse_args(argv)
    res = compare(pd.concat([pd.read_csv(p) for p in args.csv], ignore_index=True))
    text = markdown(res, args.csv)
    if args.md:
        write_atomic(args.md, text, "report")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
