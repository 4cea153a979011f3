"""Predicted duration of one attention call on a GPU: what the kernels execute, at fitted rates.

time = Σ_k terms_k(call) / fit_k + overhead, per (backend, mode), with these terms in ms (`time_terms`):

* compute: FLOPs as the kernels execute them (`executed_tile_flops`): fused kernels work in tiles, so the
  query length is padded to the kernel's query tile (a decode-shaped call with L=2 computes a whole 64- or
  128-row tile), head_dim to the kernel's instantiation (FA2: multiples of 32), causal tiles above the diagonal
  skipped; times the wave-quantisation factor: a forward kernel without split-KV (cuDNN, memory-efficient)
  runs B·Hq·ceil(L/tile) CTAs on `sm_count` SMs, so 16 CTAs use 16 of 132 SMs for the whole key loop.
  Backward kernels are parallel over key tiles (B·Hq·ceil(S/tile) CTAs). At the fp32 peak for fp32 inputs
  and for math (which upcasts 16-bit inputs to fp32), the 16-bit tensor-core peak otherwise.
* the same compute for fp32 inputs (a separate fit: each path's fp32 kernels reach another share of their peak).
* masked compute: the same for calls with an attn_mask on a fused backend (cuDNN and the efficient kernel
  add a bias tile per score tile and run markedly slower than their unmasked kernels: fitted separately).
* exp: score elements the fused kernel's softmax touches (forward once, backward twice), padded and waved like the
  compute, at 1/256 of the 16-bit tensor-core rate (the SFU exp rate): independent of head_dim, so it is what
  bounds small-head_dim calls.
* dropout: fused kernels draw a Philox number per executed score element (forward once, backward once to
  rebuild the kept set), counted like exp; math and eager run native_dropout over the score matrix (read, write,
  bool keep-mask; backward reads gradient and mask): HBM bytes (`dropout_bytes`). 0 without dropout.
* memory: HBM bytes per backend (`hbm_bytes`): q, k, v, out (×3 with backward) for fused kernels, plus the
  mask's bool->float conversion pass and the bias read once per query head; math's fp32 and eager's passes
  over the score matrix; math/eager expanding k/v for GQA.

The fit factors and the per-call overhead per backend and mode are a least-squares fit of relative error over
the H200 rows of validation/data/h200_calibration.csv + h200_heldout.csv (torch 2.11), rows of 1 ms and more
weighted 1, shorter rows 0.25 (the target is calls >= 1 ms). Reproduce the committed constants with

    python -m validation.fit_time validation/data/h200_calibration.csv validation/data/h200_heldout.csv

(it prints FIT_FACTORS to paste). They are fit factors, not hardware efficiencies (some exceed 1). flex is not in
that fit: flash's factors at 85% of its FLOP rate (FlexAttention paper, Dong et al. 2024, arXiv:2412.05496 §5);
validation/data/h200_flex_calls.csv checks it. Errors before/after: docs/plan.md, time section.
"""

from __future__ import annotations

import numpy as np

from estimator.call.flops import block_fraction
from estimator.call.shapes import Calls, cdiv, round_up
from estimator.hardware import GPU

FLEX_FLOP_SHARE = 0.85  # flex's FLOP rate relative to flash's (the FlexAttention paper, §5)
# (flop_fit 16-bit, flop_fit fp32, masked_flop_fit, bw_fit, exp_fit, dropout_fit, overhead_ms) per
# (backend, forward_backward): the fit described in the module docstring
FIT_FACTORS = {
    ("cudnn", False): (0.997, 0.997, 0.271, 1000.0, 1000.0, 0.214, 0.07),
    ("cudnn", True): (0.736, 0.736, 0.326, 1000.0, 2.149, 0.337, 0.307),
    ("eager", False): (0.313, 1.377, 1.377, 0.373, 1000.0, 0.287, 0.132),
    ("eager", True): (1000.0, 2.34, 2.34, 0.539, 1000.0, 0.361, 0.871),
    ("efficient", False): (2.138, 0.874, 0.745, 0.676, 0.096, 0.051, 0.061),
    ("efficient", True): (0.135, 0.694, 1.397, 0.094, 1000.0, 0.108, 0.267),
    ("flash", False): (0.405, 0.405, 0.405, 1000.0, 2.331, 0.361, 0.086),
    ("flash", True): (0.333, 0.333, 0.333, 1000.0, 1000.0, 0.191, 0.382),
    ("math", False): (0.971, 1.358, 1.358, 0.312, 1000.0, 0.674, 0.209),
    ("math", True): (0.878, 1.023, 1.023, 1.104, 1000.0, 0.392, 1.001),
}
for _g in (False, True):  # flex: flash's compute rates times FLEX_FLOP_SHARE, flash's bandwidth and overhead
    _f, _f32, _m, _b, _e, _r, _o = FIT_FACTORS[("flash", _g)]
    FIT_FACTORS[("flex", _g)] = (round(_f * FLEX_FLOP_SHARE, 3), round(_f32 * FLEX_FLOP_SHARE, 3),
                                 round(_m * FLEX_FLOP_SHARE, 3), _b, _e, _r, _o)

