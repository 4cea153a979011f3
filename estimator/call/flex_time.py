"""flex_attention's time: the Triton kernels TorchInductor compiles for it, priced kernel by kernel.

flex_attention under torch.compile lowers to Triton templates whose tile sizes come from a table keyed by the
GPU's compute capability, the dtype and the exact head_dim (torch 2.11, torch/_inductor/template_heuristics/
triton.py: CUDAConfigHeuristic.get_flex_attn_fwd_configs / get_flex_attn_bwd_configs / get_flex_decode_configs;
the rules as installed on the H200 are validation/data/h200_flex_config_rules.txt):

* forward (torch/_inductor/kernel/flex/flex_attention.py): one CTA per (batch, query head, BLOCK_M query rows),
  walking the key blocks its BlockMask keeps in BLOCK_N steps; q·kᵀ and p·v as `tl.dot` at the head_dim rounded
  up to a power of two (common.py set_head_dim_values: QK_HEAD_DIM_ROUNDED), so head_dim 80 or 96 runs the
  128-wide loops and 160 or 192 the 256-wide ones. On sm90, head_dim 64, 128 and 256 have table entries; every
  other head_dim takes the generic (64, 64) config, which at a rounded head_dim of 128 in fp32 spills registers
  (0.8 TFLOP/s measured against 5.7 for head_dim 128's own (32, 64) config).
* backward: a small preprocess (delta = Σ out·dO) and one template kernel whose programs compute either dQ
  (q·kᵀ, dO·vᵀ, dS·k: three dots) or dK and dV (k·qᵀ, pᵀ·dO, v·dOᵀ, dSᵀ·q: four): 7 dots of 2·d FLOPs per
  score, where FlashAttention-2 needs 5 (it keeps P between its loops). fp32 backward uses 16x16 blocks on every
  GPU; 16-bit on sm90 (64, 64) below head_dim 64, (64, 128) to 128 and (64, 64) above, where it spills (0.21 of
  the 16-bit peak against 0.75 at 128).
* decoding (flex_decoding.py `_use_flex_decoding`): a query shorter than 128 rows with a power-of-two GQA group
  runs a split-KV kernel instead: B·Hkv·SPLIT_KV CTAs of 2 warps, SPLIT_KV = max(2·(SMs // (B·Hkv)), 1)
  (`get_split_k`), with BLOCK_M = max(next_pow2(L·G), 16) rows (the query heads of a group packed together), then
  reductions over the splits. Measured, every CTA's time follows all S/64 key blocks, not its split's share
  (`decode_geometry`), at a latency per block set by the tile's registers (`decode_block_us`): 2-5 us a block
  while the tile fits a 2-warp CTA's registers, 90-560 us once it spills (bf16 at 128 query rows of head_dim 128;
  fp32 from 16 rows of 128 or 32 rows of 64).

The rates each compiled config reaches are measured per kernel with torch.profiler on the H200
(validation/data/h200_flex_probe.csv and h200_flex_probe2.csv; `python -m validation.timing.flex_kernels`
reproduces every constant here).
Other GPUs are priced with the sm90 configs and the H200's rates at their own peaks: torch picks other configs
there (its A100 and sm100 tables), which were not measured.
"""

from __future__ import annotations

import numpy as np

from estimator.call.flops import block_fraction
from estimator.call.shapes import Calls
from estimator.hardware import GPU
from estimator.units import cdiv

SPARSE_BLOCK = 128  # torch's _DEFAULT_SPARSE_BLOCK_SIZE: the BlockMask's granularity
DECODE_BLOCK_N = 64  # FlexDecodeConfig(64, 1, 2) on sm90 (the capability branch's else overrides its (64, 3, 2))
DECODE_MAX_QUERY = 128  # `_use_flex_decoding`: q_len < 128
DECODE_CTAS_PER_SM = 2  # the decoding CTAs the measured calls ran at once per SM (2·SMs//(B·Hkv) splits each)
# (BLOCK_M, BLOCK_N) of the forward on sm90 per (fp32, head_dim), where torch's table (h100_default_flex_config)
# has an entry; else (64, 64)
FWD_TABLE_SM90 = {(True, 64): (128, 32), (True, 128): (32, 64), (True, 256): (32, 32),
                  (False, 64): (128, 128), (False, 128): (128, 64), (False, 256): (64, 32)}


