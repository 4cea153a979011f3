"""Per-CTA latency floors: calls whose time is how long one CTA takes, not how much work the GPU does.

* cuDNN's masked Hopper forward (cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64: 64 query
  rows a CTA) costs a CTA at least CUDNN_FWD_CTA_MS whatever its work: a call of many tiny attention problems (Swin's
  7x7 windows: B·windows·heads problems of 49 queries and 49 keys, one CTA each) is a chain of ceil(CTAs / SMs) waves
  of that latency, not its FLOPs. 7.0 us is Swin-B's 24 window calls at 2240 px (198,400 CTAs, 10.59 ms of cuDNN
  kernel in torch.profiler); it gives 2.64 ms for the 1120 px image (2.73 ms measured;
  validation/data/h200_vision_parts_probe.jsonl). No forward of the call fit sets with >= 1,000 CTAs ran under it.
* The memory-efficient (CUTLASS) forward has no split over the keys: each CTA (kQueriesPerBlock query rows of one
  batch and head) walks every key block of its row in turn (mem_eff_attention/kernel_forward.h, the loop over
  iter_key_start). A decode-shaped call of a few (batch, head) pairs is one CTA's walk: ceil(keys / kKeysPerBlock)
  iterations of a latency the SM's tensor cores do not set. Measured per kernel in
  validation/data/h200_eff_decode_probe.csv (`python -m validation.timing.key_walk`): 16-bit 4.1-4.5 us a 128-key block
  on the 64x128 kernel whether 4 or 128 CTAs run and whether 1 or 64 queries; fp32 about 3x that. The walk bounds the
  call from below on every GPU; its latencies are sm90's (H200; an H100 held-out call, random71-0000, ran 2.46 ms
  against 2.46 ms of walk), used as they are elsewhere.
"""

from __future__ import annotations

import numpy as np

from estimator.call.dq_chain import efficient_kernel_class
from estimator.call.shapes import Calls
from estimator.units import cdiv

CUDNN_FWD_CTA_MS = 0.007
CUDNN_FWD_QUERY_ROWS = 64
# the floor is kernel time; a timed call adds one launch between its CUDA events (~10 us). The floor bounds the whole
# call from below rather than adding to the fitted terms, whose overhead_ms already holds part of small calls' latency
CTA_FLOOR_EVENT_MS = 0.01

# the efficient forward's kernels per `dq_chain.efficient_kernel_class`: 0 fmha_cutlassF_*_64x64_rf,
# 1 *_64x128_rf, 2 *_32x128_gmem; their kKeysPerBlock
WALK_KEY_BLOCK = {0: 64, 1: 128, 2: 128}
# microseconds one CTA spends on one key block, per (fp32, kernel class), unmasked, as (intercept, per head_dim
# element): a block loads head_dim-wide key and value rows; and what a bias tile adds per 64 keys, per fp32
# (`python -m validation.timing.key_walk` prints both from the probe)
WALK_BLOCK_US = {(False, 0): (2.275, 0.0055), (False, 1): (3.821, 0.0039), (False, 2): (4.702, 0.007),
                 (True, 0): (5.422, 0.0246), (True, 1): (8.726, 0.0283), (True, 2): (14.2, 0.0263)}
WALK_MASK_US_PER_64 = {False: 0.51, True: 0.39}


def efficient_walk_ms(c: Calls, backend):
    """One efficient-forward CTA's walk over its keys (all of them; with is_causal, SDPA's top-left alignment, at most
    the query length), in ms; 0 for other backends and for training calls (whose backward is priced whole)."""
    cls = efficient_kernel_class(c)
    block = np.select([cls == k for k in WALK_KEY_BLOCK], list(WALK_KEY_BLOCK.values()))
    blocks = cdiv(np.where(c.causal, np.minimum(c.S, c.L), c.S), block)
    pick = [(c.fp32 == f) & (cls == k) for f, k in WALK_BLOCK_US]
    us = np.select(pick, [a for a, _ in WALK_BLOCK_US.values()]) \
        + np.select(pick, [b for _, b in WALK_BLOCK_US.values()]) * np.maximum(c.D, c.Dv)
    mask_us = np.where(c.fp32, WALK_MASK_US_PER_64[True], WALK_MASK_US_PER_64[False]) * block / 64
    us = us + np.where(c.mask_bool | c.mask_float, mask_us, 0.0)
    return np.where((np.asarray(backend) == "efficient") & ~c.grad, blocks * us / 1e3, 0.0)


def cudnn_masked_ms(c: Calls, backend, sms: int):
    """The masked cuDNN forward's waves of CUDNN_FWD_CTA_MS; 0 for other backends, for training calls (not measured
    there) and for unmasked calls (their CTAs ran 2.3-3.1 us a wave in validation/data/h200_window_calls_heldout.csv:
    the 7 us is the bias path's)."""
    ctas = c.B * c.Hq * cdiv(c.L, CUDNN_FWD_QUERY_ROWS)
    waves = cdiv(ctas, sms).astype(np.float64) if hasattr(ctas, "astype") else float(cdiv(ctas, sms))
    masked = c.mask_bool | c.mask_float
    return np.where((np.asarray(backend) == "cudnn") & ~c.grad & masked, waves * CUDNN_FWD_CTA_MS, 0.0)


def floor_ms(c: Calls, backend, sms: int):
    """The call's per-CTA floor in kernel ms (0 where none applies); `timing.time_ms` bounds the call by it plus
    CTA_FLOOR_EVENT_MS."""
    return np.maximum(cudnn_masked_ms(c, backend, sms), efficient_walk_ms(c, backend))
