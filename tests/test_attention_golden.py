"""Golden values for the attention estimator, each with its source.

1. Hand-derived allocations (the sequences in estimator/call/memory.py, summed by hand here).
2. docs/sdpa-internals.md Appendix A (H200, torch 2.11; MiB above inputs).
3. The committed H200 measurements (validation/data/*.csv, by contract §1): the acceptance bar of
   the acceptance bar, max(3%, 2 MiB) on at least 95% of calls that ran, held as a regression test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from estimator import AttentionCall, estimate_call, get_gpu
from estimator.call.table import predict_frame

MiB = 2**20
H200 = get_gpu("h200")
DATA = Path(__file__).resolve().parent.parent / "validation" / "data"


def peak(**kw) -> int:
    return estimate_call(AttentionCall(**kw), H200).peak_extra_bytes


REF = dict(batch=2, q_heads=16, kv_heads=16, head_dim=128, q_len=1024, kv_len=1024, dtype="bfloat16")


def test_math_fp32_forward_by_hand():
    # scaled q (Q4) + kᵀ·scale (K4, freed after QKᵀ) → scores P4, softmax P4, isneginf P bytes, row-all
    # B·H·L bytes; the peak is at softmax: Q4 + 2·P4 + P + B·H·L.
    B, H, L, D = 1, 4, 512, 64
    Q4, P = B * H * L * D * 4, B * H * L * L
    assert peak(batch=B, q_heads=H, kv_heads=H, head_dim=D, q_len=L, kv_len=L, dtype="float32",
                backend="math") == Q4 + 2 * P * 4 + P + B * H * L


@pytest.mark.parametrize("backend, mode, mib", [
    ("math", "forward", 352.03), ("math", "forward_backward", 568.00),
    ("flash", "forward", 8.13), ("flash", "forward_backward", 64.25),
    ("efficient", "forward", 8.00), ("efficient", "forward_backward", 56.25),
    ("cudnn", "forward", 8.00), ("cudnn", "forward_backward", 48.25),
])
def test_reference_appendix_a(backend, mode, mib):
    # sdpa-internals.md Appendix A, row "2,16,1024,128 bf16 none" (MiB, two decimals)
    assert peak(**REF, backend=backend, mode=mode) / MiB == pytest.approx(mib, abs=0.006)


def test_reference_long_sequence_math_training():
    # Appendix A: bf16 B2 H16 L4096 fwd+bwd on math is 8416.00 MiB; cuDNN 193.00; flash 257.00
    long = {**REF, "q_len": 4096, "kv_len": 4096, "mode": "forward_backward"}
    assert peak(**long, backend="math") / MiB == pytest.approx(8416.00, abs=0.006)
    assert peak(**long, backend="cudnn") / MiB == pytest.approx(193.00, abs=0.006)
    assert peak(**long, backend="flash") / MiB == pytest.approx(257.00, abs=0.006)


def test_causal_math_adds_dense_fp32_mask():
    # Appendix A: causal adds L·S·4 bytes on math (356.03 vs 352.03 MiB)
    assert peak(**REF, backend="math", causal=True) - peak(**REF, backend="math") == 1024 * 1024 * 4


def test_auto_picks_cudnn_on_hopper_and_flash_elsewhere():
    call = AttentionCall(**REF)
    assert estimate_call(call, H200).selected_backend == "cudnn"
    assert estimate_call(call, get_gpu("a100-80gb")).selected_backend == "flash"
    fp32 = AttentionCall(**{**REF, "dtype": "float32"})
    assert estimate_call(fp32, H200).selected_backend == "efficient"
    fp32_gqa = AttentionCall(**{**REF, "dtype": "float32", "kv_heads": 4})
    assert estimate_call(fp32_gqa, H200).selected_backend == "math"


def test_reasons_name_every_failing_check():
    est = estimate_call(AttentionCall(**{**REF, "dtype": "float32", "head_dim": 100, "mask": "bool"}), H200)
    flash = " ".join(est.reasons["flash"])
    assert "float32" in flash and "attn_mask" in flash
    assert any("multiple of 8" in r for r in est.reasons["cudnn"])
    assert est.reasons["math"] == ()
    t4 = estimate_call(AttentionCall(**REF), get_gpu("t4"))
    assert any("8.0+" in r for r in t4.reasons["flash"])


def test_flops_follow_pytorch_convention():
    # flop_counter.py: fused forward 4·BHLSD, fused backward 10·BHLSD, math 4 + 8 (bmm); causal not halved.
    bhlsd = 2 * 16 * 1024 * 1024 * 128
    assert estimate_call(AttentionCall(**REF, backend="flash"), H200).flops == 4 * bhlsd
    assert estimate_call(AttentionCall(**REF, backend="cudnn", mode="forward_backward"), H200).flops == 14 * bhlsd
    assert estimate_call(AttentionCall(**REF, backend="math", mode="forward_backward"), H200).flops == 12 * bhlsd
    causal = estimate_call(AttentionCall(**REF, backend="flash", causal=True), H200)
    assert causal.flops == 4 * bhlsd and causal.executed_flops < 0.6 * causal.flops


def test_textbook_quantities():
    est = estimate_call(AttentionCall(**REF), H200)
    assert est.scores_bytes == 2 * 16 * 1024 * 1024 * 2
    assert est.kv_bytes == 2 * 2 * 16 * 1024 * 128 * 2


@pytest.mark.parametrize("name", ["h200_calibration", "h200_heldout", "h200_heldout2", "h200_heldout3",
                                  "h200_heldout4", "h200_nsweep"])
def test_committed_h200_measurements_within_tolerance(name):
    d = pd.read_csv(DATA / f"{name}.csv", dtype=str, keep_default_na=False)
    inputs = d[[c for c in d.columns if not c.startswith("pred")]]
    p = predict_frame(inputs, "h200")
    ok = d.status == "ok"
    meas = pd.to_numeric(d.measured_peak_extra_bytes[ok])
    pred = pd.to_numeric(p.peak_extra_bytes[ok])
    within = (pred - meas).abs() <= np.maximum(0.03 * meas, 2 * MiB)
    assert within.mean() >= 0.98, d[ok][~within.to_numpy()].id.tolist()
    ran = d.status.isin(["ok", "oom"])
    assert ((p.fits == "true") == (d.status == "ok"))[ran].all()
    assert ((p.supported == "true") == (d.status != "unsupported")).all()
    auto = ok & (d.backend == "auto")
    assert (p.selected_backend[auto] == d.ran_backend[auto]).all()
    counted = ok & (d.torch_flops != "")
    assert (pd.to_numeric(p.flops[counted]) == pd.to_numeric(d.torch_flops[counted])).all()


@pytest.mark.parametrize("dtype, measured", [("bfloat16", 5_385_486_336), ("float32", 4_378_853_376)])
@pytest.mark.parametrize("inplace", [False, True])
def test_eager_masked_fill_in_place_measured(dtype, measured, inplace):
    # validation/data/h200_inplace_masked_fill.csv: B1 H32 L=S=4096 D128 causal, forward, both fills
    from estimator.advice.plan_rules import eager_forward_peak_bytes
    call = AttentionCall(batch=1, q_heads=32, kv_heads=32, head_dim=128, q_len=4096, kv_len=4096, dtype=dtype,
                         causal=True, backend="eager")
    assert eager_forward_peak_bytes(call, inplace_fill=inplace) == measured

