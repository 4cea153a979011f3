"""Which SDPA backends can run a call, every reason the others cannot, and which one `auto` picks.

Rules of `aten/src/ATen/native/transformers/cuda/sdp_utils.cpp` (can_use_flash_attention,
can_use_mem_efficient_attention, can_use_cudnn_attention) as they behave in PyTorch 2.11 (checked on
an H200, validation/data/h200_calibration.csv), vectorized over calls. A value width other than head_dim
(MLA) is routed by the same file's checks as read from source, not yet measured: flash needs q, k and v of one
width (check_head_dim_size_flash); efficient needs both widths aligned (check_head_dim_size_mem_efficient);
cuDNN needs both multiples of 8 and within its limit (check_cudnn_tensor_shapes). `TORCH_VERSIONS` lists what
differs in 2.13 (read from the newest source, not measured on a GPU).
"""

from __future__ import annotations

import numpy as np

from estimator.call.shapes import Calls

TORCH_VERSIONS = ("2.11", "2.13")
DEFAULT_TORCH = "2.11"  # the newest version validated on a GPU (validation/data)

# select_sdp_backend's priority. check_prefer_cudnn_attention() puts cuDNN first once per process
# when cuDNN > 9.15 and the GPU is sm90/sm10x (2.11 bundles cuDNN 9.19; measured on the H200).
PRIORITY_DEFAULT = ("flash", "efficient", "math", "cudnn")
PRIORITY_CUDNN_FIRST = ("cudnn", "flash", "efficient", "math")


def check_torch_version(version: str) -> str:
    version = str(version).strip()
    short = ".".join(version.split("+")[0].split(".")[:2])
    if short not in TORCH_VERSIONS:
        raise ValueError(f"torch: unknown version {version!r}; modelled: {', '.join(TORCH_VERSIONS)}")
    return short


def priority(sm: int) -> tuple[str, ...]:
    return PRIORITY_CUDNN_FIRST if sm == 90 or 100 <= sm < 110 else PRIORITY_DEFAULT