FUSED = ("flash", "efficient", "cudnn", "flex")
# query-tile rows of the forward kernel: FA2's split-KV forward kBlockM 64 (flex: 128-row blocks); cuDNN's
# Hopper kernel 128; the efficient (CUTLASS) kernel 64 for head_dim <= 128, 32 above (its *_32x128_gmem kernels)
SPLIT_KV = ("flash", "flex")  # forwards that split the key loop over CTAs when B·H·tiles is below the SM count
BWD_KEY_TILE = {"flash": 128, "flex": 128, "cudnn": 128, "efficient": 64}


def _query_tile(c: Calls, backend):
    return np.where(backend == "efficient", np.where(c.D <= 128, 64, 32),
                    np.where(backend == "flash", 64, 128))


def _head_dim_executed(c: Calls, backend):
    """head_dim the kernel runs at: FA2 instantiates 32, 64, ..., 256; the efficient kernel 64, 128, else
    multiples of 32 (gmem kernels); cuDNN's Hopper kernels 64, 128 and 256 (a head_dim of 80 or 96 runs the 128
    kernel, 160 or 192 the 256 one: its fit rows with such head_dims ran 1.4-2.7x their counted FLOPs)."""
    eff = np.where(c.D <= 64, 64, np.where(c.D <= 128, 128, round_up(c.D, 32)))
    cud = np.where(c.D <= 64, 64, np.where(c.D <= 128, 128, round_up(c.D, 128)))
    return np.where(np.isin(backend, ("flash", "flex")), round_up(c.D, 32),
                    np.where(backend == "efficient", eff, cud))


def wave_factor(ctas, sms):
    """ceil(ctas/sms)·sms / ctas: how much longer than a perfectly balanced run the last partial wave makes it."""
    ctas = np.maximum(ctas, 1)
    return cdiv(ctas, sms) * sms / ctas


def executed_tile_flops(c: Calls, backend, executed, sms: int, per_score: bool = False,
                        score_passes: tuple[float, float] = (1.0, 2.0)):
    """Compute-time FLOPs (float64): for fused backends, tile-padded FLOPs times the wave factor; forward and
    backward apart (backward 0 in forward mode). math and eager: `executed` (their GEMMs are large cuBLAS calls).
    per_score: the score elements the fused kernel's softmax touches instead (exp, max, scale: forward once,
    backward twice: the recomputed exp and dS), with the same padding and waves; 0 for math and eager.
    score_passes: the (forward, backward) passes per score element counted with per_score."""
    executed = np.asarray(executed, dtype=np.float64)
    mt = _query_tile(c, backend)
    nt_b = np.vectorize(lambda b: BWD_KEY_TILE.get(b, 128), otypes=[np.int64])(backend) if np.ndim(backend) \
        else np.int64(BWD_KEY_TILE.get(str(backend), 128))
    d = _head_dim_executed(c, backend).astype(np.float64)
    lp = (cdiv(c.L, mt) * mt).astype(np.float64)
    sp = (cdiv(c.S, nt_b) * nt_b).astype(np.float64)
    frac = np.where(backend == "flex", block_fraction(c),
                    np.where(c.causal & (c.L == c.S), (cdiv(c.L, 128) + 1) / (2.0 * cdiv(c.L, 128)), 1.0))
    base = c.B.astype(np.float64) * c.Hq * lp * sp * d * frac if hasattr(c.B, "astype") else \
        float(c.B) * float(c.Hq) * lp * sp * d * frac
    fwd_ctas = c.B * c.Hq * cdiv(c.L, mt)
    bwd_ctas = c.B * c.Hq * cdiv(c.S, nt_b)
    kf, kb = (score_passes[0] / d, score_passes[1] / d) if per_score else (4.0, 10.0)
    fwd = kf * base * np.where(np.isin(backend, SPLIT_KV), 1.0, wave_factor(fwd_ctas, sms))
    bwd = np.where(c.grad, kb * base * wave_factor(bwd_ctas, sms), 0.0)
    fused = np.isin(backend, FUSED)
    return np.where(fused, fwd + bwd, 0.0 if per_score else executed)


