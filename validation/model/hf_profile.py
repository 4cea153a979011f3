"""Where a real Hugging Face model's prefill spends its GPU time, kernel by kernel (torch.profiler), to check the
time model's kernel classes against what really runs. Self-contained: torch, transformers, stdlib.

    python -m validation.hf_profile --case mixtral-8x7b:2:sdpa:16384 [--case ...] --out OUT.csv [--device cuda]

A case is FAMILY:LAYERS:ATTN_IMPLEMENTATION:SEQ_LEN[:train|:decode][:bBATCH] (batch 1 unless bBATCH, bf16 weights, as
`validation.model.hf_models` builds it from `validation.model.hf_configs`); `:train` profiles a forward with labels
and its backward (bf16-true, no optimizer) instead of a prefill; `:decode` profiles DECODE_STEPS single-token steps on
the prefill's KV cache (after the same steps have run once, so every per-length cuDNN graph is built): wall_ms is then
the median wall time of one step, new_ms the median of the first run's steps (each at a key length the process had not
seen: one cuDNN graph build per distinct layer shape), and gpu_ms / calls are totals over the steps (the `steps`
column). Each case: one warm-up, the wall time of a second, then a third under the profiler. Rows (one per kernel
name): case, family, layers, attn_implementation, seq_len, batch, mode, steps, wall_ms (the second prefill or step),
new_ms, kernel,
kind (gemm | grouped_gemm | attention | elementwise | reduce | index | copy | other, from the kernel's name), calls,
gpu_ms (sum of the kernel's CUDA time), share (of the profiled GPU time).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time

import torch

from validation.errors import typed_line
from validation.model.hf_configs import family_config, to_hf_config

DECODE_STEPS = 8
COLUMNS = ["case", "family", "layers", "attn_implementation", "seq_len", "batch", "mode", "steps", "wall_ms", "new_ms",
           "kernel", "kind",
           "calls", "gpu_ms", "share", "torch_version", "transformers_version", "device_name"]

# (substring of a CUDA kernel name, kind): the first match wins
KINDS = (("GroupProblemShape", "grouped_gemm"), ("grouped", "grouped_gemm"), ("Grouped", "grouped_gemm"),
         ("fmha", "attention"), ("flash", "attention"), ("attention", "attention"), ("cudnn", "attention"),
         ("gemm", "gemm"), ("Gemm", "gemm"),
         ("cutlass", "gemm"), ("nvjet", "gemm"), ("sm90_xmma", "gemm"), ("reduce", "reduce"),
         ("Reduce", "reduce"), ("softmax", "reduce"), ("index", "index"), ("Index", "index"), ("gather", "index"),
         ("scatter", "index"), ("sort", "index"), ("Sort", "index"), ("copy", "copy"), ("Copy", "copy"),
         ("cat", "copy"), ("elementwise", "elementwise"), ("Elementwise", "elementwise"))


def kind_of(name: str) -> str:
    return next((kind for key, kind in KINDS if key in name), "other")


def parse_case(text: str) -> dict:
    parts = text.split(":")
    batch = 1
    if len(parts) > 4 and parts[-1][:1] == "b" and parts[-1][1:].isdigit() and int(parts[-1][1:]) > 0:
        batch = int(parts.pop()[1:])
    if len(parts) not in (4, 5) or (len(parts) == 5 and parts[4] not in ("train", "decode")):
        raise ValueError(f"--case {text!r}: expected "
                         "FAMILY:LAYERS:ATTN_IMPLEMENTATION:SEQ_LEN[:train|:decode][:bBATCH]")
    family, layers, impl, seq = parts[:4]
    return {"case": text, "family": family, "layers": int(layers), "attn_implementation": impl, "seq_len": int(seq),
            "batch": batch, "mode": parts[4] if len(parts) == 5 else "prefill"}


def profile_case(case: dict, device: str) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoModelForCausalLM

    cfg = family_config(case["family"], case["layers"])
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(to_hf_config(cfg), attn_implementation=case["attn_implementation"],
                                                 dtype=torch.bfloat16)
    ids = torch.randint(0, cfg["vocab_size"], (case["batch"], case["seq_len"]), device=device)
    if case["mode"] == "train":
        model.train()

        def prefill():
            model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
            for p in model.parameters():
                p.grad = None
    else:
        model.eval()

        def prefill():
            with torch.no_grad():
                return model(input_ids=ids, use_cache=True, logits_to_keep=1)
    steps = 1
    if case["mode"] == "decode":
        steps = DECODE_STEPS
        tok = torch.randint(0, cfg["vocab_size"], (case["batch"], 1), device=device)

        def run():  # the decode steps on a fresh prefill's cache; returns the wall ms of each step
            with torch.no_grad():
                out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
                torch.cuda.synchronize()
                walls = []
                for _ in range(steps):
                    t = time.perf_counter()
                    out = model(input_ids=tok, past_key_values=out.past_key_values, use_cache=True)
                    torch.cuda.synchronize()
                    walls.append((time.perf_counter() - t) * 1e3)
                return walls

        new = sorted(run())
        new_ms = new[len(new) // 2]
        walls = sorted(run())
        wall_ms = walls[len(walls) // 2]
        with torch.no_grad():
            cache = model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof, torch.no_grad():
            for _ in range(steps):
                cache = model(input_ids=tok, past_key_values=cache, use_cache=True).past_key_values
            torch.cuda.synchronize()
        cache = None
    else:
        new_ms = None
        prefill()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        prefill()
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - t0) * 1e3
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            prefill()
            torch.cuda.synchronize()
    totals: dict[str, list] = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA or e.name.startswith(("Memcpy", "Memset")):
            continue
        t = totals.setdefault(e.name, [0, 0.0])
        t[0] += 1
        t[1] += e.device_time / 1e3
    gpu_ms = sum(v[1] for v in totals.values()) or 1.0
    import transformers

    rows = []
    for name, (calls, ms) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        rows.append({**case, "steps": steps, "wall_ms": round(wall_ms, 3),
                     "new_ms": round(new_ms, 3) if new_ms is not None else "", "kernel": name[:200],
                     "kind": kind_of(name), "calls": calls, "gpu_ms": round(ms, 4), "share": round(ms / gpu_ms, 4),
                     "torch_version": torch.__version__, "transformers_version": transformers.__version__,
                     "device_name": torch.cuda.get_device_name()})
    model = ids = prof = None  # noqa: F841 - freed before the next case
    torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validation.hf_profile", description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", required=True, help="FAMILY:LAYERS:ATTN_IMPLEMENTATION:SEQ_LEN")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    try:
        cases = [parse_case(c) for c in args.case]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.device != "cuda" or not torch.cuda.is_available():
        print("error: --device: the profile needs a CUDA GPU", file=sys.stderr)
        return 2
    with open(args.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for case in cases:
            try:
                rows = profile_case(case, args.device)
            except Exception as exc:  # noqa: BLE001 - one failing case does not sink the others
                print(f"{case['case']}: {typed_line(exc, 300)}", file=sys.stderr)
                torch.cuda.empty_cache()
                continue
            w.writerows(rows)
            fh.flush()
            kinds: dict[str, float] = {}
            for r in rows:
                kinds[r["kind"]] = kinds.get(r["kind"], 0.0) + r["gpu_ms"]
            per = rows[0]["steps"]
            kernels = sum(r["calls"] for r in rows) / per
            print(f"{case['case']}: wall {rows[0]['wall_ms']:.2f} ms, {kernels:.0f} kernels,"
                  f" GPU {sum(r['gpu_ms'] for r in rows) / per:.2f} ms per step; " +
                  ", ".join(f"{k} {v:.1f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