def _next_pow2(x, least: int = 16):
    """The next power of two of x, at least `least` (tl.arange needs a power of two, tl.dot at least 16)."""
    return np.maximum(2 ** np.ceil(np.log2(np.maximum(x, 1))), least).astype(np.int64)


def rounded_head_dim(D):
    """QK_HEAD_DIM_ROUNDED: the head_dim's next power of two, at least 16."""
    return _next_pow2(D)


def forward_config(c: Calls):
    """(BLOCK_M, BLOCK_N) of the forward kernel per call (sm90): the table entry of (dtype, exact head_dim),
    (64, 64) otherwise up to head_dim 256, and (32, 16) fp32 / (64, 32) 16-bit above it."""
    table = FWD_TABLE_SM90
    bm = np.where(c.D > 256, np.where(c.fp32, 32, 64), 64)
    bn = np.where(c.D > 256, np.where(c.fp32, 16, 32), 64)
    for (fp32, d), (m, n) in table.items():
        hit = (c.fp32 == fp32) & (c.D == d)
        bm, bn = np.where(hit, m, bm), np.where(hit, n, bn)
    return bm, bn


def backward_config(c: Calls):
    """(BLOCK_M1, BLOCK_N1) of the backward's dK/dV programs (its dQ programs use the transpose), sm90: fp32 and
    head_dim > 256 (16, 16); 16-bit (64, 64) below 64, (64, 128) to 128, (64, 64) above (2 stages, not 3)."""
    bn = np.where(c.D < 64, 64, np.where(c.D <= 128, 128, 64))
    small = c.fp32 | (c.D > 256)
    return np.where(small, 16, 64), np.where(small, 16, bn)


def decodes(c: Calls):
    """Calls flex runs with its split-KV decoding kernel: a query shorter than 128 rows and a power-of-two GQA
    group (the BlockMask is built for one head, as the validation runner and a mask_mod-only call build it)."""
    group = c.Hq // np.maximum(c.Hk, 1)
    return (c.L < DECODE_MAX_QUERY) & (c.L > 0) & ((group & (group - 1)) == 0)


