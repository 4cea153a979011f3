"""The one GPU-safety rule for running a call: its predicted need (inputs + peak extra) must leave a margin of
the free memory, need·(1 + margin_fraction) + margin_bytes ≤ free, and stay under an optional cap per call.

`python -m validation run` uses CLI_GUARD (its --force skips it); the app's Validate page uses APP_GUARD (at most
80 % of the free memory less 1 GiB, and never more than 64 GiB for one call). Pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.call.config import AttentionCall
from estimator.units import GIB, MIB


@dataclass(frozen=True, kw_only=True)
class MemoryGuard:
    margin_fraction: float = 0.10
    margin_bytes: int = 512 * MIB
    max_call_bytes: int | None = None  # None: no cap beyond the free memory

    def __post_init__(self) -> None:
        if self.margin_fraction < 0 or self.margin_bytes < 0:
            raise ValueError("margin_fraction, margin_bytes: must be >= 0")

    def allowance(self, free_bytes: int) -> float:
        """The largest need that passes in `free_bytes` (negative when even nothing would)."""
        allowed = (free_bytes - self.margin_bytes) / (1 + self.margin_fraction)
        return allowed if self.max_call_bytes is None else min(allowed, self.max_call_bytes)

    def blocks(self, need_bytes: int, free_bytes: int) -> bool:
        return need_bytes > self.allowance(free_bytes)


CLI_GUARD = MemoryGuard()
# 1.25·need + 1.25 GiB ≤ free is need ≤ 80 % of free less 1 GiB.
APP_GUARD = MemoryGuard(margin_fraction=0.25, margin_bytes=5 * GIB // 4, max_call_bytes=64 * GIB)
APP_GUARD_TEXT = "80% of free memory less 1 GiB, at most 64 GiB"


def input_bytes(call: AttentionCall) -> int:
    """Bytes of q, k, v, the mask and grad_out allocated before the baseline (contract §1 step 1)."""
    es = call.element_bits // 8
    B, Hq, Hk, L, S, D = call.batch, call.q_heads, call.kv_heads, call.q_len, call.kv_len, call.head_dim
    total = (B * Hq * L * D + 2 * B * Hk * S * D) * es
    if call.mask == "bool":
        total += B * L * S
    elif call.mask == "float":
        total += B * L * S * es
    if call.training:
        total += B * Hq * L * D * es
    return total


def mask_temporary_bytes(call: AttentionCall) -> int:
    """The fp32 `rand` temporary that make_inputs draws a bool mask from (4 bytes per mask element); it lives
    beside q, k, v and the bool mask while the inputs are made, so the inputs' own peak is inputs + this."""
    return 4 * call.batch * call.q_len * call.kv_len if call.mask == "bool" else 0


def fallback_peak_bound_bytes(call: AttentionCall) -> int:
    """A generous bound when the estimator has no figure: the math path's dense fp32 score matrices
    (≈4·P4 forward+backward per docs/sdpa-internals.md §1, doubled) plus 16 fp32 q-sized tensors."""
    P4 = call.batch * call.q_heads * call.q_len * call.kv_len * 4
    Q4 = call.batch * call.q_heads * max(call.q_len, call.kv_len) * call.head_dim * 4
    return 8 * P4 + 16 * Q4
