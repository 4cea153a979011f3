"""The kernel-class time model (estimator/model/decode_time.py), calibration files, communication and the H200 data."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from estimator.hardware import get_gpu
from estimator.model.calibration import DEFAULT_FILE, load_constants
from estimator.model.comm import communication, link
from estimator.model.inputs import PlanInputs
from estimator.model.layer_attention import attention_layers
from estimator.model.plan import make_plan
from estimator.model.presets import get_preset

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "validation" / "data"


def _plan(**kw):
    base = dict(model=get_preset("llama-3-8b"), seq_len=4096, batch=1, gpu="h200")
    return make_plan(PlanInputs(**{**base, **kw}), solve=False)


def test_shipped_constants_are_the_committed_h200_file():
    assert DEFAULT_FILE.read_bytes() == (DATA / "h200_calibration_kernels.json").read_bytes()
    k = load_constants()
    assert k.device_name == "NVIDIA H200" and k.ref_gpu == "h200"
    assert 0.5 < k.stream_eff < 0.9 and 0.005 < k.launch_floor_ms < 0.02


def test_plan_json_has_split_communication_and_error_band():
    d = _plan().to_dict()
    assert set(d["time_split"]) == {"prefill", "decode"}
    assert d["communication_time_ms"] == 0.0
    assert d["time_model"]["measured_on"] == "NVIDIA H200" and "prefill" in d["time_model"]["error_band"]
    split = d["time_split"]["prefill"]
    assert {"gemm", "attention", "memory_bound"} <= set(split)
    t = _plan(mode="training").to_dict()
    assert {"forward", "backward", "optimizer", "communication"} <= set(t["time_split"])


def test_calibration_file_reproduces_default(tmp_path):
    path = tmp_path / "cal.json"
    path.write_bytes((DATA / "h200_calibration_kernels.json").read_bytes())
    a, b = _plan(), _plan(calibration=str(path))
    assert a.prefill_time_ms == pytest.approx(b.prefill_time_ms)
    assert a.decode_time_ms_per_token == pytest.approx(b.decode_time_ms_per_token)


def test_bad_calibration_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"device_name": "cpu"}))
    with pytest.raises(ValueError, match="not a catalog GPU") as exc:
        _plan(calibration=str(bad))
    assert "\n" not in str(exc.value)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (5 << 20))
    with pytest.raises(ValueError, match="larger than"):
        _plan(calibration=str(big))


def test_overrides_and_scaling():
    assert _plan(gemm_efficiency=0.35).prefill_time_ms > _plan().prefill_time_ms
    with pytest.raises(ValueError, match="gemm_efficiency"):
        _plan(gemm_efficiency=1.5)
    # a slower-bandwidth GPU decodes slower; a GPU with 1/3 the peak prefills slower
    assert _plan(gpu="a100-80gb", seq_len=16384).prefill_time_ms > 1.5 * _plan(seq_len=16384).prefill_time_ms


def test_communication_links_and_overlap():
    h200 = get_gpu("h200")
    assert link(h200, 8, 1, 8)[0] == "nvlink" and link(h200, 16, 1, 8)[0] == "network"
    assert link(get_gpu("rtx-4090"), 4, 1, 8)[0] == "pcie"
    one = _plan(mode="training")
    tp8 = _plan(mode="training", tp=8)
    tp16 = _plan(mode="training", tp=16, model=dataclasses.replace(get_preset("llama-3-8b"), kv_heads=16))
    assert one.communication_time_ms == 0 and tp8.communication_time_ms > 0
    assert tp16.communication["links"]["tp"] == "network"
    inputs = PlanInputs(model=get_preset("llama-3-8b"), seq_len=4096, mode="training", gpu="h200", gpus=16, tp=8)
    out = communication(inputs, h200, 10**9, {"backward_ms": 1e6})
    assert out["dp_ms"] > 0  # at least the last bucket is exposed however long the backward
    with pytest.raises(ValueError, match="gpus_per_node"):
        _plan(gpus_per_node=0)


def _report(paths):
    from validation.model.model_report import compare

    df = pd.concat([pd.read_csv(p, dtype=str, keep_default_na=False).assign(_source=str(p)) for p in paths],
                   ignore_index=True)
    return compare(df)


def test_h200_step_time_within_15_percent_on_the_fit_set():
    result = _report([DATA / "h200_hf_recipes.csv"])
    err = result["step_err"].dropna().abs()
    assert len(err) > 90 and (err <= 0.15).mean() >= 0.8


def test_h200_held_out_times():
    """validation/data/h200_hf_time.csv was not used to set any constant."""
    result = _report([DATA / "h200_hf_time.csv"])
    assert result["step_err"].dropna().abs().median() <= 0.15
    assert result["prefill_err"].dropna().abs().median() <= 0.2


def test_h200_whole_model_times_on_the_last_held_out_set():
    """validation/data/h200_hf_heldout_c.csv was measured after the MoE pricing and the call-time op chains were
    committed (10 families, prefill, decode and training): prefill and step meet the 15% target on >= 80% of its
    rows."""
    result = _report([DATA / "h200_hf_heldout_c.csv"])
    for col in ("prefill_err", "step_err"):
        err = result[col].dropna().abs()
        assert len(err) >= 10 and (err <= 0.15).mean() >= 0.8, col


def test_h200_decode_on_the_held_out_decode_set():
    """validation/data/h200_hf_decode_heldout_p1.csv and _p2.csv: 12 configs measured twice, in two processes, after the
    host-bound decode model was committed. The headline (decode as generate runs it, a cuDNN graph per new length)
    against the measured first pass: median |error| 9.4%, 24/24 within 30%, 17/24 within 15% (the gemma-3 and
    mixtral rows ran on graphs an earlier case of their process had built: compared with the steady step). The two
    processes themselves differ by up to 1.75x on one config, which is why the decode error band is wide. Their
    prefills: 24/24."""
    from estimator.model.step_time import TIME_ERROR_BAND

    result = _report([DATA / "h200_hf_decode_heldout_p1.csv", DATA / "h200_hf_decode_heldout_p2.csv"])
    err = result["decode_err"].dropna()
    assert len(err) == 24 and err.abs().median() <= 0.12 and (err.abs() <= 0.3).mean() >= 0.95
    assert (err.abs() <= 0.15).mean() >= 0.65
    assert result["prebuilt_decode"].sum() == 4  # gemma-3 after gemma-2, mixtral after llama, in both processes
    assert (result["prefill_err"].dropna().abs() <= 0.15).all()
    ratio = 1 / (1 + err) - 1  # measured / planned - 1
    lo, hi = TIME_ERROR_BAND["decode"]
    assert ((ratio >= lo) & (ratio <= hi)).mean() >= 0.8


def test_h200_call_time_on_the_last_held_out_set():
    """validation/data/h200_heldout6.csv (seed 23) was measured before the long-call terms and never fitted on:
    median |error| on the SDPA and eager calls of 1 ms or more 10.5% (92 calls; 9.9% with the factors before the
    long-call set joined the fit: the refit trades this set's short cuDNN calls for the long ones). Its flex rows
    with dropout ran without it (a runner bug since fixed) and are left out."""
    from estimator.call.attention import estimate_columns
    from estimator.call.table import calls_from_frame

    d = pd.read_csv(DATA / "h200_heldout6.csv", dtype=str, keep_default_na=False)
    d = d[(d.status == "ok") & ~((d.backend == "flex") & (pd.to_numeric(d.dropout) > 0))].reset_index(drop=True)
    c, backend, _ = calls_from_frame(d)
    cols = estimate_columns(c, backend, get_gpu("h200"))
    measured = pd.to_numeric(d.measured_time_ms).to_numpy()
    big = (measured >= 1.0) & (cols["selected_backend"] != "flex")
    err = abs(cols["time_ms"][big] / measured[big] - 1)
    assert big.sum() >= 90 and float(pd.Series(err).median()) <= 0.11


def _call_errors(name, gpu="h200"):
    from estimator.call.attention import estimate_columns
    from estimator.call.table import calls_from_frame

    d = pd.read_csv(DATA / name, dtype=str, keep_default_na=False)
    d = d[(d.status == "ok") & ~((d.backend == "flex") & (pd.to_numeric(d.dropout) > 0))].reset_index(drop=True)
    c, backend, _ = calls_from_frame(d)
    cols = estimate_columns(c, backend, get_gpu(gpu))
    measured = pd.to_numeric(d.measured_time_ms).to_numpy()
    return d, cols, cols["time_ms"] / measured - 1, measured


def test_masked_calls_at_wide_head_dims_are_priced_at_their_own_slowdown():
    """estimator/call/timing.py MASKED_WIDE_SLOWDOWN: the masked 16-bit cuDNN/efficient calls >= 1 ms with
    head_dim > 128 of the fit sets ran a median 34% longer than the masked rate alone prices; with the forward's
    slowdown the 11 forwards' median |error| is 16% (38% without it), and they are no longer all on the fast side."""
    import numpy as np

    errs = []
    for name in ("h200_calibration.csv", "h200_heldout.csv", "h200_heldout2.csv", "h200_heldout3.csv",
                 "h200_heldout4.csv", "h200_heldout5.csv", "h200_long_calls.csv"):
        d, cols, err, measured = _call_errors(name)
        sel = ((measured >= 1.0) & np.isin(cols["selected_backend"], ("cudnn", "efficient"))
               & (d["mask"] != "none").to_numpy() & (pd.to_numeric(d.head_dim) > 128).to_numpy()
               & (d.dtype != "float32").to_numpy() & (d["mode"] == "forward").to_numpy())
        errs.extend(err[sel])
    errs = np.asarray(errs)
    assert len(errs) >= 10
    assert np.median(np.abs(errs)) <= 0.2 and (errs > 0).sum() >= 1


def test_h200_long_call_held_out_set():
    """validation/data/h200_long_calls_heldout.csv: 10 calls of 24k-98k tokens per backend, written before they
    were measured and measured after the long-call model was final (never fitted on): median |error| 6.1% on the
    9 calls of 1 ms or more."""
    import numpy as np

    _, _, err, measured = _call_errors("h200_long_calls_heldout.csv")
    big = measured >= 1.0
    # 7.9% before the softmax pipeline, 5.6% after it, 6.1% since flash's standard kernel pays its waves
    assert big.sum() == 9 and float(np.median(np.abs(err[big]))) <= 0.065


def test_h200_call_time_on_held_out_set_7():
    """validation/data/h200_heldout7.csv (seed 31, committed before it was measured, after the cuDNN softmax change,
    on a slow host): median |error| 10.1% on its SDPA and eager calls >= 1 ms (11.6% before the op chains' GEMM roles,
    13.0% before flash's kernel choice and the efficient forward's widths and the op chains' kernel families,
    tests/test_call_kernel_geometry.py); the 8% target is not met there."""
    import numpy as np

    _, cols, err, measured = _call_errors("h200_heldout7.csv")
    big = (measured >= 1.0) & (cols["selected_backend"] != "flex")
    assert big.sum() >= 60 and float(np.median(np.abs(err[big]))) <= 0.11


def test_h200_call_time_on_held_out_set_9():
    """validation/data/h200_heldout9.csv (400 random calls, seed 53, committed before it was measured, after the op
    chains' GEMM roles and gemmSN walk): median |error| 8.2% on its 125 SDPA and eager calls >= 1 ms (9.55% with the
    model before that change); 60 within 8%."""
    import numpy as np

    _, cols, err, measured = _call_errors("h200_heldout9.csv")
    big = (measured >= 1.0) & (cols["selected_backend"] != "flex")
    assert big.sum() >= 120 and float(np.median(np.abs(err[big]))) <= 0.085 and (np.abs(err[big]) <= 0.08).sum() >= 55


def test_h200_call_time_on_held_out_set_10():
    """validation/data/h200_heldout10.csv (400 random calls, seed 59, committed before it was measured, after flex's
    kernels were priced by their own configs): median |error| 8.56% on all its 128 calls >= 1 ms, flex included
    (10.25% with flex priced from flash's factors, the model before), 56 within 8%; 8.53% on its 116 SDPA and eager
    calls. The 8% target is not met."""
    import numpy as np

    _, cols, err, measured = _call_errors("h200_heldout10.csv")
    big = measured >= 1.0
    assert big.sum() >= 120 and float(np.median(np.abs(err[big]))) <= 0.087 and (np.abs(err[big]) <= 0.08).sum() >= 54


def test_h200_call_time_on_held_out_set_11():
    """validation/data/h200_heldout11.csv (400 random calls, seed 67, committed before it was measured, after the
    efficient backward's dQ chain per kernel): median |error| 11.5% on its 133 calls >= 1 ms, flex included (12.0%
    with the model before that change), 10.5% on its 117 SDPA and eager calls (11.4% before). A harder set than 9
    and 10 (8.1-8.6%): its efficient and cuDNN forwards >= 1 ms ran 13-29% longer than priced. The 8% target is
    not met."""
    import numpy as np

    _, cols, err, measured = _call_errors("h200_heldout11.csv")
    big = measured >= 1.0
    assert big.sum() >= 130 and float(np.median(np.abs(err[big]))) <= 0.116


def test_decode_shaped_efficient_backwards_follow_their_kernels_dq_chain():
    """dq_chain.dq_chain_steps: the efficient backwards >= 1 ms of 1-64 queries in held-out sets 6-10 (11 calls, never
    fitted; validation/data/h200_eff_decode_probe.csv set the per-kernel weights) have a median |error| of 33%
    (61% with every kernel at 64 keys a CTA and one step cost)."""
    import numpy as np

    errs = []
    for n in (6, 7, 8, 9, 10):
        d, cols, err, measured = _call_errors(f"h200_heldout{n}.csv")
        sel = ((measured >= 1.0) & (cols["selected_backend"] == "efficient")
               & (d["mode"] == "forward_backward").to_numpy() & (pd.to_numeric(d.q_len) <= 64).to_numpy())
        errs.extend(err[sel])
    assert len(errs) == 11 and float(np.median(np.abs(errs))) <= 0.34


def test_cudnn_forward_softmax_is_a_pipeline_beside_the_mmas():
    """timing.OVERLAPPED_SOFTMAX: a prefill-shaped cuDNN forward takes the slower of its MMAs and its softmax. At
    head_dim 64 the softmax bounds it: ViT-L's 12,545-token call measured alone (validation/data/
    h200_vit_call_probe.csv) ran 1.54-1.68 ms where the summed fit, which priced the exp as free, said 1.06 (-31% to
    -39% on its four cuDNN forwards); at head_dim 128 the MMAs bound it, so doubling head_dim costs less than 2x."""
    import numpy as np

    from estimator.call import timing

    d, cols, err, measured = _call_errors("h200_vit_call_probe.csv")
    fwd = ((cols["selected_backend"] == "cudnn") & (d["mode"] == "forward")).to_numpy()
    assert fwd.sum() == 4 and np.all(np.abs(err[fwd]) <= 0.25) and np.median(np.abs(err[fwd])) <= 0.2
    assert timing.FIT_FACTORS[("cudnn", False)][timing.EXP_TERM] < 1  # the softmax branch's fitted rate

    from estimator.call.attention import estimate_columns
    from estimator.call.table import calls_from_frame

    rows = pd.DataFrame([dict(id=str(dh), backend="cudnn", dtype="bfloat16", batch="1", q_heads="16", kv_heads="16",
                              head_dim=str(dh), q_len="12545", kv_len="12545", causal="0", mask="none", dropout="0",
                              mode="forward") for dh in (64, 128)])
    c, backend, _ = calls_from_frame(rows)
    t64, t128 = estimate_columns(c, backend, get_gpu("h200"))["time_ms"]
    group, branch = timing.overlapped_softmax(c, np.asarray(["cudnn", "cudnn"]))
    assert group.all() and branch.all()
    assert t64 < t128 < 2 * t64


# --- one attention call's time (estimator/call/timing.py) and decode's cuDNN graph builds ------------------------

CALL_SETS = ("calibration", "heldout", "heldout2", "heldout3", "heldout4", "heldout5", "long_calls")  # the fit


def test_fit_time_reproduces_the_committed_factors():
    from estimator.call import timing
    from validation.timing.fit_time import factors_source, fit

    frames = [pd.read_csv(DATA / f"h200_{name}.csv", dtype=str, keep_default_na=False) for name in CALL_SETS]
    src = factors_source(fit(frames))
    assert src in (ROOT / "estimator" / "call" / "timing.py").read_text()
    assert ("flex", False) not in timing.FIT_FACTORS  # flex: estimator/call/flex_time.py


def _call_time(**kw):
    from estimator import estimate_call
    from estimator.call.config import AttentionCall

    base = dict(batch=1, q_heads=16, kv_heads=16, head_dim=128, q_len=4096, kv_len=4096, dtype="bfloat16",
                causal=False, mask="none", mode="forward", backend="cudnn")
    return estimate_call(AttentionCall(**{**base, **kw}), get_gpu("h200")).time_ms


def test_few_ctas_run_the_whole_key_loop_on_few_sms():
    # cuDNN's forward does not split the keys: B·H·ceil(L/128) = 64 CTAs keep 64 of 132 SMs busy over a whole
    # 128-row tile each (measured on the H200: B4 H16/2 L3 S131072 D80 1.58 ms; the counted-FLOP model said 0.18)
    assert _call_time(batch=4, q_heads=16, kv_heads=2, head_dim=80, q_len=3, kv_len=131072) > 0.8
    # more query heads fill more SMs at the same time per CTA
    t8 = _call_time(batch=1, q_heads=8, kv_heads=8, q_len=2, kv_len=131072)
    t64 = _call_time(batch=1, q_heads=64, kv_heads=8, q_len=2, kv_len=131072)
    assert t64 < 2 * t8


def test_masked_cudnn_is_priced_slower_than_unmasked():
    # measured: B1 H8/4 D192 L=S=32768 with a bool mask (and dropout 0.1) 55.5 ms, a few times its unmasked cost
    shape = dict(q_heads=8, kv_heads=4, head_dim=192, q_len=32768, kv_len=32768)
    assert _call_time(mask="bool", **shape) > 2.5 * _call_time(**shape)


def test_a_mask_never_makes_a_fused_call_cheaper():
    """The efficient kernel runs its unmasked kernel plus a bias tile per score tile (timing.time_terms); priced at
    the masked rate alone, its masked 16-bit backwards at head_dim 192-256 had come out below the same call without
    a mask and 4-5x below the measurement (held-out set 6, random23-0065: 285 ms measured, 55 ms priced)."""
    import itertools

    priced = 0
    for backend, d, q_len, dtype, mode in itertools.product(
            ("efficient", "cudnn"), (64, 128, 192, 256), (4, 4096), ("bfloat16", "float32"),
            ("forward", "forward_backward")):
        shape = dict(backend=backend, head_dim=d, q_len=q_len, kv_len=8192, dtype=dtype, mode=mode)
        plain = _call_time(**shape)
        if plain is None:  # cuDNN runs no fp32 call
            continue
        for mask in ("bool", "float"):
            assert _call_time(mask=mask, **shape) >= plain
            priced += 1
    assert priced == 96
    wide = dict(backend="efficient", q_heads=4, kv_heads=4, head_dim=256, q_len=32768, kv_len=32768,
                mode="forward_backward")
    assert abs(_call_time(mask="float", **wide) / 285.0 - 1) < 0.2  # random23-0065: 336 ms priced now, 55 before


def _call_frames():
    return {name: pd.read_csv(DATA / f"h200_{name}.csv", dtype=str, keep_default_na=False) for name in CALL_SETS}


def _relative_errors(frame):
    from estimator.call.attention import estimate_columns
    from estimator.call.table import calls_from_frame

    d = frame[(frame.status == "ok") & (pd.to_numeric(frame.measured_time_ms, errors="coerce") >= 1.0)]
    d = d.reset_index(drop=True)
    c, backend, _ = calls_from_frame(d)
    meas = pd.to_numeric(d.measured_time_ms).to_numpy()
    return abs(estimate_columns(c, backend, get_gpu("h200"))["time_ms"] - meas) / meas


def test_call_time_cross_validated_error_on_calls_over_1ms():
    """Leave one set out: fit FIT_FACTORS on five measured sets, predict the sixth's calls >= 1 ms, for each of
    heldout2..5 (the sets measured after the model's structure was first fitted)."""
    import numpy as np

    from estimator.call import timing
    from validation.timing.fit_time import factor_tuples, fit

    frames = _call_frames()
    saved = dict(timing.FIT_FACTORS)
    errors = []
    try:
        for held in CALL_SETS[2:]:
            timing.FIT_FACTORS.update(factor_tuples(fit([f for name, f in frames.items() if name != held])))
            errors.append(_relative_errors(frames[held]))
            timing.FIT_FACTORS.clear()
            timing.FIT_FACTORS.update(saved)
    finally:
        timing.FIT_FACTORS.clear()
        timing.FIT_FACTORS.update(saved)
    err = np.concatenate(errors)
    # 10.0%, 62% within 15% (was 17%, 46% before the op chains, host dispatch and dQ locks: see git log)
    assert len(err) > 350 and np.median(err) < 0.105 and (err <= 0.15).mean() >= 0.6
    assert max(float(np.median(e)) for e in errors) < 0.115  # per held-out set: 11.0%, 10.6%, 9.0%, 10.7%


def test_call_time_error_of_the_committed_factors_on_calls_over_1ms():
    err = pd.concat([pd.Series(_relative_errors(f)) for f in _call_frames().values()])
    assert len(err) > 800 and err.median() < 0.1  # 9.5% on the six sets the factors are fitted to


def test_op_chain_kernel_count_matches_the_profiler():
    """math's and eager's op chain launches the kernels the profiler counted (column n_kernels) on most measured
    rows, and never more: the rest launch extra copies for tensors beyond 32-bit indexing or extra cuBLAS
    kernels, on large calls where the host's dispatch does not bound the time."""
    from estimator.call.op_chain import kernel_count
    from estimator.call.table import calls_from_frame

    d = pd.concat(_call_frames().values(), ignore_index=True)
    d = d[(d.status == "ok") & d.ran_backend.isin(["math", "eager"])].reset_index(drop=True)
    c, _, _ = calls_from_frame(d)
    predicted = kernel_count(c, d.ran_backend.to_numpy())
    measured = pd.to_numeric(d.n_kernels).to_numpy()
    assert len(d) > 700 and (predicted == measured).mean() >= 0.85 and (predicted <= measured).all()  # 85.5%, all
    small = (c.B * c.Hq * c.L * c.S) < 2**24  # rows far from any 32-bit split
    assert (predicted[small] == measured[small]).mean() >= 0.9


def test_short_query_over_long_keys_prices_the_bytes_math_moves():
    # cal-0780: math bf16 B4 H32/8 D128 L1 S32768 forward, measured 6.24 ms (the counted-FLOP model said ~0.5): fp32
    # upcasts, the GQA expansion of k and v and their scaling move ~15 GB, and its bmm are GEMVs
    t = _call_time(backend="math", batch=4, q_heads=32, kv_heads=8, q_len=1, kv_len=32768)
    assert 5.0 < t < 7.5


def test_small_math_backward_is_bound_by_its_kernel_launches():
    # a tiny math backward launches 27 kernels: measured 0.8-0.9 ms however small the call
    t = _call_time(backend="math", mode="forward_backward", q_heads=4, kv_heads=4, head_dim=64, q_len=16, kv_len=16)
    assert 0.8 < t < 1.6


def test_decode_headline_pays_a_cudnn_graph_build_per_step_on_a_growing_cache():
    from estimator.model.decode_time import CUDNN_GRAPH_BUILD_MS, decode_graph_builds

    sdpa, eager = _plan(seq_len=16384), _plan(seq_len=16384, backend="eager")
    # each decode step of generate calls SDPA with a new kv length: cuDNN (bf16, H200) builds a new graph; the
    # headline is that step, the steady state (every length seen before) is given beside it
    assert sdpa.decode_time_ms_per_token - sdpa.decode_steady_ms_per_token == pytest.approx(CUDNN_GRAPH_BUILD_MS)
    assert sdpa.decode_first_pass_ms_per_token == sdpa.decode_time_ms_per_token  # the older key, same figure
    assert sdpa.decode_graph_builds_per_step == 1 and eager.decode_graph_builds_per_step == 0
    assert eager.decode_time_ms_per_token == pytest.approx(eager.decode_steady_ms_per_token)
    # the alternatives under their own keys: flash has no per-length graph, a static cache one length
    assert sdpa.decode_forced_flash_ms_per_token < sdpa.decode_time_ms_per_token - 0.9 * CUDNN_GRAPH_BUILD_MS
    assert sdpa.decode_static_cache_ms_per_token < sdpa.decode_time_ms_per_token - 0.9 * CUDNN_GRAPH_BUILD_MS
    assert sdpa.decode_first_step_ms > sdpa.decode_time_ms_per_token + 300  # the process's first build
    # a full sliding window keeps the cache length constant (DynamicSlidingWindowLayer): built once, nothing per
    # step (mistral-7b: window 4,096); before the window fills, the cache grows and every step builds
    def extra(plan):
        return plan.decode_time_ms_per_token - plan.decode_steady_ms_per_token

    full = extra(_plan(model=get_preset("mistral-7b"), seq_len=24576))
    filling = extra(_plan(model=get_preset("mistral-7b"), seq_len=2048))
    assert full == pytest.approx(0.0) and filling == pytest.approx(CUDNN_GRAPH_BUILD_MS)
    assert extra(_plan(seq_len=4096, dtype="float32")) == pytest.approx(0.0)  # fp32 never runs on cuDNN
    assert _plan(seq_len=4096, dtype="float32").decode_forced_flash_ms_per_token is None  # flash has no fp32
    # llama-3-8b has one layer shape: one graph a step through SDPA (cuDNN on the H200), none through eager
    llama = PlanInputs(model=get_preset("llama-3-8b"), seq_len=16384, gpu="h200")
    assert decode_graph_builds(llama, attention_layers(llama), get_gpu("h200")) == 1
    eager_inputs = dataclasses.replace(llama, backend="eager")
    assert decode_graph_builds(eager_inputs, attention_layers(eager_inputs), get_gpu("h200")) == 0


def test_decode_graph_builds_prices_the_decode_call_at_the_plans_torch_version(monkeypatch):
    # the decode call is re-priced to see which backend SDPA picks: at the plan's torch version, not the default
    from estimator.call import attention
    from estimator.call.backends import DEFAULT_TORCH
    from estimator.model.decode_time import decode_graph_builds

    seen = []
    real = attention.estimate_call

    def recording(call, gpu, torch_version=DEFAULT_TORCH):
        seen.append(torch_version)
        return real(call, gpu, torch_version)

    monkeypatch.setattr(attention, "estimate_call", recording)
    inputs = PlanInputs(model=get_preset("llama-3-8b"), seq_len=4096, gpu="h200", torch_version="2.13")
    assert decode_graph_builds(inputs, attention_layers(inputs), get_gpu("h200")) == 1
    assert seen == ["2.13"]


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_decode_host_constants_are_reproduced_by_their_fit():
    # the warm decode steps of validation/data/h200_hf_decode.csv and the decode profiles:
    # `python -m validation.fit_time --decode FILE FILE`
    from estimator.model.decode_time import DECODE_KERNEL_HOST_MS, DECODE_MODEL_PYTHON_MS
    from validation.timing.fit_time import fit_decode

    frames = [pd.read_csv(DATA / f, dtype=str, keep_default_na=False)
              for f in ("h200_hf_decode.csv", "h200_hf_profile_decode.csv")]
    per_kernel, model, errs = fit_decode(frames)
    assert (per_kernel, model) == (DECODE_KERNEL_HOST_MS, DECODE_MODEL_PYTHON_MS)
    assert len(errs) == 17 and sorted(abs(e) for e in errs)[len(errs) // 2] < 0.25


def test_decode_is_host_bound_at_the_profiled_cost_per_kernel():
    """The profile's wall time per launched kernel of a warm decode step (20-38 us) against the fitted constant."""
    from estimator.model.decode_time import DECODE_KERNEL_HOST_MS

    prof = pd.read_csv(DATA / "h200_hf_profile_decode.csv")
    per_step = prof.groupby("case").agg(wall=("wall_ms", "first"), calls=("calls", "sum"), gpu=("gpu_ms", "sum"),
                                        steps=("steps", "first"))
    per_kernel = per_step.wall / (per_step.calls / per_step.steps)
    assert len(per_step) == 10 and (per_step.gpu / per_step.steps < 0.5 * per_step.wall).all()
    assert abs(per_kernel.median() / DECODE_KERNEL_HOST_MS - 1) < 0.1


# --- long calls (the power cap) and decode's regimes, against the H200 measurements that set them ---------------

def test_long_calls_pay_the_power_capped_rate_past_the_threshold():
    """validation/data/h200_long_calls.csv: 40 calls of 32k-256k tokens (the fit set of the power-cap and
    short-query terms): median |error| 2.8%, and the cuDNN prefill shape is within 8% at 32k-256k."""
    from estimator.call.timing import POWER_CAP_AFTER_MS

    err = _relative_errors(pd.read_csv(DATA / "h200_long_calls.csv", dtype=str, keep_default_na=False))
    assert len(err) == 40 and float(pd.Series(err).median()) < 0.04
    # cuDNN causal, 32/8 heads: quadrupling the work past the threshold costs more than 4x (the capped clock)
    t32, t64, t128 = (_call_time(q_heads=32, kv_heads=8, q_len=n, kv_len=n, causal=True) for n in (32768, 65536,
                                                                                                   131072))
    assert t128 / t64 > 4.05 and t64 / t32 > 4.05 and POWER_CAP_AFTER_MS > 0
    assert abs(t128 / 251.4 - 1) < 0.08 and abs(t64 / 58.7 - 1) < 0.08  # measured 251.4 ms and 58.7 ms
    # a short call never reaches the cap: its time scales with its work
    t4, t8 = (_call_time(q_heads=16, kv_heads=16, q_len=n, kv_len=n, causal=True) for n in (4096, 8192))
    assert t8 / t4 < 4.0


def test_decode_regimes_match_the_measured_llama_stacks():
    """validation/data/h200_decode_probe_hf.csv: a 4-layer Llama-3.1-8B, 32k-token cache, 10 steps per stack
    (`python -m validation.timing.decode_probe`): generate 42.6 ms (median), the same lengths again 5.5, forced
    flash 5.8, StaticCache 5.1; its first step 644 ms. Each regime's planned step within the decode band."""
    from estimator.model.step_time import TIME_ERROR_BAND
    from validation.model.model_report import plan_row

    h = pd.read_csv(DATA / "h200_decode_probe_hf.csv")
    med = h[h.step > 1].groupby("backend").ms.median()
    plan = plan_row(dict(family="llama-3.1-8b", layers="4", overrides="", mode="prefill", precision="bf16-true",
                         optimizer="adamw", checkpointing="none", seq_len="32768", batch="1",
                         attn_implementation="sdpa"))
    lo, hi = TIME_ERROR_BAND["decode"]
    for stack, key in (("dynamic_auto", "decode_time_ms_per_token"), ("dynamic_auto_again",
                       "decode_steady_ms_per_token"), ("dynamic_flash", "decode_forced_flash_ms_per_token"),
                       ("static_auto", "decode_static_cache_ms_per_token")):
        ratio = med[stack] / getattr(plan, key) - 1  # measured / planned - 1
        assert lo <= ratio <= hi, (stack, ratio)
    first = float(h[(h.backend == "dynamic_auto") & (h.step == 1)].ms.iloc[0])
    assert 0.6 < plan.decode_first_step_ms / first < 1.2


def test_the_compiled_static_cache_step_is_its_gpu_work():
    """validation/data/h200_decode_probe_compiled.csv: the 4-layer Llama's StaticCache step under torch.compile
    (reduce-overhead) ran 2.5 ms from its third step, half the eager StaticCache step; the plan prices it as the
    step's GPU work (Inductor's fusions not priced, so the plan is no higher than the eager one)."""
    from validation.model.model_report import plan_row

    h = pd.read_csv(DATA / "h200_decode_probe_compiled.csv")
    med = h[h.step > 2].groupby("backend").ms.median()
    plan = plan_row(dict(family="llama-3.1-8b", layers="4", overrides="", mode="prefill", precision="bf16-true",
                         optimizer="adamw", checkpointing="none", seq_len="32768", batch="1",
                         attn_implementation="sdpa"))
    assert plan.decode_static_compiled_ms_per_token < plan.decode_static_cache_ms_per_token
    assert abs(plan.decode_static_compiled_ms_per_token / med["static_compiled"] - 1) <= 0.2
    assert med["static_compiled"] < 0.6 * med["static_auto"]


def test_the_plan_says_where_no_measurement_stands_behind_it():
    from estimator.model.assumptions import LONGEST_MEASURED_CALL_TOKENS

    inside = _plan(seq_len=131072)
    past = _plan(seq_len=2 * LONGEST_MEASURED_CALL_TOKENS)
    assert not any("past the longest attention call" in a for a in inside.assumptions)
    assert any("past the longest attention call" in a for a in past.assumptions)


DECODE_SETS = ("h200_hf_decode", "h200_hf_decode_heldout_p1", "h200_hf_decode_heldout_p2", "h200_hf_long_fit",
               "h200_hf_long_heldout", "h200_hf_decode_repeat", "h200_hf_long_heldout2")


def test_decode_band_is_the_spread_of_seven_processes():
    """estimator/model/step_time.py TIME_ERROR_BAND["decode"]: the 10th-90th percentile of measured / planned - 1 of
    the headline decode step over the seven processes' growing-cache rows (76 rows; 60 within 30%)."""
    import numpy as np

    from estimator.model.step_time import TIME_ERROR_BAND
    from validation.model.model_report import compare

    ratios = []
    for name in DECODE_SETS:
        d = pd.read_csv(DATA / f"{name}.csv")
        d["_source"] = name
        r = compare(d)
        err = r.decode_err.dropna().to_numpy()
        ratios.extend(1 / (1 + err) - 1)
    ratios = np.asarray(ratios)
    lo, hi = np.percentile(ratios, [10, 90])
    assert len(ratios) >= 70
    assert TIME_ERROR_BAND["decode"] == pytest.approx((lo, hi), abs=0.02)
    assert (np.abs(1 / (1 + ratios) - 1) <= 0.3).mean() >= 0.75


def test_the_same_rows_in_two_device_calls_differ_in_decode_not_in_prefill():
    """validation/data/h200_hf_decode_repeat.csv re-ran 8 rows of h200_hf_long_heldout.csv in a later device call: the
    GPU-bound prefills agree within 3%, the host-bound decode steps do not (why the decode band is wide)."""
    a = pd.read_csv(DATA / "h200_hf_long_heldout.csv")
    b = pd.read_csv(DATA / "h200_hf_decode_repeat.csv")
    m = a.merge(b, on=["family", "seq_len", "batch"], suffixes=("_a", "_b"))
    assert len(m) == 8
    assert ((m.time_prefill_ms_b / m.time_prefill_ms_a - 1).abs() <= 0.03).all()
    assert (m.decode_ms_per_token_a / m.decode_ms_per_token_b).max() >= 1.5


def test_decode_misses_share_the_slow_host_calls_not_the_model():
    """docs/plan.md: the headline decode rows outside 30% all come from the two device calls whose host was slow,
    and inside those calls steps with and without a cuDNN graph build are slowed alike (the host's speed, not a
    per-graph cost)."""
    import numpy as np

    from validation.model.model_report import compare

    slow_calls = {"h200_hf_long_heldout", "h200_hf_long_heldout2"}
    misses, slow = [], []
    for name in DECODE_SETS:
        r = compare(pd.read_csv(DATA / f"{name}.csv"))
        r = r[r.decode_err.notna()]
        ratio = 1 / (1 + r.decode_err)
        builds = (r.planned_decode_ms - r["planned_decode steady_ms"]) > 1
        misses += [name] * int((r.decode_err.abs() > 0.3).sum())
        if name in slow_calls:
            slow += list(zip(ratio, builds, strict=True))
    assert len(misses) >= 10 and set(misses) <= slow_calls
    with_build = np.median([x for x, b in slow if b])
    without = np.median([x for x, b in slow if not b])
    assert with_build > 1.25 and without > 1.25
    assert abs(with_build / without - 1) < 0.1


def test_h200_call_time_on_held_out_set_8():
    """validation/data/h200_heldout8.csv (seed 41, committed before it was measured, after the kernel-geometry and
    kernel-family changes; never fitted): median |error| 9.7% on its 54 SDPA and eager calls >= 1 ms (10.7% with the
    model before those changes; 9.9% since the op chains' GEMM roles, which it was one of the sets to choose; 10.15%
    since the efficient backward's refit with its dQ chain per kernel); the 8% target is not met there either."""
    import numpy as np

    _, cols, err, measured = _call_errors("h200_heldout8.csv")
    big = (measured >= 1.0) & (cols["selected_backend"] != "flex")
    assert big.sum() == 54 and float(np.median(np.abs(err[big]))) <= 0.102


def test_h100_call_time_on_set_12():
    """validation/data/h100_heldout12.csv: validation/cases/h200_heldout12.csv (400 random calls, seed 71, committed
    before it was measured) ran on an H100 when an H200 was asked for. Priced for the H100 with the model fitted on
    H200 sets: median |error| 11.8% on its 124 calls >= 1 ms with the model before this session's changes, 12.0% after
    the H200 ones; the op chains' elementwise kernels then came out 10% slow, being priced at their H200 share of the
    H100's lower bandwidth. With SM-bound families keeping their bytes a second (timing.elementwise_bytes_per_ms,
    found on this set, so it is not held out for that change) 7.7%."""
    import numpy as np

    _, _, err, measured = _call_errors("h100_heldout12.csv", gpu="h100-sxm")
    big = measured >= 1.0
    assert big.sum() == 124 and float(np.median(np.abs(err[big]))) <= 0.08