def decode_geometry(c: Calls, sms: int):
    """(BLOCK_M, SPLIT_KV, key blocks each CTA walks, CTAs) of the decoding kernel. Each CTA walks all the kept
    64-key blocks, whatever the split: measured, the kernel's time follows S/64, not S/(64·SPLIT_KV) (fp32 at
    BLOCK_M 16 and head_dim 128: 132-136 us a block at 8192 keys and 16 splits and at 65,536 keys and 4 splits;
    bf16 at 16 rows of 128: 2.3-2.6 us a block at 16 and 2 splits), and the split reduction then merges equal
    partial results. So the split buys nothing on this torch."""
    group = c.Hq // np.maximum(c.Hk, 1)
    block_m = _next_pow2(c.L * group)
    bh = np.maximum(c.B * c.Hk, 1)
    split = np.maximum(sms // bh * 2, 1)
    kept = cdiv(c.S, SPARSE_BLOCK) * SPARSE_BLOCK * block_fraction(c)
    return block_m, split, np.ceil(kept / DECODE_BLOCK_N), bh * split


def kernel_work(c: Calls):
    """Per call, what the forward and backward template kernels execute: (score elements of the forward, forward
    dot FLOPs, backward dot FLOPs), over the query tiles and the kept 128-key blocks of the BlockMask (a partial
    block is computed whole, its mask_mod applied per element), at the rounded head_dims. The backward's dQ
    programs pad the query to BLOCK_M2 (= BLOCK_N1) rows, its dK/dV programs to BLOCK_M1. 0 backward in forward
    mode; and the backward's (dQ, dK/dV) parts, for `backward_schedule`."""
    bm, _ = forward_config(c)
    d, dv = rounded_head_dim(c.D), rounded_head_dim(c.Dv)
    sp = cdiv(c.S, SPARSE_BLOCK) * SPARSE_BLOCK
    frac = block_fraction(c)
    scores = c.B * c.Hq * (cdiv(c.L, bm) * bm).astype(np.float64) * sp * frac
    fwd = 2.0 * scores * (d + dv)
    dq, dkdv = backward_parts(c)
    return scores, fwd, np.where(c.grad, dq + dkdv, 0.0), (dq, dkdv)


def backward_parts(c: Calls):
    """(dQ programs' dot FLOPs, dK/dV programs'): q·kᵀ, dO·vᵀ, dS·k over BLOCK_M2-row query tiles; k·qᵀ, pᵀ·dO,
    v·dOᵀ, dSᵀ·q over BLOCK_M1-row ones."""
    m1, n1 = backward_config(c)
    d, dv = rounded_head_dim(c.D), rounded_head_dim(c.Dv)
    keys = (cdiv(c.S, SPARSE_BLOCK) * SPARSE_BLOCK).astype(np.float64) * block_fraction(c)
    heads = c.B * c.Hq
    dq = heads * (cdiv(c.L, n1) * n1) * keys * 2.0 * (2 * d + dv)
    dkdv = heads * (cdiv(c.L, m1) * m1) * keys * 2.0 * (2 * d + 2 * dv)
    return dq, dkdv


def backward_schedule(c: Calls, sms: int, parts=None):
    """How much longer than its work over all SMs the backward runs: at least as long as its longest program,
    which runs on one SM at 1/SMs of the kernel's rate. A dQ program (B·Hq·ceil(L/BLOCK_M2) of them) walks all
    the keys; a dK/dV program (B·Hkv·ceil(S/BLOCK_N1)) walks every query of its GQA group, so a short query over
    many keys, or a large group over few keys, leaves most SMs idle. parts: `backward_parts(c)` where the caller
    has it."""
    _, n1 = backward_config(c)
    dq, dkdv = backward_parts(c) if parts is None else parts
    total = np.maximum(dq + dkdv, 1.0)
    dq_ctas = np.maximum(c.B * c.Hq * cdiv(c.L, n1), 1)
    kv_ctas = np.maximum(c.B * c.Hk * cdiv(c.S, n1), 1)
    return np.maximum(1.0, np.maximum(dq / dq_ctas, dkdv / kv_ctas) * sms / total)


def forward_schedule(c: Calls, sms: int):
    """How much longer than its work over all SMs the forward runs: its grid walks the query blocks of one head
    in order (program_id 0), so under a causal mask every head's last CTA is its longest (all its key blocks) and
    the grid's very last CTA, the longest of all, starts when the others are nearly done: 1 + (that CTA's work)
    / (the work per SM). Without causality the CTAs are equal: the last wave's quantisation, ceil(n/SMs)·SMs/n.
    The backward's causal programs showed no such tail (the probe's causal backwards ran at their non-causal
    rate); its bound is its longest program (`backward_schedule`)."""
    bm, _ = forward_config(c)
    tiles = cdiv(c.L, bm)
    ctas = np.maximum(c.B * c.Hq * tiles, 1).astype(np.float64)
    triangle = (c.causal | c.scausal) & (c.L == c.S) & (c.W == 0) & (c.docs <= 1)
    # per CTA, in key blocks: the longest is the last query tile's (all S/128 blocks); the mean is the call's kept
    # blocks over its CTAs
    longest = cdiv(c.S, SPARSE_BLOCK).astype(np.float64)
    mean = cdiv(c.S, SPARSE_BLOCK) * block_fraction(c)
    tail = 1.0 + longest / (ctas * mean / sms)
    wave = cdiv(ctas, sms) * sms / ctas
    return np.where(triangle, np.maximum(tail, wave), wave)


# kernel classes: the compiled config (and, for fp32's generic config at a rounded head_dim of 128 or more, its
# register spills), each with its measured share of the dtype's peak (FWD_SHARE, BWD_SHARE)
FWD_CLASSES = ("16-bit 64x64", "16-bit 128x128", "16-bit 128x64", "16-bit 64x32",
               "fp32 64x64", "fp32 64x64 spilled", "fp32 128x32", "fp32 32x64", "fp32 32x32", "fp32 32-row unaligned")
BWD_CLASSES = ("16-bit 64x64", "16-bit 64x128", "16-bit 64x64 wide", "fp32 16x16")


def divisible(c: Calls):
    """IS_DIVISIBLE of the templates (flex_attention.py): both lengths multiples of 128. Otherwise every load is
    boundary-checked, which the fp32 32-row configs (head_dim 128 and 256) pay ~8x for (their registers spill)."""
    return (c.L % SPARSE_BLOCK == 0) & (c.S % SPARSE_BLOCK == 0)


def forward_class(c: Calls):
    """Index into FWD_CLASSES per call (fp32 above head_dim 256, (32, 16), is priced as 32x32)."""
    bm, bn = forward_config(c)
    wide = rounded_head_dim(c.D) >= 128
    fp32 = np.select([(bm == 32) & ~divisible(c), (bm == 128) & (bn == 32), (bm == 32) & (bn == 64), bm == 32, wide],
                     [9, 6, 7, 8, 5], 4)
    half = np.select([(bm == 128) & (bn == 128), (bm == 128) & (bn == 64), (bn == 32)], [1, 2, 3], 0)
    return np.where(c.fp32, fp32, half)


def backward_class(c: Calls):
    """Index into BWD_CLASSES per call (16-bit above head_dim 256 is priced as the wide 64x64)."""
    return np.where(c.fp32, 3, np.where(c.D < 64, 0, np.where(c.D <= 128, 1, 2)))


# measured shares of the dtype's peak per kernel class, and of the exp rate (1/256 of the 16-bit peak) per score
# element and pass (the softmax's exp, max and scaling beside the dots; the backward's two recomputed exps and
# dS): `python -m validation.timing.flex_kernels`, from validation/data/h200_flex_probe.csv and _probe2.csv
EXP_SHARE = {"fwd": 1.04, "bwd": 0.48}
FWD_SHARE = {"16-bit 128x128": 0.6187, "16-bit 128x64": 0.5725, "16-bit 64x32": 0.3844, "16-bit 64x64": 0.4923,
             "fp32 128x32": 0.184, "fp32 32-row unaligned": 0.0115, "fp32 32x32": 0.0727, "fp32 32x64": 0.0843,
             "fp32 64x64": 0.2763, "fp32 64x64 spilled": 0.0125}
BWD_SHARE = {"16-bit 64x128": 0.7477, "16-bit 64x64": 0.9106, "16-bit 64x64 wide": 0.2115, "fp32 16x16": 0.0841}
# the decoding kernel's time per 64-key block, a latency (its CTAs of 2 warps run side by side) set by the
# registers its tile needs (`decode_tile_bytes`) against a 2-warp CTA's register file (64 threads x 255 x 4 B =
# 65,280 B): below, microseconds = a + b·KB; above, the tile spills to local memory and the measured time grows
# as c·KB (as if each block re-read the spilled tile). (a, b, c) per precision and the measured boundary, from
# both flex probes (`python -m validation.timing.flex_kernels`): 16-bit tiles of 64 KB ran unspilled (3.8-5.0 us
# a block) and of 96 KB spilled (120 us); fp32 tiles of 44 KB ran unspilled (6 us) and of 56 KB spilled (89 us)
DECODE_BASE_US = {False: (1.6, 0.05), True: (0.14, 0.132)}
DECODE_SPILL_US_PER_KB = {False: 1.35, True: 1.58}
DECODE_SPILLS_ABOVE_KB = {False: 80.0, True: 50.0}
# the compiled call's host work per (backward, BlockMask built by the call: no causal, window or document mask):
# HOST_MS, the Python of the compiled backward (AOTAutograd's runtime wrappers, the autograd engine) while the GPU runs
# the kernels it has launched, so the call ends at the later of the two; OVERHEAD_MS on top (the first launch, the
# forward's Python, the sync). A small backward runs 0.8-1.2 ms whatever its kernels (20-60 us of them at 256-512
# tokens, held-out sets 6-11 and the flex call sets); a forward has no floor to speak of. That is host speed too (the
# H200 host ran a Python loop step in 32-58 ns between device calls). Fitted on the probes' call times and the flex
# call sets (`python -m validation.timing.flex_kernels`)
HOST_MS = {(False, False): 0.04, (False, True): 0.0, (True, False): 1.08, (True, True): 0.92}
OVERHEAD_MS = {(False, False): 0.11, (False, True): 0.23, (True, False): 0.27, (True, True): 0.43}


def decode_tile_bytes(c: Calls, block_m):
    """Registers the decoding tile needs per CTA: the fp32 accumulator (BLOCK_M x rounded head_dim) and scores
    (BLOCK_M x 64); fp32 also holds q and the 64-key k and v tiles (its dots run on the FMA units, which read
    both operands from registers; 16-bit wgmma reads them from shared memory)."""
    d = rounded_head_dim(c.D).astype(np.float64)
    tile = block_m * (4.0 * d + 4.0 * DECODE_BLOCK_N)
    return np.where(c.fp32, tile + block_m * 4.0 * d + 2 * DECODE_BLOCK_N * 4.0 * d, tile)


def decode_block_us(c: Calls, block_m):
    """Microseconds per 64-key block of the decoding kernel (DECODE_BASE_US, DECODE_SPILL_US_PER_KB)."""
    kb = decode_tile_bytes(c, block_m) / 1024.0
    a = np.where(c.fp32, DECODE_BASE_US[True][0], DECODE_BASE_US[False][0])
    b = np.where(c.fp32, DECODE_BASE_US[True][1], DECODE_BASE_US[False][1])
    spill = np.where(c.fp32, DECODE_SPILL_US_PER_KB[True], DECODE_SPILL_US_PER_KB[False])
    above = kb > np.where(c.fp32, DECODE_SPILLS_ABOVE_KB[True], DECODE_SPILLS_ABOVE_KB[False])
    return np.where(above, spill * kb, a + b * kb)


def own_mask(c: Calls):
    """Calls whose BlockMask flex_attention builds itself (none passed: no causal, window or document mask)."""
    return ~(c.causal | c.scausal) & (c.W == 0) & (c.docs <= 1)


def gpu_ms(c: Calls, gpu: GPU):
    """The call's GPU time in ms: forward template (or decoding kernel), backward template and preprocess."""
    peak = np.where(c.fp32, gpu.peak_flops_per_s["float32"], gpu.peak_flops_per_s["bfloat16"]) / 1e3
    exp_rate = gpu.peak_flops_per_s["bfloat16"] / 256 / 1e3
    scores, fwd, bwd, parts = kernel_work(c)
    fshare = np.array([FWD_SHARE[k] for k in FWD_CLASSES])[forward_class(c)]
    bshare = np.array([BWD_SHARE[k] for k in BWD_CLASSES])[backward_class(c)]
    schedule = forward_schedule(c, gpu.sm_count)
    prefill = (fwd / (peak * fshare) + scores / (exp_rate * EXP_SHARE["fwd"])) * schedule
    block_m, _, blocks, ctas = decode_geometry(c, gpu.sm_count)
    # the CTAs run side by side up to DECODE_CTAS_PER_SM a SM (the measured calls had at most 2·SMs); beyond,
    # they share the SMs
    waves = np.maximum(1.0, ctas / (DECODE_CTAS_PER_SM * gpu.sm_count))
    decoding = blocks * decode_block_us(c, block_m) * waves / 1e3
    backward = (bwd / (peak * bshare) + 2 * scores / (exp_rate * EXP_SHARE["bwd"])) * \
        backward_schedule(c, gpu.sm_count, parts)
    preprocess = 2.0 * c.B * c.Hq * c.L * c.Dv * c.es / (gpu.hbm_bytes_per_s / 1e3)
    return np.where(decodes(c), decoding, prefill) + np.where(c.grad, backward + preprocess + kv_pass_ms(c, gpu), 0.0)


def kv_pass_ms(c: Calls, gpu: GPU):
    """The backward's pass over k and v where its query is shorter than a dQ tile (BLOCK_N1 rows): each dK/dV
    program holds one query tile, so it is bound by the bytes it moves (its k and v block read, dK and dV written;
    the dQ programs read k and v once more), not by its dots; and the grid puts a (batch, kv head)'s dK/dV programs
    before its dQ programs (program_id 0: the key blocks first), so that pass runs before the dQ programs' walk over
    the keys rather than beside it. 0 for longer queries, whose dots bound their programs."""
    _, n1 = backward_config(c)
    kv = c.B * c.Hk * c.S * (c.D + c.Dv) * c.es
    return np.where(c.L < n1, 3.0 * kv / (gpu.hbm_bytes_per_s / 1e3), 0.0)


def time_ms(c: Calls, gpu: GPU):
    """Predicted milliseconds of a flex_attention call: the later of its GPU time and the compiled call's host work,
    plus its overhead (HOST_MS, OVERHEAD_MS)."""
    own = own_mask(c)
    sel = [(c.grad == g) & (own == m) for g, m in OVERHEAD_MS]
    host = np.select(sel, [HOST_MS[k] for k in OVERHEAD_MS])
    return np.maximum(gpu_ms(c, gpu), host) + np.select(sel, list(OVERHEAD_MS.values()))
