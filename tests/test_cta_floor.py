"""The masked cuDNN forward's per-CTA latency floor (estimator/call/cta_floor.py CUDNN_FWD_CTA_MS): many tiny attention
problems (Swin's 7x7 windows) cost ceil(CTAs / SMs) waves of it, not their FLOPs."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pandas as pd
import pytest

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


def test_the_key_walk_constants_are_the_probes():
    """estimator/call/cta_floor.py WALK_BLOCK_US and WALK_MASK_US_PER_64 are what `python -m validation.timing.key_walk`
    reduces the committed probe to."""
    from estimator.call import cta_floor
    from validation.timing.kernel_classes import load
    from validation.timing.key_walk import block_us, constants

    t = block_us(*load(ROOT / "validation/data/h200_eff_decode_probe.csv",
                       ROOT / "validation/cases/h200_eff_decode_probe.csv"))
    assert len(t) == 24
    assert constants(t) == (cta_floor.WALK_BLOCK_US, cta_floor.WALK_MASK_US_PER_64)


def _eff(**kw):
    base = dict(batch=1, q_heads=1, kv_heads=1, head_dim=256, q_len=4, kv_len=131072, dtype="float16",
                backend="efficient")
    return AttentionCall(**{**base, **kw})


def test_a_decode_shaped_efficient_forward_lasts_one_ctas_walk_over_its_keys():
    """One (batch, head) pair, 4 queries over 131,072 keys, head_dim 256: one CTA walks 1,024 key blocks of the
    32x128 kernel. Held-out set 10's random59-0086 ran 6.68 ms; the GPU-work terms alone priced it 2.03 ms."""
    from estimator.call import cta_floor

    e = estimate_call(_eff(), H200)
    a, b = cta_floor.WALK_BLOCK_US[(False, 2)]
    assert e.time_ms == pytest.approx(1024 * (a + b * 256) / 1e3 + CTA_FLOOR_EVENT_MS)
    assert abs(e.time_ms / 6.676 - 1) < 0.05
    # half the keys, half the walk; a mask adds its bias tile per block; more pairs (up to the SMs) cost no more
    assert estimate_call(_eff(kv_len=65536), H200).time_ms == pytest.approx(
        512 * (a + b * 256) / 1e3 + CTA_FLOOR_EVENT_MS)
    assert estimate_call(_eff(mask="bool"), H200).time_ms > e.time_ms
    assert estimate_call(_eff(batch=8, q_heads=8, kv_heads=8), H200).time_ms == pytest.approx(e.time_ms)
    # top-left causal: the last query tile walks only the first keys (one block here)
    from estimator.call.shapes import Calls

    causal = Calls.from_call(_eff(causal=True))
    assert cta_floor.efficient_walk_ms(causal, "efficient") == pytest.approx((a + b * 256) / 1e3)
    # a training call's backward is priced whole (the walk is a forward's)
    train = estimate_call(_eff(mode="forward_backward"), H200)
    assert train.time_ms > 0 and train.time_ms != pytest.approx(e.time_ms)


def test_held_out_decode_shaped_efficient_forwards_are_no_longer_priced_fast():
    """Sets 6-12's efficient forwards of fewer than 64 queries over 1,000x as many keys, >= 1 ms: their median error
    was -26.5% (one CTA's walk unpriced); with the walk it is within +-10% and the median |error| under 15%."""
    import numpy as np

    from tests.test_time_model import _call_errors

    errs = []
    for name, gpu in [(f"h200_heldout{i}.csv", "h200") for i in range(6, 12)] + [("h100_heldout12.csv", "h100-sxm")]:
        d, cols, err, measured = _call_errors(name, gpu=gpu)
        q, k = pd.to_numeric(d.q_len).to_numpy(), pd.to_numeric(d.kv_len).to_numpy()
        sel = ((measured >= 1.0) & (cols["selected_backend"] == "efficient") & (d["mode"] == "forward").to_numpy()
               & (q * 100 <= k))
        errs.extend(err[sel])
    assert len(errs) >= 12
    assert abs(np.median(errs)) <= 0.10
    assert np.median(np.abs(errs)) <= 0.15
