"""Allocation traces of single calls (CUDA only): the sizes and order of every allocation and free
during the warm call, from `torch.cuda.memory._record_memory_history`. Used to read what each
backend allocates when a prediction disagrees with the measured peak."""

from __future__ import annotations

import json

import torch

from validation.protocol import make_inputs, run_call


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
    from validation.runner import call_from_row
    result = {}
    for row in rows:
        try:
            result[row["id"]] = {"row": row, "events": trace(call_from_row(row))}
        except Exception as exc:  # noqa: BLE001 - record and continue
            result[row["id"]] = {"row": row, "error": str(exc).splitlines()[0][:200]}
    with open(out_path, "w") as fh:
        json.dump(result, fh)
