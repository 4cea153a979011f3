"""The `flex` backend of the protocol: torch.nn.attention.flex_attention, compiled, with a BlockMask built from the
call's mask (causal, `window:W`, `document:K`) before the baseline is taken, as any input is.

Compilation happens in the warm-up (contract §1 step 2), so the measured call is the compiled kernel; the
warm-up's duration is reported apart (`first_call_ms`). TorchDynamo recompiles per shape and, past its recompile
limit (8 by default), runs flex_attention unfused; `reset()` before each new shape keeps every call compiled.
"""

from __future__ import annotations

import torch

NO_KERNEL = "No available kernel"  # validation.call.protocol reads this as `unsupported`
_COMPILED = {}


def mask_mod_for(kind: str, number: int, causal: bool, q_len: int, kv_len: int):
    """The mask_mod of a call: which (q, kv) pairs attend. Queries are aligned to the end of the keys (offset
    kv_len - q_len), as SDPA's causal decode is not but a KV cache is."""
    offset = kv_len - q_len

    def causal_mod(b, h, q, kv):
        return q + offset >= kv

    if kind == "window":
        def window_mod(b, h, q, kv):
            near = (q + offset - kv < number) & (kv - q - offset < number)
            return near & causal_mod(b, h, q, kv) if causal else near
        return window_mod
    if kind == "document":
        doc_len = -(-kv_len // number)

        def document_mod(b, h, q, kv):
            same = (q + offset) // doc_len == kv // doc_len
            return same & causal_mod(b, h, q, kv) if causal else same
        return document_mod
    return causal_mod if causal else None


def block_mask(call, device: str):
    """The BlockMask of the call (None for a dense, non-causal call with no structured mask)."""
    from torch.nn.attention.flex_attention import create_block_mask

    from estimator.call.config import parse_mask

    kind, window, documents = parse_mask(call.mask)
    if kind in ("bool", "float"):
        raise RuntimeError(f"{NO_KERNEL}: flex_attention takes a mask_mod, not a dense mask tensor")
    mod = mask_mod_for(kind, window or documents, call.causal, call.q_len, call.kv_len)
    if mod is None:
        return None
    return create_block_mask(mod, B=None, H=None, Q_LEN=call.q_len, KV_LEN=call.kv_len, device=device)


def reset() -> None:
    """Forget compiled graphs (a new shape then compiles fresh instead of counting towards the recompile limit)."""
    torch._dynamo.reset()
    _COMPILED.clear()


def attention(q, k, v, mask, *, enable_gqa: bool, dropout: float = 0.0):
    if dropout > 0:  # flex_attention has no dropout argument: running it without would measure another call
        raise RuntimeError(f"{NO_KERNEL}: flex_attention has no dropout")
    if q.device.type != "cuda":
        raise RuntimeError(f"{NO_KERNEL}: flex_attention is measured on CUDA only (its CPU path has no backward)")
    from torch.nn.attention.flex_attention import flex_attention

    if "fn" not in _COMPILED:
        _COMPILED["fn"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["fn"](q, k, v, block_mask=mask, enable_gqa=enable_gqa)


def flash_attn(call, q, k, v):
    """The flash-attn package's flash_attn_func on (B, L, H, D) views, with its native window (window_size) and
    causal flag; packed documents would need flash_attn_varlen_func (not wired). Not installed on the GPU we
    measured on, so this path has not run there: without the package the call is `unsupported`."""
    try:
        from flash_attn import flash_attn_func
    except ImportError:
        raise RuntimeError(f"{NO_KERNEL}: the flash-attn package is not installed") from None
    from estimator.call.config import parse_mask

    kind, window, _ = parse_mask(call.mask)
    if kind not in ("none", "window"):
        raise RuntimeError(f"{NO_KERNEL}: flash_attn_func takes no mask tensor or document offsets here")
    window_size = (window - 1, 0 if call.causal else window - 1) if window else (-1, -1)
    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), dropout_p=call.dropout,
                          causal=call.causal, window_size=window_size)
    return out.transpose(1, 2)
