"""Predicted duration of one attention call on a GPU: what the kernels execute, at fitted rates.

time = max(GPU work, host dispatch, serial chain) + overhead, per (backend, mode) (`combine`), where

* GPU work = Σ_k terms_k(call) / fit_k, with these terms in ms (`time_terms`):
  - compute: FLOPs as the fused kernels execute them (`executed_tile_flops`): they work in tiles, so the query
    length is padded to the kernel's query tile (a decode-shaped call with L=2 computes a whole 64- or 128-row
    tile), head_dim to the kernel's instantiation (FA2: multiples of 32), causal tiles above the diagonal skipped;
    times the wave-quantisation factor: a forward kernel without split-KV (cuDNN, memory-efficient) runs
    B·Hq·ceil(L/tile) CTAs on `sm_count` SMs, so 16 CTAs use 16 of 132 SMs for the whole key loop. FA2's forward
    splits its keys only where PyTorch's heuristic does (never with dropout; `_flash_forward`), else it is its
    standard kernel's 128-row tiles in waves; the efficient forward's q·kᵀ runs head_dim in steps of 32 and its p·v
    at 64 or 128 columns (`_efficient_forward_width`). Backward kernels are parallel over key tiles
    (B·Hq·ceil(S/tile) CTAs). At the 16-bit tensor-core peak, which the fit holds as the fastest rate
    (validation/timing/fit_time.py COMPUTE_LOWER).
  - the same compute for fp32 inputs, at the fp32 peak (a separate fit: each path's fp32 kernels reach another
    share of their peak).
  - masked compute: the same for calls with an attn_mask on cuDNN or the efficient kernel. The efficient kernel
    runs its unmasked kernel (the term of its branch below or above) and adds a bias tile per score tile: this term
    is that addition, so a mask never makes its call cheaper. cuDNN runs another kernel for a bias (64-row tiles):
    this term is its whole compute, and a masked 16-bit call at head_dim > 128 on it is the masked compute times
    MASKED_WIDE_SLOWDOWN.
  - wide compute: the same for unmasked 16-bit calls with head_dim > 128 (those kernels run smaller tiles, and the
    efficient backward keeps dK/dV in global memory: a 16-bit efficient backward at head_dim 160 runs ~5x slower
    per FLOP than at 128 on the H200).
  - short-query compute: the same padded compute for unmasked calls whose query is shorter than the query tile
    (decode-shaped calls, q_len 1-4 over a long cache): their time is the key loop, not tensor-core work at a
    prefill's rate, so they get their own factor (fitted together with the prefill-shaped calls, one factor had to
    serve both, and long prefill calls on cuDNN came out 33-50% low).
  - power cap: tensor-core work beyond POWER_CAP_AFTER_MS (at the naive rate) of one call: the H200 runs long
    attention kernels at its 700 W board limit, where the SM clock drops from 1980 MHz to 1245-1650 MHz
    (validation/data/h200_sustain_smi.csv: 233 of 249 samples at >= 90% load report the SW power cap reason),
    so the rate of a long call is lower than a short call's (cuDNN causal 32k, 32/8 heads: 13.0 ms after 2 s idle,
    15.0 ms after 80 ms of back-to-back runs; validation/data/h200_sustain.csv). Modelled as a second rate for the
    compute past the threshold.
  - exp: score elements the fused kernel's softmax touches (forward once, backward twice), padded and waved like
    the compute, at 1/256 of the 16-bit tensor-core rate (the SFU exp rate): independent of head_dim, so it is
    what bounds small-head_dim calls.
  - dropout: fused kernels draw a Philox number per executed score element (forward once, backward once to
    rebuild the kept set), counted like exp; math and eager: native_dropout's bytes (their op chain).
  - memory: HBM bytes of fused kernels (`hbm_bytes`): q, k, v, out (×3 with backward), plus the mask's
    bool->float conversion pass and the bias read once per query head; math and eager: the bytes of their
    elementwise ops, softmax and copies (`chain_terms`, estimator/call/op_chain.py), each at the share of HBM
    bandwidth its kernel family reaches (op_chain.KERNEL_CLASS_BW_SHARE).
  - GEMMs of math and eager: each bmm of their op chain as a roofline, max(FLOPs at peak, operand + output bytes
    at HBM bandwidth), so a GEMV-shaped bmm of a short query over long keys (and GQA's expanded k/v, math's fp32
    upcasts) costs the bytes it moves, at the share of it its role's cuBLAS kernels reach (`gemm_ms`); an fp32 p·v
    of 2-4 query rows at least the gemmSN kernel's walk over the keys. math's and eager's terms are all priced from
    per-kernel timings (validation.timing.kernel_classes), their fit factors held at 1.
* host dispatch = ms per kernel × the kernels the call launches (`host_kernels`: math's and eager's op chain, 9 to
  38 launches; the fused backends' few launches are in the overhead): a math backward of ~30 small kernels takes
  ~1 ms however small the call, since the GPU waits for their launches.
* serial chain = ms per step × the memory-efficient backward's serialized dQ accumulations
  (`dq_chain.dq_lock_steps`): with a short query over long keys its key-split CTAs take turns adding to the same dQ
  tile.
* per-CTA floor (estimator/call/cta_floor.py): the call lasts at least one CTA's latency chain, whatever its work:
  cuDNN's masked forward's waves of CTAs, and the efficient forward's walk of one CTA over all its keys (no split-KV).

The fit factors, the ms per kernel and per step and the overhead per backend and mode are a least-squares fit of
relative error over the H200 rows (torch 2.11) of the seven measured sets below (the seventh, h200_long_calls.csv:
40 calls of 32k-256k tokens per backend, causal and not, GQA, head_dim 64-256, forward and backward), rows of
1 ms and more weighted 1, shorter rows 0.25 (the target is calls >= 1 ms); the max is fitted by alternating regimes
(validation/timing/fit_time.py).
Reproduce the committed constants with

    python -m validation.fit_time validation/data/h200_calibration.csv validation/data/h200_heldout.csv \
        validation/data/h200_heldout2.csv validation/data/h200_heldout3.csv validation/data/h200_heldout4.csv \
        validation/data/h200_heldout5.csv validation/data/h200_long_calls.csv

(it prints FIT_FACTORS to paste). They are fit factors, not hardware efficiencies (some exceed 1). flex is not in
that fit: its Triton kernels are priced from their own configs and measured rates (estimator/call/flex_time.py).
Leave-one-set-out errors: docs/plan.md, time section.
"""

