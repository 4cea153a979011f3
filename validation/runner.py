"""Run a predict-style CSV through the measurement protocol, writing each row as soon as it is measured."""

from __future__ import annotations

import csv
import sys

from estimator.config import AttentionCall
from validation.protocol import environment, measure

CALL_FIELDS = ("backend", "dtype", "batch", "q_heads", "kv_heads", "head_dim", "q_len", "kv_len",
               "causal", "mask", "dropout", "mode")
MEASURED = ("status", "measured_peak_extra_bytes", "measured_time_ms", "ran_backend", "n_kernels",
            "torch_flops", "torch_version", "device_name", "error")


def call_from_row(row: dict) -> AttentionCall:
    return AttentionCall(**{k: row[k] for k in CALL_FIELDS if k in row and row[k] not in (None, "")})


def run_rows(rows: list[dict], out_path: str, device: str | None = None, repeats: int = 5) -> None:
    env = environment(device)
    fields = list(rows[0]) + [c for c in MEASURED if c not in rows[0]]
    with open(out_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for i, row in enumerate(rows):
            try:
                result = measure(call_from_row(row), device, repeats=repeats)
            except ValueError as exc:
                result = {"status": "error", "error": str(exc)}
            writer.writerow({**row, **result, "torch_version": env["torch_version"],
                             "device_name": env["device_name"]})
            fh.flush()
            print(f"[{i + 1}/{len(rows)}] {row.get('id', i)} {result['status']} "
                  f"{result.get('measured_peak_extra_bytes')}", file=sys.stderr, flush=True)
