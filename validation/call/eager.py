"""The project's hand-written ("eager") attention: the reference computation behind `backend = eager`.

It is the naive version that Hugging Face's `attn_implementation="eager"` and common profiling write-ups use:
real GQA copies, scores in the input dtype, an out-of-place `masked_fill` for causal, a softmax
upcast to fp32 and cast back, dropout, and a second matmul. The estimator predicts exactly this
sequence (`estimator/call/memory.py: eager_timeline`); change one and you must change the other.
"""

from __future__ import annotations

import torch


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, attn_mask: torch.Tensor | None = None,
                    dropout_p: float = 0.0, is_causal: bool = False, inplace_mask: bool = False) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(D) + mask) v for q (B, Hq, L, D), k and v (B, Hkv, S, D).

    `inplace_mask=True` is the one-line fix (`masked_fill_`, inference only: it breaks autograd);
    the contract's `eager` backend is the default, out-of-place version."""
    q_heads, kv_heads = q.shape[1], k.shape[1]
    if q_heads != kv_heads:
        k = k.repeat_interleave(q_heads // kv_heads, dim=1)  # real copies, (B, Hq, S, D)
        v = v.repeat_interleave(q_heads // kv_heads, dim=1)
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5  # (B, Hq, L, S) in the input dtype
    if is_causal:
        future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
        if inplace_mask:
            scores.masked_fill_(future, float("-inf"))
        else:
            scores = scores.masked_fill(future, float("-inf"))  # out of place: one more (B, Hq, L, S)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    p = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    if dropout_p > 0:
        p = torch.nn.functional.dropout(p, dropout_p)
    return p @ v
