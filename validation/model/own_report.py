"""What a `validation model --config/--preset` row says: its parts (phase, component, measured, planned, error,
within or not) and, for a miss, which phase and which component by how much. Pure Python + pandas (no torch).

    python -m validation.model.own_report OUT.csv [...] [--md REPORT.md] [--against HF_MODELS.csv]

`--against` checks that each row's measured columns equal those of `python -m validation.hf_models` for the same
case (same family, layers, attention, mode, precision, optimizer, checkpointing, seq_len, batch, decode_tokens):
bytes exactly, and lists the differences.
"""

from __future__ import annotations

import argparse
import sys

from validation.errors import first_line
from validation.model.own_plan import _num, bands, part_ok, parts_of

GIB = 2 ** 30
# measured columns that two runs of the same case on the same GPU must give identically (allocator bytes)
SAME_BYTES = ("n_params", "baseline_bytes", "weights_bytes", "state_bytes", "peak_step1_bytes", "peak_forward_bytes",
              "after_forward_bytes", "peak_backward_bytes", "peak_optimizer_bytes", "peak_bytes", "kv_cache_bytes",
              "logits_bytes", "peak_decode_bytes")
CASE_KEY = ("family", "layers", "attn_implementation", "mode", "precision", "optimizer", "checkpointing", "seq_len",
            "batch", "decode_tokens")


def parts(row: dict) -> list[dict]:
    """One entry per part the row has both figures of (validation.model.own_plan.PARTS)."""
    band, out = bands(row), []
    merged = dict(row)
    for key, _mode, phase, component, mcol, pcol, unit in parts_of(row):
        measured, planned = _num(merged.get(mcol)), _num(merged.get(pcol))
        if measured is None or planned is None or measured <= 0:
            continue
        if unit == "ms" and str(row.get("device_name")) == "cpu":
            continue  # the plan's times are for a GPU of the catalog, not this CPU
        out.append({"key": key, "phase": phase, "component": component, "unit": unit, "measured": measured,
                    "planned": planned, "difference": planned - measured, "error": planned / measured - 1,
                    "within": part_ok(key, unit, measured, planned, band)})
    return out


def _fmt(value: float, unit: str) -> str:
    if unit == "count":
        return f"{value:,.0f}"
    return f"{value / GIB:,.3f} GiB" if unit == "bytes" else f"{value:,.2f} ms"


def explain(row: dict) -> list[str]:
    """Lines for a person: the verdict, then each miss with its phase, component and size (bytes first)."""
    status = row.get("status")
    head = f"{row.get('config_source') or row.get('family')} ({row.get('layers')} layers"
    if row.get("layers_cut_from"):
        head += f", cut from {row['layers_cut_from']}; planned for the same cut"
    head += f"), {row.get('mode')} {row.get('precision')}, n = {row.get('seq_len')}, batch {row.get('batch')}"
    if status != "ok":
        lines = [f"{head}: {status}: {row.get('reason') or ''}".rstrip()]
        if status == "oom":
            fits = str(row.get("plan_fits")).lower()
            lines.append("the plan said it does " + ("not fit: the plan called it" if fits == "false" else
                                                     "fit: a miss at the phase above"))
        return lines
    if row.get("plan_error"):
        return [f"{head}: measured; the planner refused it: {row['plan_error']}"]
    items = parts(row)
    peak = next((p for p in items if p["key"] == "peak"), None)
    lines = [head + ":"]
    if peak:
        lines.append(f"  peak: measured {_fmt(peak['measured'], 'bytes')}, planned {_fmt(peak['planned'], 'bytes')} "
                     f"({peak['error']:+.1%}) - " + ("within max(3%, 2 MiB)" if peak["within"] else "a miss"))
    for p in items:
        if p["key"] in ("step_ms", "prefill_ms", "decode_ms"):
            lines.append(f"  {p['phase']} time: measured {_fmt(p['measured'], 'ms')}, planned "
                         f"{_fmt(p['planned'], 'ms')} ({p['error']:+.1%}) - "
                         + ("within the plan's band" if p["within"] else "outside the plan's band"))
    misses = sorted((p for p in items if not p["within"] and p["key"] != "peak"),
                    key=lambda p: (p["unit"] != "bytes", -abs(p["difference"])))
    for p in misses:
        lines.append(f"  miss: {p['phase']}, {p['component']}: planned {_fmt(p['planned'], p['unit'])}, measured "
                     f"{_fmt(p['measured'], p['unit'])}, off by {_fmt(abs(p['difference']), p['unit'])} "
                     f"({p['error']:+.1%})")
    if not misses:
        lines.append("  every part within its tolerance")
    if str(row.get("device_name")) == "cpu":
        lines.append(f"  ran on the CPU: no allocator counters, and the plan's times are for the {row.get('gpu')}")
    return lines


def same_as(row: dict, reference: list[dict]) -> list[str]:
    """Differences between the row's measured bytes and the hf_models row of the same case ([] when equal);
    ValueError when the reference has no such case."""
    def key(r):
        return tuple(str(r.get(k, "")).strip() for k in CASE_KEY)

    match = [r for r in reference if key(r) == key(row) and r.get("status") == "ok"]
    if not match:
        raise ValueError(f"--against: no ok hf_models row for the case {dict(zip(CASE_KEY, key(row), strict=True))}")
    ref = match[0]
    return [f"{c}: {row.get(c)} here, {ref.get(c)} in hf_models" for c in SAME_BYTES
            if _num(row.get(c)) != _num(ref.get(c))]


def markdown(rows: list[dict], sources: list[str]) -> str:
    lines = [f"# Your model against its plan ({', '.join(sources)})", "",
             "Regenerate: `python -m validation.model.own_report " + " ".join(sources) + " --md THIS.md`", ""]
    for row in rows:
        lines += explain(row)
        table = parts(row)
        if table:
            lines += ["", "| phase | component | measured | planned | error | within |", "|---|---|---|---|---|---|"]
            lines += [f"| {p['phase']} | {p['component']} | {_fmt(p['measured'], p['unit'])} | "
                      f"{_fmt(p['planned'], p['unit'])} | {p['error']:+.1%} | {'yes' if p['within'] else 'no'} |"
                      for p in table]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import csv

    p = argparse.ArgumentParser(prog="python -m validation.model.own_report", description=__doc__.splitlines()[0])
    p.add_argument("csv", nargs="+", help="output of python -m validation model --config/--preset")
    p.add_argument("--md", help="write the report here (Markdown) instead of stdout")
    p.add_argument("--against", help="a python -m validation.hf_models output with the same cases")
    args = p.parse_args(argv)
    try:
        rows = []
        for path in args.csv:
            with open(path, newline="") as fh:
                rows += list(csv.DictReader(fh))
        text = markdown(rows, args.csv)
        status = 0
        if args.against:
            with open(args.against, newline="") as fh:
                reference = list(csv.DictReader(fh))
            for row in rows:
                if row.get("status") != "ok":
                    continue
                try:
                    diff = same_as(row, reference)
                except ValueError:
                    text += f"\nSame as hf_models ({row.get('config_source')} {row.get('mode')}): no such case there\n"
                    continue
                text += f"\nSame as hf_models ({row.get('family')} {row.get('mode')}): " + (
                    "yes, every measured byte column equal" if not diff else "NO: " + "; ".join(diff)) + "\n"
                status = status or (1 if diff else 0)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {first_line(exc)}", file=sys.stderr)
        return 2
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(text)
        print(f"wrote {args.md}", file=sys.stderr)
    else:
        print(text)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