from __future__ import annotations

import numpy as np

from estimator.call import cta_floor, dq_chain, flex_time, op_chain, registry
from estimator.call.cta_floor import CTA_FLOOR_EVENT_MS
from estimator.call.flops import block_fraction
from estimator.call.memory import flash_num_splits, flash_query_view
from estimator.call.shapes import Calls
from estimator.hardware import GPU, get_gpu
from estimator.units import cdiv, round_up

# naive-rate compute ms of one call after which the power-capped rate applies (the module docstring): from idle
# the H200's clock held for ~65 ms of back-to-back cuDNN work (h200_sustain.csv), and the runner's timed repeats
# follow four warm runs of the same call; 20 naive ms (~27 ms at cuDNN's rate) gave the lowest error over the fit
# sets of the values tried (10, 20, 40, 80: 2.8% median on the long calls at 20, 3.4-3.5% at the others)
POWER_CAP_AFTER_MS = 20.0
# a masked call (a dense bias tile per score tile) on cuDNN with 16-bit head_dim > 128 runs both slow paths at
# once: the bias reads and the wide kernels' smaller tiles (module docstring, "wide compute"). The masked factors
# were fitted on calls of head_dim <= 128 almost alone: the masked wide forwards >= 1 ms of the seven fit sets ran a
# median 34% longer than priced, and whole 4-layer Gemma-2/3 prefills (sliding layers at head_dim 256 get a dense
# mask) 16-25% longer at 32k-128k. Their masked compute is priced at 1/1.5 of the masked rate (of 1.0-2.0, 1.5-1.55
# gave those calls the lowest median |error|). The efficient kernel's masked calls pay their wide term and the bias
# on top (`time_terms`): priced at the masked rate alone, its masked backwards at head_dim 192-256 had come out
# 4-5x below the measurement and below the same call without its mask (held-out sets 6, 10, 11: 285 ms measured,
# 55 ms priced, 324 ms for the unmasked call). cuDNN's masked wide backwards pay the slowdown too: at the masked rate
# alone the six of held-out sets 6-11 (head_dim 160-256, 1-147 ms) had run 26-46% longer than priced (`python -m
# validation report` on each set with the model at commit 6e16f39).
MASKED_WIDE_SLOWDOWN = 1.5
# backends that run another kernel for a bias, whose masked term is the call's whole compute (`time_terms`); the
# efficient kernel's is the bias added to its unmasked branch
MASK_KERNEL_APART = ("cudnn",)
# (flop_fit 16-bit, flop_fit fp32, masked_flop_fit, bw_fit, exp_fit, dropout_fit, gemm_fit, wide_flop_fit,
# short_query_fit, power_cap_fit, host_ms_per_kernel, ms_per_dq_step, overhead_ms) per (backend, forward_backward):
# the fit described in the module docstring (a factor 1000: the term came out free; a factor no row of the group
# exercises copies another)
FIT_FACTORS = {
    ("cudnn", False): (0.724, 0.724, 0.434, 1.061, 0.48, 0.209, 1000.0, 0.975, 1.468, 1.822, 0.0, 0.0, 0.074),
    ("cudnn", True): (1.0, 1.0, 0.46, 1.84, 0.866, 0.32, 1000.0, 0.592, 2.457, 2.762, 0.0, 0.0, 0.334),
    ("eager", False): (1.0, 1.0, 1.0, 1.0, 1000.0, 1.0, 1.0, 1.0, 1.0, 1000.0, 0.0209, 0.0, 0.076),
    ("eager", True): (1.0, 1.0, 1.0, 1.0, 1000.0, 1.0, 1.0, 1.0, 1.0, 1000.0, 0.0506, 0.0, 0.292),
    ("efficient", False): (0.769, 0.827, 3.233, 0.694, 0.118, 0.114, 1000.0, 0.235, 0.821, 1000.0, 0.0, 0.0, 0.073),
    ("efficient", True): (0.229, 0.684, 20.726, 1.079, 0.205, 0.069, 1000.0, 0.051, 0.32, 4.564, 0.0, 0.00126, 0.396),
    ("flash", False): (0.418, 0.418, 0.418, 1000.0, 1.226, 0.692, 1000.0, 0.342, 0.412, 4.066, 0.0, 0.0, 0.094),
    ("flash", True): (0.353, 0.353, 0.353, 1000.0, 2.092, 4.349, 1000.0, 0.292, 0.191, 1000.0, 0.0, 0.0, 0.42),
    ("math", False): (1.0, 1.0, 1.0, 1.0, 1000.0, 1.0, 1.0, 1.0, 1.0, 1000.0, 0.0131, 0.0, 0.153),
    ("math", True): (1.0, 1.0, 1.0, 1.0, 1000.0, 1.0, 1.0, 1.0, 1.0, 1000.0, 0.0406, 0.0, 0.233),
}
# (backend, grad) whose kernel runs the softmax in warps of their own beside the MMAs of another tile (Hopper
# warp-specialised kernels, as FlashAttention-3 does, Shah et al. 2024 §3.1; cuDNN's forward is
# cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_*): the call takes the slower of the two pipelines, not
# their sum, so at head_dim 128 the MMAs bound it and at head_dim <= 64 (the 64-wide kernel: as many MMA FLOPs per
# score as the exp's 1/256 rate costs) the softmax does. Its rate (exp_fit) is fitted as that branch of the max:
# 0.48 of the nominal exp rate, the softmax's max, scale, sum and conversions beside each exp. Summed, as before,
# the fit had priced the exp as free (its rows are nearly all head_dim 128) and cuDNN's unmasked forwards at
# head_dim <= 64 (16 rows of the call sets, and ViT-L's 12,545-token call: 1.54-1.68 ms measured against 1.06,
# validation/data/h200_vit_call_probe.csv) ran 18-38% longer than priced. cuDNN's backward fits a summed exp at
# the nominal rate (1.02) and stays summed.
OVERLAPPED_SOFTMAX = (("cudnn", False),)
EXP_TERM = 4  # the exp term's place in time_terms' stack

