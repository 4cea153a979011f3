"""The memory-efficient backward's serialized dQ accumulation: with a short query over long keys, the key-split CTAs
of one (batch, head) take turns adding their dQ shares to the same tile under a lock, so the call is a chain of lock
hand-offs rather than tensor-core work (timing.combine's serial branch; its ms per step is fitted with the rest of
FIT_FACTORS, validation/timing/fit_time.py).
"""

from __future__ import annotations

import numpy as np

from estimator.call.shapes import Calls

# the efficient backward's dQ lock step per kernel (fp32, `efficient_kernel_class`) over the 16-bit 64x64 kernel's,
# measured (validation/data/h200_eff_decode_probe.csv, `python -m validation.timing.dq_steps`)
DQ_STEP_WEIGHT = {(False, 0): 1.0, (False, 1): 2.47, (False, 2): 0.35, (True, 0): 1.6, (True, 1): 3.02, (True, 2): 3.32}


def efficient_kernel_class(c: Calls):
    """The memory-efficient kernels' head_dim class, forward and backward alike: their kMaxK of 64, 128 or more over
    max(head_dim, v's head_dim) (mem_eff_attention kernel_forward.h / kernel_backward.h): 0 to 64, 1 to 128, 2 above
    (the keys of DQ_STEP_WEIGHT and of cta_floor's WALK_BLOCK_US)."""
    d = np.maximum(c.D, c.Dv)
    return np.where(d <= 64, 0, np.where(d <= 128, 1, 2))


def dq_chain_steps(c: Calls, sms: int):
    """(unweighted lock steps, each step's DQ_STEP_WEIGHT) of the memory-efficient backward: the keys split over
    ceil(S/kBlockSizeJ) CTAs per (batch, head) (attention_backward.cu num_splits_key; 128 keys a CTA for the 16-bit
    *_128x128_k128 kernel of head_dim 65-128, else 64), whose dQ shares for one query block add in turn under a lock
    (xformers kernel_backward.h, GradQTempStorage): a short query over long keys is a chain of B·Hq·splits lock
    hand-offs, about sms/splits chains side by side where there are fewer splits than SMs."""
    cls = efficient_kernel_class(c)
    splits = np.ceil(c.S / np.where(~c.fp32 & (cls == 1), 128, 64))
    weight = np.select([(c.fp32 == f) & (cls == k) for f, k in DQ_STEP_WEIGHT], list(DQ_STEP_WEIGHT.values()))
    return c.B * c.Hq * splits * np.minimum(1.0, splits / sms), weight


def dq_lock_steps(c: Calls, backend, sms: int):
    """The efficient backward's dQ lock steps (`dq_chain_steps`) in 16-bit 64x64-kernel steps; 0 elsewhere."""
    steps, weight = dq_chain_steps(c, sms)
    return np.where((np.asarray(backend) == "efficient") & c.grad, steps * weight, 0.0)
