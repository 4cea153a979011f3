"""Allocation traces of single calls (CUDA only): the sizes and order of every allocation and free
during the warm call, from `torch.cuda.memory._record_memory_history`. Used to read what each
backend allocates when a prediction disagrees with the measured peak."""

from __future__ import annotations

import json

import torch

from estimator.files import write_atomic
from validation.call.protocol import make_inputs, run_call
from validation.errors import first_line


def trace(call) -> list[tuple[str, int]]:
    inp = make_inputs(call, "cuda")
    run_call(call, inp)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=200000)
    run_call(call, inp)
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events = []
    for ev in snap["device_traces"][0]:
        if ev["action"] in ("alloc", "free_completed"):
            events.append(("+" if ev["action"] == "alloc" else "-", int(ev["size"])))
    del inp
    torch.cuda.empty_cache()
    return events


def trace_rows(rows, out_path) -> None:
    from validation.call.rows import call_from_row
    result = {}
    for row in rows:
        try:
            result[row["id"]] = {"row": row, "events": trace(call_from_row(row))}
        except Exception as exc:  # noqa: BLE001 - record and continue
            result[row["id"]] = {"row": row, "error": first_line(exc, 200)}
    write_atomic(out_path, json.dumps(result), "out")


def trace_with_addresses(call, out_path) -> None:
    """Every allocator event (action, address, size) from the inputs through warm-up and measured call, for a
    call near the memory limit: shows where the caching allocator placed each block (segment reuse)."""
    from validation.call.protocol import cuda_peak_extra_bytes
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=500000)
    status = "ok"
    try:
        inp = make_inputs(call, "cuda")
        run_call(call, inp)
        cuda_peak_extra_bytes(call, inp)
        del inp
    except torch.cuda.OutOfMemoryError:
        status = "oom"
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events = [(ev["action"], int(ev.get("addr", 0)), int(ev["size"])) for ev in snap["device_traces"][0]]
    write_atomic(out_path, json.dumps({"status": status, "events": events}), "out")
    torch.cuda.empty_cache()