# query-tile rows of the forward kernel: FA2's split-KV forward kBlockM 64 (its standard kernel's 128: `_flash_forward`;
# flex: 128-row blocks); cuDNN's Hopper kernel 128; the efficient (CUTLASS) kernel 64 for head_dim <= 128, 32 above
# (its *_32x128_gmem kernels)
BWD_KEY_TILE = {"flash": 128, "flex": 128, "cudnn": 128, "efficient": 64}


def _query_tile(c: Calls, backend):
    return np.where(backend == "efficient", np.where(c.D <= 128, 64, 32),
                    np.where(backend == "flash", 64, 128))


def _head_dim_executed(c: Calls, backend, width=None):
    """head_dim the kernel runs at: FA2 instantiates 32, 64, ..., 256; the efficient kernel 64, 128, else
    multiples of 32 (gmem kernels); cuDNN's Hopper kernels 64, 128 and 256 (a head_dim of 80 or 96 runs the 128
    kernel, 160 or 192 the 256 one: its fit rows with such head_dims ran 1.4-2.7x their counted FLOPs).
    `width`: another width to round the same way (v's, Dv); default head_dim."""
    D = c.D if width is None else width
    eff = np.where(D <= 64, 64, np.where(D <= 128, 128, round_up(D, 32)))
    cud = np.where(D <= 64, 64, np.where(D <= 128, 128, round_up(D, 128)))
    return np.where(np.isin(backend, ("flash", "flex")), round_up(D, 32),
                    np.where(backend == "efficient", eff, cud))


