"""What hf-cb's packed SDPA call per layer costs on the machine: a cuDNN graph build per new shape, and its GPU time.

    python -m validation.serving.sdpa_probe --out DIR [--device cuda] [--tiny] [--budget-s 80]

transformers 5.17 `paged|sdpa` (integrations/sdpa_paged.py) calls `scaled_dot_product_attention` once per layer
with q (1, heads, Q, d), the gathered and repeated k and v (1, heads, K, d) and a slice `[..., :Q, :K]` of the
engine's static (1, 1, max_batch_tokens, pages + max_batch_tokens) bias (input_outputs.py `_setup_static_tensors`).
Where SDPA runs it on cuDNN, PyTorch builds one execution graph per distinct shape and strides and keeps it for the
process (aten/src/ATen/native/cudnn/MHA.cpp). Q and K change nearly every engine step.

Part 1 (`DIR/sdpa_micro.csv`): that call alone, for a few (Q, K), with the bias slice of a small pool (16,384 pages)
and of a large one (1,212,672 pages, llama-3.1-8b cut to 20 layers at 0.9 of an H200), strided as the engine passes
it or made contiguous, on SDPA's own choice, forced cuDNN (at the same shape, right after: a cache hit if SDPA's
choice was cuDNN) and forced memory-efficient. `phase` first: one call at a shape not seen (host ms of the call
alone and wall ms synchronised); `seen`: the same call repeated (host ms; GPU ms between CUDA events).

Part 2 (`DIR/sdpa_engine_calls.csv`, `DIR/sdpa_engine_steps.csv`): the engine itself (validation/serving/engine.py
run_engine, llama-3.1-8b cut to 20 layers, 16 Poisson requests), twice in this process: `efficient` with cuDNN
SDPA disabled (`torch.backends.cuda.enable_cudnn_sdp(False)`) first, then `auto` (SDPA's own choice). Every SDPA
call of the engine thread is timed (host ms of the call; GPU ms between CUDA events recorded on the call's stream),
with its Q and K; the steps are the engine's own step records (with their phases).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import gc
import os
import statistics
import sys
import time

MICRO_SHAPES = ((10, 5000), (23, 9000), (23, 20000), (64, 36000), (816, 816), (1552, 2368))
TINY_SHAPES = ((3, 40), (5, 64), (16, 16))


def _write(path: str, rows: list[dict]) -> None:
    if not rows:
        return
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def micro(device: str, tiny: bool, deadline: float) -> list[dict]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cuda = device == "cuda"
    heads, d, M = (2, 16, 64) if tiny else (32, 128, 8192)
    pools = (256, 2048) if tiny else (16_384, 1_212_672)
    shapes = TINY_SHAPES if tiny else MICRO_SHAPES
    dt = torch.bfloat16
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    rows: list[dict] = []

    def timed(fn, Q, K, pool, variant, phase, repeat=1):
        hosts, gpus = [], []
        for _ in range(repeat):
            sync()
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
            t = time.perf_counter()
            fn()
            host = (time.perf_counter() - t) * 1e3
            if cuda:
                b.record()
            sync()
            wall = (time.perf_counter() - t) * 1e3
            hosts.append(host)
            gpus.append(a.elapsed_time(b) if cuda else float("nan"))
        rows.append({"part": "micro", "pool_pages": pool, "q": Q, "k": K, "variant": variant, "phase": phase,
                     "repeat": repeat, "host_ms": round(statistics.median(hosts), 4),
                     "wall_ms": round(wall, 4), "gpu_ms": round(statistics.median(gpus), 4)})

    # the process's first cuDNN build (hundreds of ms once) is paid here, on a shape no row uses
    q0 = torch.randn(1, heads, 7, d, device=device, dtype=dt)
    F.scaled_dot_product_attention(q0, q0, q0, attn_mask=torch.zeros(1, 1, 7, 7, device=device, dtype=dt))
    sync()
    for pool in pools:
        if time.perf_counter() > deadline:
            break
        mask = torch.zeros((1, 1, M, pool + M), device=device, dtype=dt)
        for i, (Q, K) in enumerate(shapes):
            if time.perf_counter() > deadline:
                break
            if Q > M or K + 4 > pool + M:  # the engine's bias holds at most M queries and pool + M keys
                continue
            q = torch.randn(1, heads, Q, d, device=device, dtype=dt)
            k = torch.randn(1, heads, K, d, device=device, dtype=dt)
            v = torch.randn(1, heads, K, d, device=device, dtype=dt)
            strided = mask[..., :Q, :K]
            contig = strided.contiguous()

            def call(m, backend=None, q=q, k=k, v=v):
                if backend is None:
                    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=m)

                def run():
                    with sdpa_kernel([backend]):
                        F.scaled_dot_product_attention(q, k, v, attn_mask=m)
                return run

            timed(call(strided), Q, K, pool, "auto_strided", "first")
            timed(call(strided), Q, K, pool, "auto_strided", "seen", 5)
            if cuda:
                timed(call(strided, SDPBackend.CUDNN_ATTENTION), Q, K, pool, "cudnn_strided_after_auto", "first")
            timed(call(contig), Q, K, pool, "auto_contiguous", "first")
            timed(call(contig), Q, K, pool, "auto_contiguous", "seen", 5)
            if cuda:  # a CPU has no memory-efficient kernel
                timed(call(strided, SDPBackend.EFFICIENT_ATTENTION), Q, K, pool, "efficient_strided", "first")
                timed(call(strided, SDPBackend.EFFICIENT_ATTENTION), Q, K, pool, "efficient_strided", "seen", 5)
            if i < 2:  # a decode-like run of new key lengths: one build sample each
                for j in range(1, 5):
                    kj = torch.randn(1, heads, K + j, d, device=device, dtype=dt)
                    timed(call(mask[..., :Q, :K + j], None, q, kj, kj), Q, K + j, pool, "auto_strided", "first")
        del mask
        if cuda:
            torch.cuda.empty_cache()
    return rows


def engine(device: str, tiny: bool, deadline: float) -> tuple[list[dict], list[dict]]:
    import torch
    import torch.nn.functional as F

    from estimator.serve.workload import synthetic_workload
    from validation.model.hf_configs import family_config
    from validation.serving.engine import EngineKnobs, build_model, run_engine

    cuda = device == "cuda"
    cfg = family_config("llama-3.1-8b", 2 if tiny else 20, None, tiny)
    model = build_model(cfg, device)
    work = synthetic_workload(rate_per_s="10", requests=6 if tiny else 16, prompt_tokens="lognormal:384:0.8",
                              output_tokens="uniform:16:48", seed=0)
    requests = list(work.requests)
    if tiny:
        requests = [dataclasses.replace(r, prompt_tokens=max(2, r.prompt_tokens // 40),
                                        output_tokens=max(2, r.output_tokens // 8)) for r in requests]
    original = F.scaled_dot_product_attention
    calls: list[dict] = []
    step_rows: list[dict] = []
    variant = ["?"]

    def wrapped(query, key, value, *a, **kw):
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        t = time.perf_counter()
        out = original(query, key, value, *a, **kw)
        host = (time.perf_counter() - t) * 1e3
        if cuda:
            e1.record()
        calls.append({"variant": variant[0], "t_s": t, "q": int(query.shape[-2]), "k": int(key.shape[-2]),
                      "host_ms": host, "_ev": (e0, e1) if cuda else None})
        return out

    for name in ("efficient", "auto"):
        if time.perf_counter() > deadline - (5 if tiny else 20):
            break
        variant[0] = name
        if cuda:
            torch.backends.cuda.enable_cudnn_sdp(name != "efficient")
        F.scaled_dot_product_attention = wrapped
        try:
            run = run_engine(model, requests, EngineKnobs(), device=device, timeout_s=8 if tiny else 20, seed=0)
        finally:
            F.scaled_dot_product_attention = original
            if cuda:
                torch.backends.cuda.enable_cudnn_sdp(True)
        # the engine's steps are the last len(steps) x layers calls of this variant (its warm-up came first), each
        # step one call per layer (every layer of this model is full attention)
        mine = [c for c in calls if c["variant"] == name]
        layers = int(cfg["num_hidden_layers"])
        tail = mine[len(mine) - len(run.steps) * layers:] if len(mine) >= len(run.steps) * layers else []
        for j, c in enumerate(tail):
            c["step"] = j // layers
            c["layer"] = j % layers
            s = run.steps[j // layers]
            c["matches_step"] = int(c["q"] == s.q_tokens and c["k"] == s.max_kv_read + s.q_tokens)
        for i, s in enumerate(run.steps):
            row = {"variant": name, "step": i, "start_s": round(s.start_s, 6), "requests": s.requests,
                   "decode_requests": s.decode_requests, "q_tokens": s.q_tokens, "max_kv_read": s.max_kv_read}
            row.update({k: round(v, 4) for k, v in s.phases.items() if not k.startswith("_")})
            step_rows.append(row)
    del model
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    for c in calls:
        ev = c.pop("_ev")
        c["gpu_ms"] = round(ev[0].elapsed_time(ev[1]), 4) if ev else float("nan")
        c["host_ms"] = round(c["host_ms"], 4)
        c["t_s"] = round(c["t_s"], 6)
    return calls, step_rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m validation.serving.sdpa_probe", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for the CSVs")
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when torch sees a GPU")
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a CPU check of the code paths)")
    p.add_argument("--budget-s", type=float, default=80.0, help="start no new part after this many seconds")
    p.add_argument("--skip-engine", action="store_true", help="part 1 only")
    args = p.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    deadline = start + args.budget_s
    # the engine first: its figures matter most; part 1 takes what is left
    if not args.skip_engine:
        calls, steps = engine(device, args.tiny, deadline)
        _write(os.path.join(args.out, "sdpa_engine_calls.csv"), calls)
        _write(os.path.join(args.out, "sdpa_engine_steps.csv"), steps)
        print(f"engine: {len(calls)} SDPA calls, {len(steps)} steps ({time.perf_counter() - start:.1f} s)", flush=True)
    rows = micro(device, args.tiny, deadline)
    _write(os.path.join(args.out, "sdpa_micro.csv"), rows)
    print(f"micro: {len(rows)} rows ({time.perf_counter() - start:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
