"""Run a predict-style CSV through the measurement protocol (docs/contract.md §1 and §5): `sweep` on one
device, `spread` over several local GPUs (one worker process per GPU).

Each row is measured, compared with the estimator's prediction and written (flushed) at once, so an
interrupted sweep keeps every finished row. Bookkeeping never sinks the batch: a malformed row, an
ineligible backend, an out-of-memory error or a time-out becomes that row's `status`, and the sweep
goes on. Each case runs through validation/call/runner.py (its options, limits, memory guard and watchdog).
Imports only torch, pandas and the estimator (the GPU machine has nothing else).
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import sys
import time

import torch

from estimator.call.config import AttentionCall
from estimator.files import atomic_output, strict_json, write_atomic, write_error
from estimator.textfile import MAX_TABLE_BYTES, read_bytes_limited
from estimator.units import MIB
from validation.call.protocol import environment, measure
from validation.call.rows import call_from_row, compare, predict_rows
from validation.call.runner import CRASH, CaseWorker, RunOptions, free_bytes, measure_row, skip_reason
from validation.call.schema import MEASURED, OUTPUT_FIELDS, STATUSES
from validation.errors import first_line

# Forced backends a CPU build lacks ("No viable backend"): `unsupported` without allocating anything.
CPU_ABSENT_BACKENDS = ("efficient", "cudnn")


class Progress:
    """A plain-text progress bar on stderr, one line per case (profiler chatter would break a \\r bar)."""

    def __init__(self, total: int, stream=None, width: int = 24):
        self.total, self.stream, self.width, self.start = total, stream or sys.stderr, width, time.monotonic()

    def update(self, done: int, label: str) -> None:
        frac = done / self.total if self.total else 1.0
        bar = "#" * int(frac * self.width)
        elapsed = time.monotonic() - self.start
        eta = elapsed / done * (self.total - done) if done else 0.0
        print(f"[{bar:<{self.width}}] {done}/{self.total} {frac:4.0%} eta {eta:5.0f}s  {label}",
              file=self.stream, flush=True)



def _earlier(out_path: str) -> tuple[list[str], list[dict]]:
    """The header and rows of an earlier output ([], [] when there is none)."""
    if not os.path.exists(out_path):
        return [], []
    text = read_bytes_limited(out_path, MAX_TABLE_BYTES, "--out").decode("utf-8", errors="replace")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    return list(reader.fieldnames or []), list(reader)


def is_crash(row: dict) -> bool:
    """A case whose measuring process died (not a CUDA out-of-memory error): measured again by --resume."""
    return row.get("status") == "error" and str(row.get("error", "")).startswith(CRASH)


def done_ids(out_path: str) -> set[str]:
    """ids already in an earlier (interrupted) output, for --resume; a crashed case is not done."""
    _header, rows = _earlier(out_path)
    return {row["id"] for row in rows if row.get("id") and row.get("status") and not is_crash(row)}


def refuse_overwrite(out_path: str, resume: bool, force: bool) -> None:
    """An earlier output with measured rows is never emptied without --force (--resume continues it)."""
    if resume or force or not os.path.isfile(out_path):
        return
    _header, rows = _earlier(out_path)
    measured = sum(1 for r in rows if r.get("status"))
    if measured:
        raise ValueError(f"--out {out_path}: already holds {measured} measured row(s); --resume continues that "
                         "run, --force replaces it")


def sweep(inputs: list[str], rows: list[dict], out_path: str, options: RunOptions, *, measure_fn=None,
          resume: bool = False, progress_stream=None) -> dict:
    """Measure every row and write it to out_path at once; return counts per status. Without a measure_fn,
    cases run in a watched child process (options.isolate) or in this one; a measure_fn (tests) runs here."""
    refuse_overwrite(out_path, resume, options.force)
    worker = CaseWorker(options.device) if measure_fn is None and options.isolate else None
    try:
        return _sweep(inputs, rows, out_path, options, measure_fn or measure, worker, resume, progress_stream)
    finally:
        if worker is not None:
            worker.stop()


def _sweep(inputs, rows, out_path, options, measure_fn, worker, resume, progress_stream) -> dict:
    env = environment(options.device)
    preds, note = predict_rows(rows, options.gpu, options.torch_version)
    stream = progress_stream or sys.stderr
    print(f"validation: measuring {len(rows)} cases on {env['device_name']} ({options.device}), torch "
          f"{env['torch_version']}; predictions for gpu {options.gpu}", file=stream, flush=True)
    if options.device == "cpu":
        print("validation: no GPU used: this is the CPU path (peaks from profiler memory events; predictions "
              f"are the {options.gpu} figures)", file=stream, flush=True)
    if note:
        print(f"validation: {note}", file=stream, flush=True)
    if resume and "id" not in inputs:
        raise ValueError("--resume: the input has no id column to match rows by")
    fields = inputs + list(OUTPUT_FIELDS)
    skip = set()
    if resume:
        header, earlier = _earlier(out_path)
        if earlier and header != fields:
            raise ValueError(f"--resume: {out_path} has other columns than this input would write")
        skip = done_ids(out_path)
        crashed = [r for r in earlier if is_crash(r)]
        if crashed:  # rewritten whole (a temporary file renamed) without them; they are measured again below
            with atomic_output(out_path, "--out", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(r for r in earlier if not is_crash(r))
            print(f"validation: --resume measures {len(crashed)} crashed case(s) again", file=stream, flush=True)
    append = bool(skip)
    counts = {s: 0 for s in STATUSES}
    progress = Progress(len(rows), stream)
    # The rows are a log: each is written and flushed as measured, so a killed run keeps every finished row.
    # A write that fails (a full disk) is cut back to the last whole row, and says how many rows are kept.
    try:
        fh = open(out_path, "a" if append else "w", newline="", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise write_error("--out", out_path, exc) from None
    kept = 0
    good = 0
    try:
        good = fh.tell()
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        if not append:
            writer.writeheader()
            fh.flush()
            good = fh.tell()
        for i, (row, pred) in enumerate(zip(rows, preds, strict=True)):
            label = row.get("id") or str(i)
            if label in skip:
                progress.update(i + 1, f"{label} already measured")
                continue
            try:
                call = call_from_row(row)
            except ValueError as exc:
                result = {"status": "error", "error": first_line(exc, 200)}
            else:
                result = _run_case(call, pred, options, measure_fn, worker)
            result = {**{c: "" for c in MEASURED}, **{k: ("" if v is None else v) for k, v in result.items()},
                      "torch_version": env["torch_version"], "device_name": env["device_name"]}
            writer.writerow({**{k: row.get(k, "") for k in inputs}, **result, **pred, **compare(result, pred)})
            fh.flush()
            good = fh.tell()
            kept += 1
            counts[result["status"]] = counts.get(result["status"], 0) + 1
            peak = result.get("measured_peak_extra_bytes")
            progress.update(i + 1, f"{label} {result['status']}"
                            + (f" peak {int(peak) / MIB:.2f} MiB" if peak not in ("", None) else "")
                            + (f" ({result['error'][:80]})" if result.get("error") else ""))
    except BaseException as exc:  # a full disk, Ctrl-C or SIGTERM: every finished row stays, a row cut short not
        with contextlib.suppress(OSError):
            fh.close()  # what is buffered may land (or not): cut back to the last whole row below
        if os.path.isfile(out_path):
            with contextlib.suppress(OSError):
                os.truncate(out_path, good)
        if isinstance(exc, OSError):
            error = write_error("--out", out_path, exc)
            raise ValueError(f"{error}; the {kept} row(s) measured before it are kept, --resume continues") from None
        raise
    try:
        fh.close()
    except OSError as exc:
        raise write_error("--out", out_path, exc) from None
    return counts


def _run_case(call: AttentionCall, pred: dict, options: RunOptions, measure_fn, worker: CaseWorker | None) -> dict:
    if options.device == "cpu" and call.backend in CPU_ABSENT_BACKENDS:
        return {"status": "unsupported", "error": "No available kernel (backend absent on a CPU; not run)"}
    free = worker.free_bytes() if worker is not None else free_bytes(options.device)
    reason = skip_reason(call, pred, options, free)
    if reason:
        return {"status": "skipped", "error": reason}
    if worker is not None:
        return worker.measure(call, options)
    return measure_row(call, options, measure_fn)


def write_meta(out_path: str, options: RunOptions, argv: list[str], counts: dict, started: str, note: str = "") -> str:
    """Provenance beside the CSV: torch version, device, driver and the exact command."""
    meta = {**environment(options.device), "gpu_catalog_name": options.gpu, "command": " ".join(argv),
            "started_utc": started, "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "repeats": options.repeats, "timeout_s": options.timeout_s, "force": options.force,
            "cuda": torch.version.cuda or "", "threads": torch.get_num_threads(), "counts": counts}
    if note:
        meta["note"] = note
    path = f"{out_path}.meta.json"
    write_atomic(path, strict_json(meta, "--out (meta)", indent=1), "--out (meta)")
    return path


# --------------------------------------------------------------------------------------------
# Several local GPUs: one worker process per GPU


def spread(inputs: list[str], rows: list[dict], out_path: str, options: RunOptions, workers: int,
           progress_stream=None) -> dict:
    """`run --gpus N`: rows i, i+N, i+2N, ... go to worker i, a `python -m validation run` child with
    CUDA_VISIBLE_DEVICES=i (NCCL multicast off, as validation/model/sharding.py); the workers' outputs are merged
    into out_path in input order, with the header one worker writes. Returns counts per status."""
    import subprocess
    import tempfile

    stream = progress_stream or sys.stderr
    refuse_overwrite(out_path, False, options.force)
    tmp = tempfile.mkdtemp(prefix="validation-gpus-", dir=os.path.dirname(os.path.abspath(out_path)) or None)
    procs, outs = [], []
    for i in range(workers):
        shard = rows[i::workers]
        if not shard:
            continue
        inp, out = os.path.join(tmp, f"in{i}.csv"), os.path.join(tmp, f"out{i}.csv")
        with open(inp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=inputs, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(shard)
        cmd = [sys.executable, "-m", "validation", "run", "--in", inp, "--out", out, "--device", options.device,
               "--gpu", options.gpu, "--repeats", str(options.repeats), "--timeout-s", f"{options.timeout_s:g}"]
        cmd += ["--force"] if options.force else []
        cmd += ["--torch", options.torch_version] if options.torch_version else []
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(i), "NCCL_NVLS_ENABLE": "0",
               "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
        log = open(os.path.join(tmp, f"log{i}.txt"), "w")
        procs.append((i, subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
        outs.append((i, out))
        print(f"validation: worker {i} (CUDA_VISIBLE_DEVICES={i}): {len(shard)} cases", file=stream, flush=True)
    failed = []
    try:
        for i, proc, log in procs:
            if proc.wait() != 0:
                failed.append(i)
            log.close()
    except BaseException:  # Ctrl-C or SIGTERM: the workers stop too; their rows stay in their outputs
        for _i, proc, _log in procs:
            if proc.poll() is None:
                proc.terminate()
        for _i, proc, log in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(60)
            log.close()
        print(f"validation: the workers' rows so far are in {tmp}", file=stream, flush=True)
        raise
    parts = {}
    header = None
    for i, out in outs:
        if not os.path.exists(out):
            continue
        with open(out, newline="") as fh:
            reader = csv.DictReader(fh)
            header = header or reader.fieldnames
            parts[i] = list(reader)
    if failed or header is None:
        raise ValueError(f"--gpus: worker(s) {', '.join(map(str, failed)) or 'all'} failed; their logs and "
                         f"partial outputs are in {tmp}")
    counts = {s: 0 for s in STATUSES}
    with atomic_output(out_path, "--out", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        for k in range(len(rows)):
            part = parts.get(k % workers, [])
            row = part[k // workers] if k // workers < len(part) else None
            if row is None:
                raise ValueError(f"--gpus: worker {k % workers} wrote fewer rows than it was given (see {tmp})")
            writer.writerow(row)
            counts[row["status"]] = counts.get(row["status"], 0) + 1
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return counts