def wave_factor(ctas, sms):
    """ceil(ctas/sms)·sms / ctas: how much longer than a perfectly balanced run the last partial wave makes it."""
    ctas = np.maximum(ctas, 1)
    return cdiv(ctas, sms) * sms / ctas


def _efficient_forward_width(c: Calls):
    """Executed widths (q·k's + p·v's) of the memory-efficient (CUTLASS) forward per score element: its first GEMM
    (q·kᵀ) runs the head_dim in K steps of 32 (kernel_forward.h MM0: ThreadblockShape::kK, 32 for 16-bit and fp32
    on Sm80+), so a head_dim of 32 or 96 is not padded there; its second (p·v) writes output tiles of kKeysPerBlock
    columns: 64 for the kMaxK-64 kernel (max(D, Dv) <= 64), 128 for the kMaxK-128 and gmem kernels
    (fmha_cutlassF_*_64x64_rf, 64x128_rf, 32x128_gmem), so v's width is padded to 64 or a multiple of 128."""
    kmax = np.maximum(c.D, c.Dv)
    return (round_up(c.D, 32) + round_up(c.Dv, np.where(kmax <= 64, 64, 128))).astype(np.float64)


def _flash_forward(c: Calls, sms: int):
    """(padded query rows over all heads, CTAs, split) of FA2's forward as PyTorch runs it (flash_api.cpp,
    torch 2.11): a single-token GQA query is viewed as (B, Hk, Hq/Hk) (seqlenq_ngroups_swapped); the split-KV kernel
    (64-row query tiles, the key loop spread over CTAs: no wave loss) runs where `flash_num_splits` chooses more
    than one split, which it never does with dropout ("SplitKV is not implemented for dropout") nor with
    B·heads·ceil(q/64) >= 0.8·2·SMs; else the standard kernel: 128-row tiles, one CTA per (batch, head, tile), in
    waves over the SMs."""
    heads, q_len = flash_query_view(c)
    split = flash_num_splits(c, heads, q_len, round_up(c.D, 8), sms) > 1
    tile = np.where(split, 64, 128)
    tiles = cdiv(q_len, tile)
    return heads * tiles * tile, c.B * heads * tiles, split


