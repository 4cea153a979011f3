"""The attention call each layer of a plan makes, priced as the framework runs it: `attention_call` (the call one
GPU runs), `dense_mask` (whether Hugging Face hands it a dense mask) and `attention_layers` (one `estimate_call` per
distinct window). The plan, the advisor and the app's validation all price these calls.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.call.attention import estimate_call
from estimator.call.config import DTYPE_BITS, AttentionCall
from estimator.model.inputs import PlanInputs, gpu_of
from estimator.units import cdiv


@dataclass(frozen=True)
class LayerAttention:
    window: int | None
    layers: int  # how many layers have this window
    span: int  # keys each query sees: min(seq_len, window)
    memory: object  # CallEstimate of the call one GPU runs (one ring block under cp)
    timing: object  # CallEstimate of the whole-sequence call of one tensor-parallel shard
    forward_timing: object | None  # training: the forward-only call (forward time, recompute)
    mask_bytes: int = 0  # the dense mask Hugging Face builds for this kind of layer (held for the whole step)
    kv_repeat_bytes: int = 0  # k and v copied to every query head (repeat_kv) when SDPA gets a mask


def attention_call(inputs: PlanInputs, span: int | None = None, **changes) -> AttentionCall:
    """The attention call one GPU runs for a layer whose queries see `span` keys (default: the widest layer's):
    batch per replica, heads split by tp; a global layer is (seq_len × seq_len), causal for decoders; a windowed
    layer a dense (seq_len × min(seq_len, w)) band; under context parallel one (seq_len/cp)² ring block, not
    causal. Forward for inference, forward_backward for training. `changes` override fields. The plan, the advisor
    and the app's validation all price this one call."""
    if span is None:
        windows = inputs.windows
        span = inputs.seq_len if None in windows else min(inputs.seq_len, max(windows))
    q_len, kv_len = inputs.seq_len, span
    causal = inputs.model.kind == "decoder" and span == inputs.seq_len
    if inputs.cp > 1:
        q_len, kv_len, causal = inputs.tokens_per_gpu, min(span, inputs.tokens_per_gpu), False
    fields = dict(batch=inputs.batch_per_gpu, q_heads=inputs.q_heads_per_gpu, kv_heads=inputs.kv_heads_per_gpu,
                  head_dim=inputs.model.head_dim, q_len=q_len, kv_len=kv_len, dtype=inputs.dtype, causal=causal,
                  mask="none", mode="forward_backward" if inputs.mode == "training" else "forward",
                  backend=inputs.backend, v_head_dim=value_width(inputs))
    fields.update(changes)
    return AttentionCall(**fields)


def value_width(inputs: PlanInputs) -> int | None:
    """v's width in the attention call where it differs from q's and k's (MLA: 128 against 192), else None.
    transformers 5.17 passes v at its own width to SDPA and eager (models/deepseek_v2 `expand_kv`), and pads it to
    the q/k width for flash-attn (integrations/flash_attention.py, cropping the output after)."""
    m = inputs.model
    if m.v_head == m.head_dim or inputs.backend == "flash-attn":
        return None
    return m.v_head


def dense_mask(inputs: PlanInputs, window: int | None) -> bool:
    """Whether Hugging Face passes this layer a dense (batch, 1, q, kv) mask rather than `is_causal`: always for
    eager (`eager_mask` never skips), and through SDPA for a sliding window once the keys reach it
    (transformers 5.17 masking_utils `_ignore_causal_mask_sdpa`: kv_length >= window). A window therefore saves
    nothing through SDPA or eager: every query still computes seq_len keys."""
    if inputs.backend == "eager":
        return inputs.model.kind == "decoder"
    if inputs.backend in ("flex", "flash-attn"):  # a BlockMask from the mask_mod (transformers 5.17
        return False  # masking_utils.flex_attention_mask), or flash-attn's native window_size
    return window is not None and inputs.seq_len >= window


def _as_run(inputs: PlanInputs, window: int | None) -> tuple[int, dict, int, int]:
    """(span, the whole-sequence call's fields as the framework runs this layer, its mask bytes, its k/v repeat
    bytes): see `attention_layers`."""
    m = inputs.model
    n, b, es = inputs.seq_len, inputs.batch_per_gpu, DTYPE_BITS[inputs.dtype] // 8
    span = n if window is None else min(n, window)
    masked = dense_mask(inputs, window)
    mask_bytes = kv_repeat = 0
    whole = dict(q_len=n, kv_len=span, causal=m.kind == "decoder" and span == n)
    if inputs.backend in ("flex", "flash-attn"):  # only the blocks the window keeps are computed
        whole = dict(q_len=n, kv_len=n, causal=m.kind == "decoder",
                     mask="none" if window is None or window >= n else f"window:{window}")
        if inputs.backend == "flex":  # one BlockMask per kind of layer: 4 int32 (b, 1, n/128, n/128) tensors
            mask_bytes = 16 * b * cdiv(n, 128) ** 2
    elif masked and inputs.backend == "eager":
        whole = dict(q_len=n, kv_len=n, causal=m.kind == "decoder")
        mask_bytes = b * n * n * es  # torch.where(bool mask, 0, finfo.min) in the model dtype
    elif masked:
        whole = dict(q_len=n, kv_len=n, causal=False, mask="bool", kv_heads=inputs.q_heads_per_gpu)
        mask_bytes = n * n  # bool (1, 1, q, kv), expanded over the batch (a view)
        if inputs.kv_heads_per_gpu < inputs.q_heads_per_gpu:
            kv_repeat = 2 * b * inputs.tokens_per_gpu * inputs.q_heads_per_gpu * m.head_dim * es
    return span, whole, mask_bytes, kv_repeat


def priced_attention_call(inputs: PlanInputs) -> AttentionCall:
    """The widest layer's call as the plan prices it (the framework's own: a window through SDPA is the dense
    bool-masked (seq_len × seq_len) call, not a (seq_len × window) band), so a page shows the call whose backend
    the plan reports."""
    windows = inputs.windows
    widest = None if None in windows else max(windows)
    span, whole, _, _ = _as_run(inputs, widest)
    return attention_call(inputs, span, **whole)


def attention_layers(inputs: PlanInputs, *, timed: bool = True) -> list[LayerAttention]:
    """One estimate_call per distinct window, priced as the framework runs it. Without a window: (seq_len ×
    seq_len), causal for decoders. With a window through SDPA: the full (seq_len × seq_len) call with a bool mask
    (no causal flag), k and v repeated to every query head (HF's `use_gqa_in_sdpa` refuses GQA with a mask), so the
    fused backends that take no mask (flash) cannot run it. Eager computes the full causal scores whatever the
    window (the window lives in its float mask). timed=False: the estimates without their time (budget.memory_fits)."""
    m, gpu = inputs.model, gpu_of(inputs)
    out = []
    for window in sorted(set(inputs.windows), key=lambda w: (w is None, w or 0)):
        span, whole, mask_bytes, kv_repeat = _as_run(inputs, window)

        def estimate(whole=whole, span=span, **changes):
            call_fields = {**whole, **changes}
            # the estimator counts FLOPs in int64: refuse shapes whose backward count (10·B·H·L·S·D) would wrap
            if (16 * inputs.batch_per_gpu * inputs.q_heads_per_gpu * call_fields["q_len"] * call_fields["kv_len"]
                    * m.head_dim >= 2**63):
                raise ValueError(f"seq_len: {inputs.seq_len:,} tokens at batch {inputs.batch} is past what the "
                                 "attention estimator can count (int64 FLOPs)")
            return estimate_call(attention_call(inputs, span, **call_fields), gpu, inputs.torch_version, timed=timed)

        timing = estimate()
        # ring attention (cp > 1): one (n/cp × n/cp) block at a time, off-diagonal blocks dense
        ring = dict(q_len=inputs.tokens_per_gpu, kv_len=min(span, inputs.tokens_per_gpu), causal=False)
        memory = timing if inputs.cp == 1 else estimate(**ring)
        fwd = estimate(mode="forward") if inputs.mode == "training" else None
        out.append(LayerAttention(window, inputs.windows.count(window), span, memory, timing, fwd,
                                  mask_bytes=mask_bytes, kv_repeat_bytes=kv_repeat))
    return out
