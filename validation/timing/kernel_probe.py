"""Per-kernel GPU time of attention calls: which kernels of a call take its time, and how long the GPU waits between
them (the host's launches).

    python -m validation.timing.kernel_probe --in CASES.csv --out OUT.csv [--budget-s 240] [--max-ms 150]

CASES is a predict-style CSV (the columns of validation/cases/*.csv, with `id`). For each row: inputs as the
validation runner makes them, three warm runs, the call timed by CUDA events (median of 3, `call_ms`), then one run
under torch.profiler (CUDA activity). One output row per GPU kernel of that run: the case's id and backend, the
kernel's index, name, start (us after the first kernel's start) and duration (us). A case whose predicted time
(`--max-ms`, from the estimator) is longer, or that fails, gets one row with its reason in `error`. Written row by
row; `--budget-s` stops before the next case once that many seconds have passed. `--triton` adds, per Triton kernel
(flex_attention's compiled templates), its config, registers, spills and shared memory (`triton_configs`); and
`--source-out FILE` writes the installed torch's flex config rules beside the probe.
"""

from __future__ import annotations

import argparse
import csv
import time

FIELDS = ("id", "backend", "call_ms", "kernel_index", "kernel", "start_us", "duration_us", "triton", "error")


def _kernels(prof) -> list[tuple[str, float, float]]:
    """(name, start ns, duration ns) of the profiled run's GPU kernels in start order (memcpy/memset left out)."""
    import torch

    out = []
    for e in prof.profiler.kineto_results.events():
        if e.device_type() != torch.autograd.DeviceType.CUDA:
            continue
        name = e.name()
        if name.startswith(("Memcpy", "Memset", "[memory]")):
            continue
        out.append((name, float(e.start_ns()), float(e.duration_ns())))
    return sorted(out, key=lambda k: k[1])


def probe(row: dict, repeats: int = 3, triton: bool = False) -> list[dict]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from validation.call.protocol import make_inputs, run_call, time_call_ms
    from validation.call.rows import call_from_row
    from validation.timing import triton_configs

    call = call_from_row(row)
    inp = make_inputs(call, "cuda")
    before = triton_configs.autotuner_ids() if triton else set()
    for _ in range(3):
        run_call(call, inp)
    torch.cuda.synchronize()
    call_ms = time_call_ms(call, inp, "cuda", repeats)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run_call(call, inp)
        torch.cuda.synchronize()
    kernels = _kernels(prof)
    configs = triton_configs.compiled_since(before) if triton else {}
    t0 = kernels[0][1] if kernels else 0.0
    return [{"id": row["id"], "backend": row["backend"], "call_ms": round(call_ms, 5), "kernel_index": i,
             "kernel": name[:200], "start_us": round((start - t0) / 1e3, 3), "duration_us": round(dur / 1e3, 3),
             "triton": configs.get(name, ""), "error": ""} for i, (name, start, dur) in enumerate(kernels)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.timing.kernel_probe",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--in", dest="inp", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--max-ms", type=float, default=150.0, help="skip cases predicted longer than this")
    parser.add_argument("--triton", action="store_true", help="record each Triton kernel's config and spills")
    parser.add_argument("--source-out", help="write the installed torch's flex config rules to this file")
    args = parser.parse_args(argv)

    import torch

    from validation.call.rows import predict_rows, read_cases
    from validation.errors import first_line

    if args.source_out:
        from validation.timing.triton_configs import config_source

        with open(args.source_out, "w", encoding="utf-8") as f:
            f.write(config_source())
    _, rows = read_cases(args.inp)
    preds, _ = predict_rows(rows, "h200", None)
    start = time.monotonic()
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for row, pred in zip(rows, preds, strict=True):
            if time.monotonic() - start > args.budget_s:
                break
            empty = {k: "" for k in FIELDS} | {"id": row["id"], "backend": row["backend"]}
            predicted = pred.get("predicted_time_ms")
            if predicted in (None, "") or float(predicted) > args.max_ms:
                w.writerow(empty | {"error": f"predicted {predicted} ms: over --max-ms {args.max_ms}"})
                continue
            try:
                w.writerows(probe(row, triton=args.triton))
            except Exception as exc:  # noqa: BLE001 - one failing case never sinks the run
                w.writerow(empty | {"error": first_line(exc)})
            finally:
                torch.cuda.empty_cache()
            f.flush()
    print(f"{args.out}: {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