def tile_geometry(c: Calls, backend, sms: int):
    """What `executed_tile_flops` computes once for its three uses in `time_terms`: (base, d, rv, forward
    multiplier, backward wave, forward width): the tile-padded B·Hq·L·S·d product (times the causal or block
    share), the executed head_dim, v's executed width over it, the forward's wave factor (1 for split-KV forwards;
    for flash also its own query padding over base's: `_flash_forward`), the backward's, and the forward's executed
    q·k + p·v widths over d (1 + rv but for the efficient kernel: `_efficient_forward_width`). None for a single
    backend name that is not fused (math, eager: their op chain is priced instead)."""
    if np.ndim(backend) == 0 and str(backend) not in registry.FUSED:
        return None
    mt = _query_tile(c, backend)
    nt_b = np.vectorize(lambda b: BWD_KEY_TILE.get(b, 128), otypes=[np.int64])(backend) if np.ndim(backend) \
        else np.int64(BWD_KEY_TILE.get(str(backend), 128))
    d = _head_dim_executed(c, backend).astype(np.float64)
    lp = (cdiv(c.L, mt) * mt).astype(np.float64)
    sp = (cdiv(c.S, nt_b) * nt_b).astype(np.float64)
    causal = np.where(c.causal & (c.L == c.S), (cdiv(c.L, 128) + 1) / (2.0 * cdiv(c.L, 128)), 1.0)
    flex = backend == "flex"
    frac = np.where(flex, block_fraction(c), causal) if np.any(flex) else np.where(flex, 0.0, causal)
    base = c.B.astype(np.float64) * c.Hq * lp * sp * d * frac if hasattr(c.B, "astype") else \
        float(c.B) * float(c.Hq) * lp * sp * d * frac
    fwd_ctas = c.B * c.Hq * cdiv(c.L, mt)
    bwd_ctas = c.B * c.Hq * cdiv(c.S, nt_b)
    rv = _head_dim_executed(c, backend, c.Dv).astype(np.float64) / d
    fwd = np.where(flex, 1.0, wave_factor(fwd_ctas, sms))
    flash = backend == "flash"
    if np.any(flash):
        rows, ctas, split = _flash_forward(c, sms)
        fwd = np.where(flash, rows / (c.Hq * lp) * np.where(split, 1.0, wave_factor(ctas, sms)), fwd)
    width = np.where(backend == "efficient", _efficient_forward_width(c) / d, 1.0 + rv)
    return base, d, rv, fwd, wave_factor(bwd_ctas, sms), width


def executed_tile_flops(c: Calls, backend, executed, sms: int, per_score: bool = False,
                        score_passes: tuple[float, float] = (1.0, 2.0), geometry=False):
    """Compute-time FLOPs (float64): for fused backends, tile-padded FLOPs times the wave factor; forward and
    backward apart (backward 0 in forward mode). math and eager: `executed` (`time_terms` prices their
    op chain instead: `chain_terms`).
    per_score: the score elements the fused kernel's softmax touches instead (exp, max, scale: forward once,
    backward twice: the recomputed exp and dS), with the same padding and waves; 0 for math and eager.
    score_passes: the (forward, backward) passes per score element counted with per_score.
    geometry: `tile_geometry(c, backend, sms)` where the caller has it already."""
    executed = np.asarray(executed, dtype=np.float64)
    if geometry is False:
        geometry = tile_geometry(c, backend, sms)
    if geometry is None:  # one backend, not fused
        shape = np.broadcast(executed, *(getattr(c, f) for f in c.__dataclass_fields__)).shape
        return np.broadcast_to(np.float64(0.0) if per_score else executed, shape).copy()
    base, d, rv, fwd_wave, bwd_wave, width = geometry
    # per q/k-width score element: forward 2·(Dq + Dv), backward 2·(3·Dq + 2·Dv) at the executed widths (4 and 10
    # where v is as wide as q and k)
    kf, kb = (score_passes[0] / d, score_passes[1] / d) if per_score else (2.0 * width, 6.0 + 4.0 * rv)
    fwd = kf * base * fwd_wave
    bwd = np.where(c.grad, kb * base * bwd_wave, 0.0)
    fused = np.isin(backend, registry.FUSED)
    return np.where(fused, fwd + bwd, 0.0 if per_score else executed)


def hbm_bytes(c: Calls, backend):
    """Bytes a fused kernel moves through HBM: q, k, v and out (≈3× that for backward), plus an attn_mask: a bool
    mask's conversion to the input dtype (read 1 B, write es per element of (B, 1, L, S)) and the bias read once
    per query head (again in backward). math and eager: their op chain's bytes instead (`chain_terms`)."""
    qo = c.B * c.Hq * c.L * (c.D + c.Dv) * c.es  # q at Dq, out at Dv
    kv = c.B * c.Hk * c.S * (c.D + c.Dv) * c.es  # k at Dq, v at Dv
    p = c.B * c.Hq * c.L * c.S
    ls = c.B * c.L * c.S
    masked = (c.mask_bool | c.mask_float) & (backend != "flex")  # flex reads its BlockMask, not a dense mask
    fwd = qo + kv + np.where(masked, p * c.es, 0) + np.where(c.mask_bool, ls * (1 + c.es), 0)
    bwd = 3.0 * (qo + kv) + np.where(masked, p * c.es, 0)
    return fwd + np.where(c.grad, bwd, 0.0)


