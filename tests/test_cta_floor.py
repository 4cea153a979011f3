"""The masked cuDNN forward's per-CTA latency floor (estimator/call/cta_floor.py CUDNN_FWD_CTA_MS): many tiny attention
problems (Swin's 7x7 windows) cost ceil(CTAs / SMs) waves of it, not their FLOPs."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from estimator.call.attention import estimate_call
from estimator.call.config import AttentionCall
from estimator.call.cta_floor import CTA_FLOOR_EVENT_MS, CUDNN_FWD_CTA_MS
from estimator.hardware import get_gpu

H200 = get_gpu("h200")
ROOT = Path(__file__).resolve().parents[1]


def _window_call(batch, heads, mask="float", mode="forward"):
    return AttentionCall(batch=batch, q_heads=heads, kv_heads=heads, head_dim=32, q_len=49, kv_len=49, mask=mask,
                         dtype="bfloat16", mode=mode)


def test_a_masked_window_call_costs_its_waves_of_cta_latency():
    e = estimate_call(_window_call(6400, 4), H200)
    assert e.selected_backend == "cudnn"
    waves = math.ceil(6400 * 4 / H200.sm_count)
    assert e.time_ms == waves * CUDNN_FWD_CTA_MS + CTA_FLOOR_EVENT_MS
    # twice the windows, twice the waves
    e2 = estimate_call(_window_call(12800, 4), H200)
    assert e2.time_ms / e.time_ms == (math.ceil(12800 * 4 / H200.sm_count) * CUDNN_FWD_CTA_MS + CTA_FLOOR_EVENT_MS) \
        / e.time_ms


def test_the_floor_is_the_masked_forwards_only():
    unmasked = estimate_call(_window_call(6400, 4, mask="none"), H200)
    floor = math.ceil(6400 * 4 / H200.sm_count) * CUDNN_FWD_CTA_MS
    assert unmasked.selected_backend == "cudnn" and unmasked.time_ms < floor
    # a long call's compute is far above its waves of latency: the floor does not bind there
    long = AttentionCall(batch=1, q_heads=32, kv_heads=8, head_dim=128, q_len=16384, kv_len=16384, mask="float",
                         dtype="bfloat16")
    e = estimate_call(long, H200)
    assert e.selected_backend == "cudnn"
    assert e.time_ms > 10 * (math.ceil(32 * 256 / H200.sm_count) * CUDNN_FWD_CTA_MS)


def test_the_held_out_masked_window_calls_are_within_30_percent():
    rows = [r for r in csv.DictReader(open(ROOT / "validation/data/h200_window_calls_heldout.csv", encoding="utf-8"))
            if r["mask"] == "float" and int(r["q_len"]) == 49]
    assert len(rows) == 6
    for r in rows:
        call = AttentionCall(batch=int(r["batch"]), q_heads=int(r["q_heads"]), kv_heads=int(r["kv_heads"]),
                             head_dim=int(r["head_dim"]), q_len=49, kv_len=49, mask="float", dtype="bfloat16",
                             backend=r["backend"])
        err = estimate_call(call, H200).time_ms / float(r["measured_time_ms"]) - 1
        assert -0.30 <= err <= 0.0, (r["id"], err)
