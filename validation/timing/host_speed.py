"""How fast this machine's host dispatches work: the figure behind every host-bound time (a decode step of Hugging
Face eager, a small encoder's prefill), recorded beside a measurement so that runs on two machines, or in two
processes, can be told apart.

    python -m validation.timing.host_speed --out OUT.csv [--label NAME]

One row: the CPU model (/proc/cpuinfo), the ns of a pure-Python loop iteration, the us per launch of a tiny
`add_` on the device in a loop (dispatch + launch, synchronized at the end), and the same through an
`nn.Linear` module call (Python module dispatch, as a model's layers pay it). Medians of 5 repeats.

Self-contained: torch and the standard library only (no estimator/ imports).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import statistics
import time

import torch

COLUMNS = ["label", "cpu_model", "cpu_count", "python_loop_ns", "launch_us", "module_call_us", "device_name",
           "torch_version", "utc"]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _median(fn, repeats: int = 5) -> float:
    return statistics.median(fn() for _ in range(repeats))


def python_loop_ns(n: int = 1_000_000) -> float:
    def run():
        t = time.perf_counter()
        x = 0
        for i in range(n):
            x += i
        return (time.perf_counter() - t) / n * 1e9
    return _median(run)


def launch_us(dev: str, n: int = 2000) -> float:
    x = torch.zeros(16, device=dev)

    def run():
        if dev == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            x.add_(1.0)
        if dev == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t) / n * 1e6
    return _median(run)


def module_call_us(dev: str, n: int = 1000) -> float:
    lin = torch.nn.Linear(16, 16, device=dev)
    x = torch.zeros(1, 16, device=dev)

    def run():
        with torch.no_grad():
            if dev == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                lin(x)
            if dev == "cuda":
                torch.cuda.synchronize()
        return (time.perf_counter() - t) / n * 1e6
    return _median(run)


def measure(label: str, dev: str) -> dict:
    launch_us(dev, 200)  # warm the context and the allocator
    return {"label": label, "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "python_loop_ns": round(python_loop_ns(), 2), "launch_us": round(launch_us(dev), 3),
            "module_call_us": round(module_call_us(dev), 3),
            "device_name": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
            "torch_version": torch.__version__, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validation.timing.host_speed", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="CSV to append one row to")
    ap.add_argument("--label", default="", help="a name for the row (e.g. before/after a run)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args(argv)
    row = measure(a.label, a.device)
    new = not os.path.exists(a.out)
    with open(a.out, "a", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
            w.writeheader()
        w.writerow(row)
    print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