GEMM_TILE = 64  # rows and columns of a cuBLAS GEMM's output tile (CTA) that the chain's bmm are priced at


def gemm_executed_flops(shape, sms: int):
    """FLOPs a batched GEMM (batch, m, n, k) executes: m and n padded to the output tile (a GEMV, m or n of 1, is
    not padded: cuBLAS runs a GEMV kernel), times the wave factor of batch·ceil(m/64)·ceil(n/64) CTAs on `sms`
    SMs: a (2 × S)·(S × 40) product of 16 heads is 16 CTAs, each running the whole S-long reduction on one SM."""
    batch, m, n, k = shape
    m, n = (np.where(x > 1, round_up(np.asarray(x, dtype=np.int64), GEMM_TILE), x).astype(np.float64)
            for x in (m, n))
    ctas = batch * cdiv(m, GEMM_TILE) * cdiv(n, GEMM_TILE)
    return 2 * batch * m * n * k * np.where(batch > 0, wave_factor(ctas, sms), 0.0)


def gemm_roofline_ms(op: op_chain.Op, fp32, gpu: GPU):
    """A bmm's roofline in ms: its FLOPs at the executed tile padding and waves (`gemm_executed_flops`) over the peak
    of its precision (fp32: math's upcast inputs, eager's fp32 ones) or its operand + output bytes over HBM
    bandwidth, whichever is longer (a GEMV-shaped bmm of a short query over long keys costs its bytes)."""
    peak = np.where(fp32, gpu.peak_flops_per_s["float32"], gpu.peak_flops_per_s["bfloat16"]) / 1e3
    return np.maximum(gemm_executed_flops(op.gemm, gpu.sm_count) / peak, op.bytes / (gpu.hbm_bytes_per_s / 1e3))


def gemm_ms(op: op_chain.Op, c: Calls, fp32, gpu: GPU):
    """A bmm's time in ms: its roofline at the share its role's cuBLAS kernels reach (op_chain.GEMM_ROOFLINE_SHARE,
    by op_chain.gemm_class), and at least the gemmSN kernel's walk over the keys where that kernel runs
    (op_chain.runs_gemm_sn)."""
    kind = op_chain.gemm_class(c, fp32)
    share = np.select([kind == k for k in op_chain.GEMM_ROOFLINE_SHARE],
                      [v[op.cls] for v in op_chain.GEMM_ROOFLINE_SHARE.values()])
    t = gemm_roofline_ms(op, fp32, gpu) / share
    return np.where(op_chain.runs_gemm_sn(op, c, fp32), np.maximum(t, c.S * op_chain.GEMM_SN_US_PER_K / 1e3), t)


def elementwise_bytes_per_ms(op: op_chain.Op, c: Calls, gpu: GPU):
    """The bytes a millisecond `op`'s kernels move on `gpu`. Its family's share (op_chain.KERNEL_CLASS_BW_SHARE) was
    measured on the GPU op_chain.SHARES_MEASURED_ON: a family below the top share is bound by its SMs (instructions,
    latency), not by HBM, so it keeps that GPU's bytes a second scaled by SM throughput (the fp32 peak: SMs x clock);
    no family moves more than the top measured share of the GPU's own HBM bandwidth. On the H100 (3.35 TB/s, the
    H200's SMs and clock) the dtype casts then run as on the H200 and the vectorized passes at 0.896 x 3.35 TB/s."""
    ref = get_gpu(op_chain.SHARES_MEASURED_ON)
    share = op_chain.bw_share(op, c)
    sm_bound = share * ref.hbm_bytes_per_s * gpu.peak_flops_per_s["float32"] / ref.peak_flops_per_s["float32"]
    return np.minimum(sm_bound, op_chain.TOP_BW_SHARE * gpu.hbm_bytes_per_s) / 1e3


