"""Where a vision-language model's prefill spends its wall time, part by part: per case, the plain prefill (CUDA
events, median of `--reps`) and then the same prefill with the device synchronised around the tower
(`get_image_features`: tower + projector) and, for Gemma-3, around the language model's mask construction
(`create_masks_for_vision_model`, transformers 5.17 gemma3/modeling_gemma3.py), each timed on the host
(perf_counter between synchronisations). Cases with profile=1 also get one prefill under torch.profiler, its
kernels by class and the `--top` largest by name (bench/bench_vision_breakdown.py's profile).

    python bench/bench_vision_parts.py --cases CASES.csv --out $OUT/parts.jsonl --budget-s 60 --top 40
    python bench/bench_vision_parts.py --cases CASES.csv --out /tmp/parts.jsonl --device cpu --tiny   # a check

Cases: bench/bench_vision_breakdown.py's columns. ViT and Swin have no parts: their rows carry the plain
prefill, the host time to issue it and every rep (host-bound rows vary between processes: this shows the spread
inside one).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from bench_vision_breakdown import _profile, _step_fn  # noqa: E402
from bench_vision_breakdown import _timed as _timed_on  # noqa: E402

from validation.model.hf_vision import build, set_trainable, tokens, vision_config  # noqa: E402

DEVICE = "cuda"


def _sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _timed(fn):
    """bench_vision_breakdown's timer on this run's device."""
    return _timed_on(fn, cuda=DEVICE == "cuda")


def _prefill_fn(model, cfg, case):
    """bench_vision_breakdown's no-grad prefill closure on this run's device."""
    return _step_fn(model, cfg, dict(case, mode="prefill"), device=DEVICE)


class _Clock:
    """Host-timed calls between device synchronisations, by name."""

    def __init__(self):
        self.ms: dict[str, list[float]] = {}

    def wrap(self, name, fn):
        def timed(*a, **kw):
            _sync()
            t = time.perf_counter()
            out = fn(*a, **kw)
            _sync()
            self.ms.setdefault(name, []).append((time.perf_counter() - t) * 1e3)
            return out
        return timed


def _instrument(model, cfg, clock):
    """Patch the tower call and Gemma-3's mask construction; returns an undo function."""
    undo = []
    inner = getattr(model, "model", None)
    if cfg["model_type"] not in ("vit", "swin") and inner is not None and hasattr(inner, "get_image_features"):
        orig = inner.get_image_features
        inner.get_image_features = clock.wrap("tower", orig)
        undo.append(lambda: delattr(inner, "get_image_features"))
    if cfg["model_type"] == "gemma3":
        from transformers.models.gemma3 import modeling_gemma3 as g3

        orig_mask = g3.create_masks_for_vision_model
        g3.create_masks_for_vision_model = clock.wrap("mask", orig_mask)
        undo.append(lambda: setattr(g3, "create_masks_for_vision_model", orig_mask))
    return lambda: [u() for u in undo]


def run_case(case: dict, top: int, tiny: bool = False) -> dict:
    cfg = vision_config(case["family"], int(case["layers"]) if case.get("layers") else None,
                        case.get("overrides") or None, tiny, case.get("image_size") or None)
    with torch.device(DEVICE):
        model = build(cfg, case["attn_implementation"], torch.bfloat16)
    set_trainable(model, cfg, "all")
    c = dict(case, batch=int(case["batch"]), seq_len=int(case.get("seq_len") or 0),
             images=int(case.get("images") or 1), mode="prefill")
    fn = _prefill_fn(model, cfg, c)
    row = dict(case)
    row["vision_tokens"], row["lm_tokens"] = tokens(cfg, c)
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    fn()
    _sync()
    if DEVICE == "cuda":
        row["peak_bytes"] = torch.cuda.max_memory_allocated()
    row["first_ms"] = round((time.perf_counter() - t) * 1e3, 3)
    fn()
    reps = int(case.get("reps") or 5)
    walls, hosts = zip(*(_timed(fn) for _ in range(reps)), strict=True)
    row.update(wall_ms=round(statistics.median(walls), 3), host_ms=round(statistics.median(hosts), 3),
               wall_all_ms=[round(w, 2) for w in walls], host_all_ms=[round(h, 2) for h in hosts])
    clock = _Clock()
    undo = _instrument(model, cfg, clock)
    try:
        if cfg["model_type"] not in ("vit", "swin"):
            synced = [_timed(fn)[0] for _ in range(reps)]
            row["synced_wall_ms"] = round(statistics.median(synced), 3)
            for name, ms in clock.ms.items():
                row[f"{name}_ms"] = round(statistics.median(ms), 3)
                row[f"{name}_all_ms"] = [round(x, 2) for x in ms]
    finally:
        undo()
    if str(case.get("profile", "0")) == "1" and DEVICE == "cuda":
        row.update(_profile(fn, top))
    del fn, model
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=60.0)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="shrunken families (a CPU check of the script)")
    args = ap.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    t0 = time.perf_counter()
    with open(args.cases, newline="") as f:
        cases = list(csv.DictReader(f))
    with open(args.out, "w") as out:
        for case in cases:
            if time.perf_counter() - t0 > args.budget_s:
                print("budget spent; stopping before", case["family"], case.get("image_size"), flush=True)
                break
            t = time.perf_counter()
            try:
                row = run_case(case, args.top, args.tiny)
            except Exception as e:  # noqa: BLE001 - every failure becomes a row
                row = dict(case, error=f"{type(e).__name__}: {str(e)[:300]}")
                if DEVICE == "cuda":
                    torch.cuda.empty_cache()
            row["case_s"] = round(time.perf_counter() - t, 2)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps({k: v for k, v in row.items() if k != "top"}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
