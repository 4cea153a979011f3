"""`python -m validation run | grid | report | model | calibrate | serve`: argument parsing and one-line errors,
nothing else.

run        measure a predict-style CSV on the local GPU (or the CPU) beside the estimator's predictions
grid       write a predict-style case list (nsweep, matrix, random, calibration, cpu, sweep, headdim)
report     summarise a run's output: error tables, worst cases, the doubling check, kernel counts
model      --config PATH | --preset NAME [plan flags]: your model and workload on one GPU (no torchrun), measured
           phase by phase beside the plan; --family F under torchrun: a HF model sharded over the processes (tp, cp,
           ZeRO-3)
calibrate  measure GEMMs, memory-bound kernels, the launch floor, SDPA and optimizers on this machine, to a JSON
           file for `python -m estimator plan --calibration`
serve      transformers' continuous batching serving a workload on the local device, beside the serving simulation
"""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
import time

from estimator.files import refuse_same_file, write_atomic
from estimator.hardware import get_gpu, gpu_from_device_name
from validation.errors import first_line
from validation.native_stderr import filtered_stderr


def modelled_torch(version: str) -> str | None:
    """'2.13' for '2.13.0+cpu' when the estimator models that version; None (its default) otherwise."""
    from estimator.call import backends
    short = ".".join(version.split("+")[0].split(".")[:2])
    try:
        return backends.check_torch_version(short)
    except ValueError:
        return None


def _run(args) -> int:
    import torch

    from validation.call.rows import read_cases
    from validation.call.runner import RunOptions
    from validation.call.sweep import sweep, write_meta

    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: cuda requested but torch sees no GPU (this machine runs on cpu)")
    gpu = args.gpu
    if gpu is None:
        detected = gpu_from_device_name(torch.cuda.get_device_name()) if device == "cuda" else None
        if device == "cuda" and detected is None:
            raise ValueError(f"gpu: cannot map {torch.cuda.get_device_name()!r} to the catalog; pass --gpu NAME")
        gpu = detected or "h200"
    gpu = get_gpu(gpu).name
    if args.torch is not None:  # refused up front: an unmodelled version would run the sweep without predictions
        from estimator.call import backends
        try:
            backends.check_torch_version(args.torch)
        except ValueError as exc:
            raise ValueError(f"--torch:{str(exc).partition(':')[2]}") from None
    options = RunOptions(device=device, repeats=args.repeats, timeout_s=args.timeout_s, force=args.force, gpu=gpu,
                         torch_version=args.torch or modelled_torch(torch.__version__))
    refuse_same_file(args.out, [args.inp], "--out")
    refuse_same_file(f"{args.out}.meta.json", [args.inp], "--out")
    inputs, rows = read_cases(args.inp)
    if not rows:
        raise ValueError(f"--in {args.inp}: no rows under the header")
    if args.gpus < 1:
        raise ValueError(f"--gpus: expected a number of GPUs >= 1, got {args.gpus}")
    if args.gpus > 1:
        from validation.call.sweep import spread
        if device != "cuda":
            raise ValueError("--gpus: more than one worker needs CUDA GPUs (this run is on the cpu)")
        if args.gpus > torch.cuda.device_count():
            raise ValueError(f"--gpus {args.gpus}: torch sees {torch.cuda.device_count()} GPU(s)")
        if args.resume:
            raise ValueError("--gpus: --resume is for one worker")
        counts = spread(inputs, rows, args.out, options, args.gpus)
    else:
        counts = sweep(inputs, rows, args.out, options, resume=args.resume)
    meta = write_meta(args.out, options, ["python", "-m", "validation"] + args.argv, counts, started)
    summary = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    print(f"wrote {args.out} ({summary}) and {meta}", file=sys.stderr)
    return 0


MAX_GRID_CASES = 100_000
MAX_WORST = 10_000