def _checks(c: Calls, sm: int, torch_version: str) -> dict[str, list[tuple[np.ndarray, str]]]:
    """(fails, reason) pairs per backend; a backend runs where none fails."""
    half = ~c.fp32
    both = c.causal & c.has_mask
    both_reason = "is_causal and attn_mask are both set (SDPA raises for every backend)"
    flash = [
        (both, both_reason),
        (np.bool_(sm < 80), f"needs compute capability 8.0+ (this GPU is sm{sm})"),
        (c.has_mask, "an explicit attn_mask (bool or float) is not supported; use is_causal=True"),
        (c.value_differs, "v_head_dim differs from head_dim (check_head_dim_size_flash: q, k, v the same width)"),
        (c.D > 256, "head_dim > 256"),
        (c.grad & (c.D > 192) & np.bool_(sm in (86, 89, 120)), "training with head_dim > 192 on sm86/sm89"),
        (c.causal & (c.L != c.S), "is_causal with q_len != kv_len"),
        (c.fp32, "dtype float32 (flash needs float16 or bfloat16)"),
    ]
    eff_align = 8 if sm >= 75 else 4
    efficient = [
        (both, both_reason),
        (np.bool_(sm < 50), f"needs compute capability 5.0+ (this GPU is sm{sm})"),
        (half & ((c.D % eff_align != 0) | (c.Dv % eff_align != 0)),
         f"head_dim and v_head_dim must be multiples of {eff_align} for 16-bit inputs"),
        (c.fp32 & ((c.D % (4 if sm >= 80 else 1) != 0) | (c.Dv % (4 if sm >= 80 else 1) != 0)),
         "head_dim and v_head_dim must be multiples of 4 for float32"),
        (c.bf16 & np.bool_(sm < 80), f"bfloat16 needs compute capability 8.0+ (this GPU is sm{sm})"),
    ]
    if torch_version == "2.11":
        efficient.append((c.gqa, "GQA (kv_heads < q_heads) is not supported in PyTorch 2.11 (2.13 adds it)"))
    cudnn = [
        (both, both_reason),
        (np.bool_(sm < 80), f"needs compute capability 8.0+ (this GPU is sm{sm})"),
        (c.fp32, "dtype float32 (cuDNN attention needs float16 or bfloat16)"),
        (c.D % 8 != 0, "head_dim must be a multiple of 8"),
        (c.D > (256 if sm == 90 or 100 <= sm < 110 else 128), f"head_dim > {256 if sm == 90 else 128} on sm{sm}"),
        (c.Dv % 8 != 0, "v_head_dim must be a multiple of 8"),
        (c.Dv > (256 if sm == 90 or 100 <= sm < 110 else 128), f"v_head_dim > {256 if sm == 90 else 128} on sm{sm}"),
        # check_cudnn_d256_bprop_head_dim: with d256 support the backward takes (<=128, <=128), (192, 128) or
        # (256, 256); applied here only where the widths differ (equal widths are as measured before)
        (c.grad & c.value_differs & ~(((c.D <= 128) & (c.Dv <= 128)) | ((c.D == 192) & (c.Dv == 128))),
         "backward with v_head_dim != head_dim other than (192, 128) or both <= 128"),
        (c.S == 1, "kv_len == 1"),
        (c.has_dropout & (c.L == 1), "dropout with q_len == 1"),
    ]
    # flex_attention (torch/nn/attention/flex_attention.py, compiled to Triton kernels): masks are a mask_mod
    # turned into a BlockMask, so a dense mask tensor has no place; no dropout argument; tl.dot needs 16+ wide
    # operands; Triton's bf16 needs sm80.
    flex = [
        (c.mask_float | (c.mask_bool & ~c.structured),
         "a dense attn_mask tensor (flex_attention takes a mask_mod/BlockMask: use mask window:W or document:K)"),
        (c.has_dropout, "dropout (flex_attention has no dropout)"),
        (np.bool_(sm < 75), f"needs Triton on compute capability 7.5+ (this GPU is sm{sm})"),
        (c.bf16 & np.bool_(sm < 80), f"bfloat16 needs compute capability 8.0+ (this GPU is sm{sm})"),
        (c.D < 16, "head_dim below 16"),
        # measured on the H200 (validation/data/h200_flex_sweep.csv, h200_heldout5.csv, h200_heldout7.csv,
        # h200_heldout9.csv): fp32 at head_dim 160 and 192 fails in forward and backward alike, every shape ("No valid
        # triton configs. OutOfMemoryError: out of resource": 344,320 B of shared memory asked, sm90 has 232,448);
        # at head_dim 256 both ran (2048 x 2048, batch 4 x 8 heads: 27 ms forward, 121 ms with backward)
        (c.fp32 & (c.D > 128) & (c.D < 256),
         "float32 with head_dim between 128 and 256 (Triton's kernel exceeds shared memory)"),
    ]
    # the flash-attn package (HF attn_implementation="flash_attention_2"): the same FA2 kernels as SDPA's flash,
    # with native window_size and packed documents (flash_attn_varlen_func's cu_seqlens), so a structured mask is
    # no obstacle; a dense mask tensor is (flash_attn/flash_attn_interface.py, flash-attn 2.8)
    flash_attn = [
        (np.bool_(sm < 80), f"needs compute capability 8.0+ (this GPU is sm{sm})"),
        (c.mask_float | (c.mask_bool & ~c.structured),
         "a dense attn_mask tensor (flash-attn takes window_size or packed-document offsets, not a mask)"),
        (c.D > 256, "head_dim > 256"),
        (c.grad & (c.D > 192) & np.bool_(sm in (86, 89, 120)), "training with head_dim > 192 on sm86/sm89"),
        (c.fp32, "dtype float32 (flash-attn needs float16 or bfloat16)"),
    ]  # causal with q_len != kv_len is aligned bottom-right (flash-attn >= 2.1), so it is no obstacle
    return {"flash": flash, "efficient": efficient, "cudnn": cudnn,
            "math": [(both, both_reason)], "flex": flex, "flash-attn": flash_attn}


def eligibility(c: Calls, sm: int, torch_version: str = DEFAULT_TORCH) -> dict[str, np.ndarray]:
    """Backend name → bool (array): whether it can run the call."""
    ok = {}
    for backend, checks in _checks(c, sm, torch_version).items():
        fails = np.zeros(np.shape(c.B), dtype=bool)
        for fail, _ in checks:
            fails = fails | fail
        ok[backend] = ~fails
    return ok


def reasons(c: Calls, sm: int, torch_version: str = DEFAULT_TORCH) -> dict[str, tuple[str, ...]]:
    """For one call: every reason each SDPA backend cannot run it (empty tuple: it can)."""
    return {b: tuple(reason for fail, reason in checks if bool(fail))
            for b, checks in _checks(c, sm, torch_version).items()}


def select(c: Calls, sm: int, torch_version: str = DEFAULT_TORCH, ok: dict | None = None) -> np.ndarray:
    """The backend `auto` runs: the first eligible one in the priority order. `ok`: eligibility(c, sm,
    torch_version) where the caller has it already."""
    ok = eligibility(c, sm, torch_version) if ok is None else ok
    order = priority(sm)
    chosen = np.full(np.shape(c.B), "none", dtype=object)
    if chosen.ndim == 0:
        for backend in reversed(order):
            chosen = np.where(ok[backend], backend, chosen)
        return chosen
    # many calls: the index of the first eligible name (len(order): none), then one lookup per call
    eligible = np.stack(np.broadcast_arrays(chosen, *(ok[b] for b in order))[1:])
    first = np.where(eligible.any(axis=0), eligible.argmax(axis=0), len(order))
    return np.array([*order, "none"], dtype=object)[first]
