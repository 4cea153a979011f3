"""Where a vision model's prefill or training step spends its time on the GPU: per case, the wall time (CUDA
events, median of `--reps`), the host time to issue it (perf_counter until the call returns), and, for cases with
profile=1, one step under torch.profiler with its CUDA kernels summed by class (gemm, attention, conv, optimizer,
other) and the largest kernels by name. Also times bare SDPA calls at the towers' shapes (`--sdpa`).

    python bench/bench_vision_breakdown.py --cases validation/cases/h200_hf_vision_breakdown.csv \
        --out $OUT/h200_hf_vision_breakdown.jsonl --sdpa --budget-s 80

Cases use validation/cases/h200_hf_vision*.csv's columns (family, layers, attn_implementation, mode, precision,
batch, seq_len, image_size, images, trainable, overrides) plus `profile` (0/1) and `reps`. Models are built by
validation/model/hf_vision.py (random weights, configs in code). Training is bf16-mixed (fp32 weights, autocast)
with torch.optim.AdamW as validation/model/hf_runs.py runs it.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from validation.model.hf_vision import build, make_inputs, set_trainable, tokens, vision_config  # noqa: E402

CLASSES = (("attention", re.compile(r"fmha|flash|attention|cudnn_generated|cutlass[FB]|mem_eff|sdpa", re.I)),
           ("optimizer", re.compile(r"multi_tensor|foreach|adam", re.I)),
           ("conv", re.compile(r"conv|implicit|fprop|dgrad|wgrad|winograd|im2col", re.I)),
           ("gemm", re.compile(r"gemm|nvjet|xmma|cublas|splitK|Kernel2|sm90_|matmul", re.I)))


def kernel_class(name: str) -> str:
    for cls, pat in CLASSES:
        if pat.search(name):
            return cls
    return "other"


def _step_fn(model, cfg, case, device: str = "cuda"):
    """The case's step as a closure: a no-grad prefill, or a training step."""
    train = case["mode"] == "train"
    kw = make_inputs(model, cfg, case, SimpleNamespace(device=torch.device(device)), train)
    if not train:
        model.eval()

        def fn():
            with torch.no_grad():
                out = model(**kw)
            del out
        return fn
    model.train()
    model.config.use_cache = False
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)

    def fn():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**kw).loss
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
    return fn


def _timed(fn, cuda: bool = True):
    """(wall ms: CUDA events on the GPU, perf_counter on the CPU; host ms until fn returned)."""
    if not cuda:
        t = time.perf_counter()
        fn()
        ms = (time.perf_counter() - t) * 1e3
        return ms, ms
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t = time.perf_counter()
    start.record()
    fn()
    host = (time.perf_counter() - t) * 1e3
    end.record()
    end.synchronize()
    return start.elapsed_time(end), host


def _profile(fn, top: int = 14) -> dict:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    by_class: dict = {}
    kernels = []
    count = 0
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None)
        if t is None:
            t = getattr(ev, "cuda_time_total", 0.0)
        if not t or ev.key.startswith(("cudaLaunch", "cudaMemcpy", "cudaStream")):
            continue
        if getattr(ev, "device_type", None) is not None and "CUDA" not in str(ev.device_type):
            continue
        cls = kernel_class(ev.key)
        by_class[cls] = by_class.get(cls, 0.0) + t / 1e3
        count += ev.count
        kernels.append((t / 1e3, ev.count, cls, ev.key[:120]))
    kernels.sort(reverse=True)
    return {"gpu_ms_by_class": {k: round(v, 3) for k, v in by_class.items()},
            "gpu_ms": round(sum(by_class.values()), 3), "kernels": count,
            "top": [{"ms": round(t, 3), "n": n, "cls": c, "name": k} for t, n, c, k in kernels[:top]]}


def run_case(case: dict) -> dict:
    cfg = vision_config(case["family"], int(case["layers"]) if case.get("layers") else None,
                        case.get("overrides") or None, False, case.get("image_size") or None)
    train = case["mode"] == "train"
    dtype = torch.float32 if train else torch.bfloat16
    with torch.device("cuda"):
        model = build(cfg, case["attn_implementation"], dtype)
    set_trainable(model, cfg, case.get("trainable") or "all")
    c = dict(case, batch=int(case["batch"]), seq_len=int(case.get("seq_len") or 0),
             images=int(case.get("images") or 1))
    fn = _step_fn(model, cfg, c)
    row = dict(case)
    row["vision_tokens"], row["lm_tokens"] = tokens(cfg, c)
    for _ in range(2):
        fn()
    reps = int(case.get("reps") or 3)
    walls, hosts = [], []
    for _ in range(reps):
        w, h = _timed(fn)
        walls.append(w)
        hosts.append(h)
    row.update(wall_ms=round(statistics.median(walls), 3), host_ms=round(statistics.median(hosts), 3),
               wall_all_ms=[round(w, 2) for w in walls])
    if str(case.get("profile", "0")) == "1":
        row.update(_profile(fn))
    del fn, model
    torch.cuda.empty_cache()
    return row


SDPA_SHAPES = [(1, 16, 4097, 64), (1, 16, 16385, 64), (1, 16, 10001, 80), (1, 16, 4096, 72)]


def sdpa_rows() -> list[dict]:
    """Bare non-causal, unmasked bf16 SDPA calls (backend auto) at the towers' shapes: forward and forward+backward,
    median of 5 after 2 warm-ups; the backend read from the profiled kernel names."""
    import torch.nn.functional as F

    out = []
    for b, h, n, d in SDPA_SHAPES:
        for mode in ("forward", "forward_backward"):
            grad = mode == "forward_backward"
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
                       for _ in range(3))

            def fn(q=q, k=k, v=v, grad=grad):
                o = F.scaled_dot_product_attention(q, k, v)
                if grad:
                    o.backward(torch.ones_like(o))
            for _ in range(2):
                fn()
            ts = sorted(_timed(fn)[0] for _ in range(5))
            prof = _profile(fn)
            out.append({"sdpa": [b, h, n, d], "mode": mode, "ms": round(ts[2], 4),
                        "kernels": [t["name"][:60] for t in prof["top"][:3]]})
            del q, k, v, fn
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sdpa", action="store_true")
    ap.add_argument("--budget-s", type=float, default=80.0)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with open(args.cases, newline="") as f:
        cases = list(csv.DictReader(f))
    with open(args.out, "w") as out:
        if args.sdpa:
            for r in sdpa_rows():
                out.write(json.dumps(r) + "\n")
                print(json.dumps(r), flush=True)
        for case in cases:
            if time.perf_counter() - t0 > args.budget_s:
                print("budget spent; stopping before", case["family"], flush=True)
                break
            t = time.perf_counter()
            try:
                row = run_case(case)
            except Exception as e:  # noqa: BLE001 - every failure becomes a row
                row = dict(case, error=f"{type(e).__name__}: {str(e)[:200]}")
                torch.cuda.empty_cache()
            row["case_s"] = round(time.perf_counter() - t, 2)
            out.write(json.dumps(row) + "\n")
            print(json.dumps({k: v for k, v in row.items() if k != "top"}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