def _grid(args) -> int:
    if not 1 <= args.n <= MAX_GRID_CASES:
        raise ValueError(f"--n: expected a number of cases in [1, {MAX_GRID_CASES:,}], got {args.n}")
    from validation.call import grid
    from validation.call.case_lists import make_grid
    rows = make_grid(args.kind, seed=args.seed, n=args.n, dtype=args.dtype, mode=args.mode, stop=args.stop,
                     backend=args.backend)
    grid.write_csv(rows, args.out)
    print(f"wrote {len(rows)} cases to {args.out}", file=sys.stderr)
    return 0


def _report(args) -> int:
    import pandas as pd

    from validation.call.report import build_report, load
    if not 0 <= args.worst <= MAX_WORST:
        raise ValueError(f"--worst: expected a number of cases in [0, {MAX_WORST:,}], got {args.worst}")
    refuse_same_file(args.md, [*args.csv, *(f"{path}.meta.json" for path in args.csv)], "--md")
    loaded = [load(path, gpu=args.gpu, torch_version=args.torch, recorded=args.recorded) for path in args.csv]
    frame = pd.concat([df for df, _ in loaded], ignore_index=True)
    meta = loaded[0][1] if len(loaded) == 1 else {
        "predictions": loaded[0][1]["predictions"],
        "driver": ", ".join(sorted({m["driver"] for _, m in loaded if m.get("driver")})),
        "command": "; ".join(m["command"] for _, m in loaded if m.get("command"))}
    text = build_report(frame, meta=meta, title=", ".join(args.csv), worst=args.worst)
    if args.md:
        write_atomic(args.md, text, "--md")
        print(f"wrote {args.md}", file=sys.stderr)
    else:
        print(text)
    return 0


MAX_BUDGET_S = 24 * 3600.0  # a calibration takes about a minute on an H200 (validation/timing/calibrate.py)


def _calibrate(args) -> int:
    budget = args.budget_s
    if not math.isfinite(budget) or not 0 <= budget <= MAX_BUDGET_S:
        raise ValueError(f"--budget-s: expected seconds in [0, {MAX_BUDGET_S:g}] (0 = no limit), got {budget:g}")
    from validation.timing.calibrate import calibrate
    calibrate(args.out, device=args.device, quick=args.quick, budget_s=budget)
    return 0


def _model(args) -> int:
    from validation.model.distributed import main_model
    return main_model(args)