def chain_terms(c: Calls, backend, gpu: GPU):
    """math's and eager's op chains (estimator/call/op_chain.py) priced kernel by kernel, in ms: (GEMMs, elementwise
    bytes, dropout bytes). Each GEMM (bmm) at `gemm_ms`; every other kernel at its bytes over the rate its kernel
    family reaches (`elementwise_bytes_per_ms`). math's GEMMs run at the fp32 peak (it
    upcasts 16-bit inputs), eager's at its input dtype's. 0 for other backends."""
    backend = np.asarray(backend)
    out = [np.float64(0.0)] * 3
    for name in registry.OP_CHAIN:
        sel = backend == name
        if not np.any(sel):
            continue
        fp32 = np.asarray(c.fp32 | (name == "math"))
        gemm = ew = drop = 0.0
        for op in op_chain.chain_ops(c, name):
            if op.kind == "gemm":
                gemm = gemm + gemm_ms(op, c, fp32, gpu)
            elif op.kind == "dropout":
                drop = drop + op.bytes / elementwise_bytes_per_ms(op, c, gpu)
            else:
                ew = ew + op.bytes / elementwise_bytes_per_ms(op, c, gpu)
        new = (gemm, ew, drop)
        out = [np.where(sel, n, o) for n, o in zip(new, out, strict=True)]
    return out


def time_terms(c: Calls, backend, executed, gpu: GPU):
    """The model's GPU terms in ms at the naive rates, stacked last (FIT_FACTORS' first ten entries divide them):
    compute of unmasked calls with 16-bit inputs, the same with fp32 inputs (each path's fp32 kernels reach a
    different share of the fp32 peak than its 16-bit kernels of theirs), compute of masked calls on
    cuDNN/efficient, memory, exp, dropout, GEMMs (math and eager: `chain_terms`), compute of unmasked 16-bit calls
    with head_dim > 128 on a fused backend, compute of calls whose query is shorter than the query tile, and the
    compute past POWER_CAP_AFTER_MS (the power-capped stretch of a long call)."""
    backend = np.asarray(backend)
    peak = np.where(c.fp32 | (backend == "math"), gpu.peak_flops_per_s["float32"], gpu.peak_flops_per_s["bfloat16"])
    geometry = tile_geometry(c, backend, gpu.sm_count)
    comp = executed_tile_flops(c, backend, executed, gpu.sm_count, geometry=geometry) / peak * 1e3
    masked = (c.mask_bool | c.mask_float) & np.isin(backend, ("efficient", "cudnn"))
    mem = hbm_bytes(c, backend) / gpu.hbm_bytes_per_s * 1e3
    # the softmax's exp runs on the SFUs at ~1/256 of the 16-bit tensor-core rate (H100: 3.9 vs 989 TFLOPs, Shah et
    # al. 2024, FlashAttention-3 §3.2): per score element, independent of head_dim, so small head_dims are exp-bound
    exp_rate = gpu.peak_flops_per_s["bfloat16"] / 256
    scores = executed_tile_flops(c, backend, executed, gpu.sm_count, per_score=True,
                                 geometry=geometry) / exp_rate * 1e3
    # dropout: fused kernels draw a Philox number per executed score element (forward, and again in backward to
    # rebuild the kept set), integer work beside the exp; math and eager run native_dropout over the score matrix
    rng = executed_tile_flops(c, backend, executed, gpu.sm_count, per_score=True, score_passes=(1.0, 1.0),
                              geometry=geometry) / exp_rate
    drop = np.where(c.has_dropout, rng * 1e3, 0.0)
    # a masked call on the efficient kernel runs its unmasked kernel's MMAs (the branches below) and adds a bias tile
    # per score tile: its masked term is that addition, so a mask never makes it cheaper. cuDNN's masked call runs
    # another kernel (its bias kernel's 64-row tiles, cta_floor.CUDNN_FWD_QUERY_ROWS): the masked term is its whole
    # compute
    apart = masked & np.isin(backend, MASK_KERNEL_APART)
    # 16-bit kernels for head_dim > 128 run smaller tiles (FA2 and cuDNN) or keep dK/dV in global memory (the
    # efficient backward's kNeedsAccumGradK/V): their own rate
    wide = ~apart & ~c.fp32 & (c.D > 128)
    # a query shorter than the kernel's query tile (decode-shaped calls): the padded tile's MMAs are issued, but the
    # call's time is its walk over the keys, not tensor-core work at the prefill's rate: its own factor
    short = ~apart & (c.L < _query_tile(c, backend))
    plain = ~(apart | c.fp32 | wide | short)
    masked_wide = np.where(apart & ~c.fp32 & (c.D > 128), MASKED_WIDE_SLOWDOWN, 1.0)
    fused = [np.where(plain, comp, 0.0), np.where(~apart & c.fp32 & ~short, comp, 0.0),
             np.where(masked, comp * masked_wide, 0.0), mem, scores, drop]
    gemm, ew, cdrop = chain_terms(c, backend, gpu)
    chain = np.isin(backend, registry.OP_CHAIN)
    # the board's power limit: tensor-core work sustained past POWER_CAP_AFTER_MS runs at the capped clock
    sustained = np.maximum(np.where(chain | short, 0.0, comp) - POWER_CAP_AFTER_MS, 0.0)
    terms = [np.where(chain, x, f) for x, f in zip((0.0, 0.0, 0.0, ew, 0.0, cdrop), fused, strict=True)] + \
        [np.where(chain, gemm, 0.0), np.where(chain | ~wide | short, 0.0, comp),
         np.where(chain | ~short, 0.0, comp), sustained]
    return np.stack(np.broadcast_arrays(*terms), axis=-1)