def hbm_bytes(c: Calls, backend):
    """Bytes moved through HBM. Fused kernels read q, k, v and write out (≈3× that for backward), plus an
    attn_mask: a bool mask's conversion to the input dtype (read 1 B, write es per element of (B, 1, L, S)) and
    the bias read once per query head (again in backward). math and eager also stream the score matrix: ≈6
    passes over it forward and ≈10 backward (write scores, read/write softmax, casts, mask), in fp32 for math
    and the input dtype for eager; and with GQA they expand k and v to the query heads (write + read)."""
    qo = 2 * c.B * c.Hq * c.L * c.D * c.es
    kv = 2 * c.B * c.Hk * c.S * c.D * c.es
    p = c.B * c.Hq * c.L * c.S
    ls = c.B * c.L * c.S
    masked = (c.mask_bool | c.mask_float) & (backend != "flex")  # flex reads its BlockMask, not a dense mask
    fused_fwd = qo + kv + np.where(masked, p * c.es, 0) + np.where(c.mask_bool, ls * (1 + c.es), 0)
    expand = np.where(c.Hq != c.Hk, 2 * 2 * c.B * c.Hq * c.S * c.D, 0)
    math_fwd = qo + kv + expand * 4 + 6 * p * 4
    eager_fwd = qo + kv + expand * c.es + 4 * p * c.es + 2 * p * 4
    fwd = np.where(backend == "math", math_fwd, np.where(backend == "eager", eager_fwd, fused_fwd))
    bwd = np.where(np.isin(backend, ("math", "eager")), fwd * 10.0 / 6.0,
                   3.0 * (qo + kv) + np.where(masked, p * c.es, 0))
    return fwd + np.where(c.grad, bwd, 0.0)


def dropout_bytes(c: Calls, backend):
    """HBM bytes of math's and eager's dropout on the probabilities (native_dropout): read p, write the kept
    values and a bool keep-mask; backward reads the gradient and the mask and writes the gradient. fp32 for math,
    the input dtype for eager; 0 without dropout and for fused backends (they draw Philox numbers in registers)."""
    p = c.B * c.Hq * c.L * c.S
    sz = np.where(backend == "math", 4, c.es)
    fwd = p * (2 * sz + 1)
    return np.where(c.has_dropout & np.isin(backend, ("math", "eager")), fwd + np.where(c.grad, fwd, 0), 0.0)


def time_terms(c: Calls, backend, executed, gpu: GPU):
    """The model's terms in ms at the naive rates, stacked last: compute of unmasked calls with 16-bit inputs,
    the same with fp32 inputs (each path's fp32 kernels reach a different share of the fp32 peak than its
    16-bit kernels of theirs), compute of masked calls on cuDNN/efficient, memory."""
    peak = np.where(c.fp32 | (backend == "math"), gpu.peak_flops_per_s["float32"], gpu.peak_flops_per_s["bfloat16"])
    comp = executed_tile_flops(c, backend, executed, gpu.sm_count) / peak * 1e3
    masked = (c.mask_bool | c.mask_float) & np.isin(backend, ("efficient", "cudnn"))
    mem = hbm_bytes(c, backend) / gpu.hbm_bytes_per_s * 1e3
    # the softmax's exp runs on the SFUs at ~1/256 of the 16-bit tensor-core rate (H100: 3.9 vs 989 TFLOPs, Shah et
    # al. 2024, FlashAttention-3 §3.2): per score element, independent of head_dim, so small head_dims are exp-bound
    exp_rate = gpu.peak_flops_per_s["bfloat16"] / 256
    scores = executed_tile_flops(c, backend, executed, gpu.sm_count, per_score=True) / exp_rate * 1e3
    # dropout: fused kernels draw a Philox number per executed score element (forward, and again in backward to
    # rebuild the kept set), integer work beside the exp; math and eager run native_dropout over the score matrix
    rng = executed_tile_flops(c, backend, executed, gpu.sm_count, per_score=True, score_passes=(1.0, 1.0)) / exp_rate
    drop = np.where(c.has_dropout, np.where(np.isin(backend, FUSED), rng * 1e3,
                                            dropout_bytes(c, backend) / gpu.hbm_bytes_per_s * 1e3), 0.0)
    return np.stack(np.broadcast_arrays(np.where(masked | c.fp32, 0.0, comp), np.where(~masked & c.fp32, comp, 0.0),
                                        np.where(masked, comp, 0.0), mem, scores, drop), axis=-1)


def time_ms(c: Calls, backend, executed, gpu: GPU):
    """Predicted milliseconds for the call on `gpu` (vectorized over calls)."""
    terms = time_terms(c, backend, executed, gpu)
    shape = np.shape(terms)[:-1]
    fit = np.ones(shape + (np.shape(terms)[-1],), dtype=np.float64)
    overhead = np.zeros(shape, dtype=np.float64)
    for (name, grad), (*factors, oh) in FIT_FACTORS.items():
        sel = (backend == name) & (c.grad == grad)
        fit = np.where(sel[..., None], np.array(factors), fit)
        overhead = np.where(sel, oh, overhead)
    return np.sum(terms / fit, axis=-1) + overhead
