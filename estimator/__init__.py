"""Capacity planner for long-context attention: what PyTorch's scaled_dot_product_attention (and a
hand-written "eager" attention) allocates, computes and costs on a given GPU. Pure Python + numpy:
no torch, streamlit or plotly are imported here.

Glossary (used everywhere, once defined here):
    seq_len   tokens in a sequence (a plan's n); an attention call has
    q_len     query positions in the call (1 for one decode step)
    kv_len    key/value positions the queries attend to (the KV cache length when decoding)
    batch     sequences per call
    q_heads   query heads; kv_heads key/value heads (GQA when fewer, MQA when 1)
    head_dim  per-head width D
    dtype     float16 | bfloat16 | float32 (element sizes are kept in bits)
    backend   auto | math | flash | efficient | cudnn | eager
    mode      forward (inference, no grad) | forward_backward (the call and its backward)
Formula bodies use B, Hq, Hk, L (q_len), S (kv_len), D. Bytes are exact integers; GiB = 2**30.
"""

from estimator.call.attention import CallEstimate, estimate_call
from estimator.call.config import AttentionCall
from estimator.hardware import CATALOG, GPU, get_gpu

__all__ = ["AttentionCall", "CallEstimate", "estimate_call", "GPU", "CATALOG", "get_gpu"]