def _serve(args) -> int:
    from validation.serving.cli import main_serve
    return main_serve(args)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m validation", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="measure a predict-style CSV (contract §5)")
    r.add_argument("--in", dest="inp", required=True, help="predict-style input CSV")
    r.add_argument("--out", required=True, help="output CSV, written row by row")
    r.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when torch sees a GPU, else cpu")
    r.add_argument("--force", action="store_true", help="run cases predicted not to fit in free memory or time, "
                   "and replace an OUT that holds measured rows (without it such an OUT is refused; see --resume)")
    r.add_argument("--repeats", type=int, default=5, help="timed repeats per case (median); default 5")
    r.add_argument("--timeout-s", type=float, default=120.0, help="per-case time limit in seconds; 0 = none")
    r.add_argument("--gpu", help="catalog GPU the predictions are for (default: detected; h200 on a CPU)")
    r.add_argument("--torch", help="torch version passed to the estimator (default: the estimator's)")
    r.add_argument("--resume", action="store_true", help="append to OUT, skipping ids already measured there "
                   "(a case recorded as a crash is measured again)")
    r.add_argument("--gpus", type=int, default=1, help="local GPUs: one worker per GPU (CUDA_VISIBLE_DEVICES), rows "
                   "merged in input order (default 1; more than 1 is refused on the cpu)")
    r.set_defaults(func=_run)
    g = sub.add_parser("grid", help="write a predict-style case list")
    g.add_argument("--kind", required=True,
                   choices=("nsweep", "matrix", "random", "calibration", "cpu", "sweep", "headdim"))
    g.add_argument("--out", required=True)
    g.add_argument("--seed", type=int, default=0, help="random: the seed (default 0)")
    g.add_argument("--n", type=int, default=200, help="random: number of cases (default 200)")
    g.add_argument("--backend", help="random: put every case on this backend (default: drawn per case)")
    g.add_argument("--dtype", default="bfloat16", help="nsweep: dtype (default bfloat16)")
    g.add_argument("--mode", default="forward", help="nsweep: forward or forward_backward (default forward)")
    g.add_argument("--stop", type=int, default=32768, help="nsweep: largest n (default 32768)")
    g.set_defaults(func=_grid)
    rep = sub.add_parser("report", help="error tables and checks for a run's output CSV")
    rep.add_argument("csv", nargs="+", help="output CSV(s) of `python -m validation run` (several are pooled)")
    rep.add_argument("--md", help="write the Markdown report here instead of stdout")
    rep.add_argument("--worst", type=int, default=15, help="worst cases listed (default 15)")
    rep.add_argument("--recorded", action="store_true",
                     help="use the predictions the run recorded instead of re-predicting with the current estimator")
    rep.add_argument("--gpu", help="catalog GPU to predict for (default: from the data's device name)")
    rep.add_argument("--torch", help="torch version to predict for (default: the data's)")
    rep.set_defaults(func=_report)
    mo = sub.add_parser("model", help="--config PATH or --preset NAME with the plan's flags: one GPU, no torchrun "
                        "(python -m validation model --config X --help; validation/model/own_model.py); --family F "
                        "under torchrun: several processes (tp, cp, ZeRO-3), per-rank memory and time beside the "
                        "plan's per-GPU figures (validation/model/distributed.py)")
    from validation.model.distributed import add_arguments
    add_arguments(mo)
    mo.set_defaults(func=_model)
    c = sub.add_parser("calibrate", help="measure GEMMs, memory-bound kernels, launch floor, SDPA, optimizers "
                       "to a JSON file for `plan --calibration` (validation/timing/calibrate.py)")
    c.add_argument("--out", default="calibration_kernels.json", help="output JSON (default calibration_kernels.json)")
    c.add_argument("--quick", action="store_true", help="tiny shapes, for CPU tests")
    c.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when torch sees a GPU, else cpu")
    c.add_argument("--budget-s", type=float, default=90.0, help="seconds before sections are cut; 0 = none")
    c.set_defaults(func=_calibrate)
    sv = sub.add_parser("serve", help="transformers continuous batching serving a workload, per request beside "
                        "the serving simulation (validation/serving/)")
    from validation.serving.cli import add_arguments as serve_arguments
    serve_arguments(sv)
    sv.set_defaults(func=_serve)
    return p


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is: the sweep stops, its child is stopped, the finished rows stay."""


def _on_sigterm(signum, frame):
    raise Terminated


@contextlib.contextmanager
def _sigterm_as_interrupt():
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: leave SIGTERM alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["model"] and any(a in ("--config", "--preset") or a.startswith(("--config=", "--preset="))
                                     for a in argv[1:]):  # one GPU, no torchrun: validation/model/own_model.py
        from validation.model import own_model
        args = own_model.parser().parse_args(argv[1:])
        args.func = own_model.run_command
    else:
        args = parser().parse_args(argv)
    args.argv = argv
    try:
        quiet = filtered_stderr() if getattr(args, "command", None) == "run" else contextlib.nullcontext()
        with _sigterm_as_interrupt(), quiet:  # run: no Kineto profiler_start/stop lines
            return args.func(args)
    except ValueError as exc:
        print(f"error: {first_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        out = getattr(args, "out", None)
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(how + (f": the rows measured so far are in {out}; --resume continues" if out and args.command == "run"
                     else f": {out} holds the sections measured so far" if out else ""), file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except OSError as exc:
        where = exc.filename or getattr(args, "out", None) or getattr(args, "md", None) or args.command
        print(f"error: {where}: {exc.strerror or first_line(exc)}", file=sys.stderr)
        return 2
