"""The assumptions a plan rests on, as sentences the plan returns (`Plan.assumptions`)."""

from __future__ import annotations

from estimator.call.attention import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES
from estimator.model.inputs import PlanInputs
from estimator.model.time import GEMM_EFFICIENCY, HBM_EFFICIENCY


def assumptions(inputs: PlanInputs) -> tuple[str, ...]:
    m = inputs.model
    out = ["Bytes are per GPU; FLOPs are for the whole model (PyTorch FlopCounterMode convention).",
           f"Times are roofline estimates: GEMM efficiency {GEMM_EFFICIENCY:.0%} of dense peak (assumed) and "
           f"{HBM_EFFICIENCY:.0%} of HBM bandwidth (H200 decode calls measured 78-87% at a 131k cache), attention "
           "cores from the attention estimator; communication and per-kernel launch overheads are not modelled.",
           f"Counted: a cuBLAS workspace of {CUBLAS_WORKSPACE_BYTES // 2**20} MiB per thread and the CUDA context "
           f"({CUDA_CONTEXT_BYTES:,} B, measured on an H200 with torch 2.11, assumed for every GPU); "
           "not counted: allocator fragmentation and NCCL buffers."]
    if inputs.mode == "inference":
        out.append("Inference = prefill of seq_len tokens keeping the KV cache (payload only, no quantisation "
                   f"scales), logits for {'all positions' if inputs.logits == 'all' else 'the last position'} "
                   "in the model dtype plus an fp32 copy; decode reads all weights and the KV cache once per step.")
    else:
        zero = (f"ZeRO stage {inputs.zero} over {inputs.dp} data-parallel replicas" if inputs.zero else
                "no ZeRO sharding (data-parallel replicas hold full copies)")
        out.append("Training = one mixed-precision AdamW step: 16-bit weights and gradients, fp32 master weights and "
                   "two fp32 moments (2 + 2 + 12 bytes per parameter; fp32 training: 4 + 4 + 8), fused AdamW "
                   f"(no parameter-sized temporaries), {zero}.")
        out.append("Activations per layer follow Korthikanti et al. 2022 (arXiv:2205.05198) §4, generalised to "
                   "GQA and SwiGLU, with the attention core's saved tensors from the attention estimator; "
                   "dropout 0; the loss over every position peaks in its backward at dtype + 12 bytes per logit "
                   "(logits, saved fp32 log-softmax, fp32 gradients in and out; measured on a HF Llama).")
    if any(w is not None for w in inputs.windows):
        out.append("Sliding window w: each windowed layer's attention is modelled as a dense q_len × min(seq_len, w) "
                   "call (a kernel with window support, e.g. flash-attn window_size, or chunked prefill) and its KV "
                   "cache keeps min(seq_len, w) tokens. SDPA has no window argument: through SDPA a window needs a "
                   "dense mask, which rules out flash and makes the math path materialise seq_len².")
    if m.attn_logit_softcap:
        out.append(f"{m.name} soft-caps attention scores (tanh, cap {m.attn_logit_softcap:g}); SDPA's fused kernels "
                   "cannot, so the plan assumes a kernel that can (flash-attn >= 2.6, FlexAttention) or capping "
                   "dropped at inference. The Hugging Face eager path keeps capping and materialises the scores: "
                   "plan it with --backend eager.")
    if inputs.tp > 1:
        sp_text = ("with sequence parallelism the saved norm and residual-stream tensors split tp ways too"
                   if inputs.sequence_parallel and inputs.mode == "training" else
                   "residual stream and norms replicated (no sequence parallelism)")
        out.append("Tensor parallel: heads, FFN columns and vocabulary split (Megatron-LM); kv heads copied when "
                   f"tp exceeds kv_heads; {sp_text}.")
    if inputs.cp > 1:
        out.append("Context parallel: ring attention; each GPU keeps seq_len/cp tokens of activations and KV, runs "
                   "one (seq_len/cp)² block at a time and holds one incoming kv block.")
    if m.max_positions and inputs.seq_len > m.max_positions:
        out.append(f"Note: seq_len {inputs.seq_len:,} exceeds the {m.max_positions:,} positions {m.name} was trained "
                   "for; memory and time are still computed, quality is not implied.")
    if m.kind == "encoder" and m.native_tokens and inputs.seq_len != m.native_tokens:
        out.append(f"Note: {m.name} was trained with {m.native_tokens} tokens; other lengths need an interpolated "
                   "position table (same parameter count) or another patch size.")
    if m.kind == "encoder":
        out.append("Encoder: bidirectional attention, no KV cache, seq_len = patches + class token; the parameter "
                   "count keeps the native-resolution position table.")
    return tuple(out)