def host_kernels(c: Calls, backend):
    """Kernels whose dispatch the host pays for before the GPU can finish: math's and eager's op chain; 0 for the
    fused backends (their one to few launches are in the overhead)."""
    return op_chain.kernel_count(c, backend)


def combine(gpu_ms, host_ms, serial_ms, overhead_ms, softmax_ms=0.0):
    """A call's time: the longest of the host's dispatch of its kernels (the GPU runs behind the host; a call of
    short kernels waits for their launches), the GPU's work, a serialized chain inside a kernel (the
    memory-efficient backward's dQ locks) and a softmax pipeline that runs beside the MMAs (`OVERLAPPED_SOFTMAX`),
    plus the fixed overhead (first launch, sync)."""
    return np.maximum(np.maximum(np.maximum(gpu_ms, host_ms), serial_ms), softmax_ms) + overhead_ms


def overlapped_softmax(c: Calls, backend):
    """(group, branch): the calls of an `OVERLAPPED_SOFTMAX` (backend, grad), whose exp is not a term of the GPU
    work's sum, and those of them whose softmax is a pipeline of its own in `combine` (a query of at least the
    kernel's tile; a shorter one's walk over the keys bounds it: time_terms' short-query compute, and its padded
    rows' softmax is not what it waits for)."""
    backend = np.asarray(backend)
    group = np.zeros(np.broadcast(backend, c.grad).shape, dtype=bool)
    for name, grad in OVERLAPPED_SOFTMAX:
        group = group | ((backend == name) & (c.grad == grad))
    return group, group & (c.L >= _query_tile(c, backend))


def time_ms(c: Calls, backend, executed, gpu: GPU):
    """Predicted milliseconds for the call on `gpu` (vectorized over calls)."""
    if np.ndim(backend) == 0 and str(backend) == "flex":
        return flex_time.time_ms(c, gpu)  # flex's Triton kernels, priced by their configs
    terms = time_terms(c, backend, executed, gpu)
    shape = np.shape(terms)[:-1]
    fit = np.ones(shape + (np.shape(terms)[-1],), dtype=np.float64)
    host = np.zeros(shape, dtype=np.float64)
    step = np.zeros(shape, dtype=np.float64)
    overhead = np.zeros(shape, dtype=np.float64)
    for (name, grad), (*factors, per_kernel, per_step, oh) in FIT_FACTORS.items():
        if not np.any(backend == name):  # a backend none of the calls is on changes nothing
            continue
        sel = (backend == name) & (c.grad == grad)
        fit = np.where(sel[..., None], np.array(factors), fit)
        host = np.where(sel, per_kernel, host)
        step = np.where(sel, per_step, step)
        overhead = np.where(sel, oh, overhead)
    work = terms / fit
    group, branch = overlapped_softmax(c, backend)
    softmax = np.where(branch, work[..., EXP_TERM], 0.0)
    summed = np.sum(work, axis=-1) - np.where(group, work[..., EXP_TERM], 0.0)
    modelled = combine(summed, host * host_kernels(c, backend), step * dq_chain.dq_lock_steps(c, backend, gpu.sm_count),
                       overhead, softmax)
    floor = cta_floor.floor_ms(c, backend, gpu.sm_count)
    out = np.where(floor > 0, np.maximum(modelled, floor + CTA_FLOOR_EVENT_MS), modelled)
    if np.any(backend == "flex"):  # a column of backends: flex's rows as above
        out = np.where(backend == "flex", flex_time.time_ms(c, gpu), out)
    return out
