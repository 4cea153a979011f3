"""The assumptions a plan rests on, as sentences the plan returns (`Plan.assumptions`)."""

from __future__ import annotations

from estimator.call.attention import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES
from estimator.model.inputs import PlanInputs

# the longest attention call and decode cache measured on the H200 (validation/data/h200_long_calls.csv,
# validation/data/h200_decode_probe.csv): the plan says where it goes past them
LONGEST_MEASURED_CALL_TOKENS = 262_144
LONGEST_MEASURED_DECODE_TOKENS = 131_078


# the projections --lora-targets names, as the plan says it (peft target_modules)
_TARGET_TEXT = {"all": "the attention and MLP projections", "attention": "the attention projections",
                "mlp": "the MLP projections"}


def finetune_assumptions(inputs: PlanInputs) -> list[str]:
    """The fine-tuning recipe's sentences (estimator/model/finetune.py, finetune_time.py)."""
    out = []
    if inputs.finetune != "full":
        what = "QLoRA: the decoder linears in NF4 (bitsandbytes, blocksize 64, double quantisation), the rest bf16; " \
            if inputs.finetune == "qlora" else "LoRA: "
        out.append(f"{what}peft adapters of rank {inputs.lora_rank} on {_TARGET_TEXT[inputs.lora_targets]}, in fp32 "
                   "(peft's autocast_adapter_dtype), lora_dropout 0, enable_input_require_grads on; the base is "
                   "frozen: no base gradients or optimizer state, and no frozen linear or norm keeps its input. "
                   "Measured on the H200 with peft 0.21.2 and bitsandbytes 0.50.2 "
                   "(validation/data/h200_hf_finetune_heldout.csv).")
    if inputs.recipe is not None and inputs.recipe.fp8_linears:
        out.append("fp8: torchao 0.18 float8 training (tensorwise) on the decoder linears, eager: bf16 weights and "
                   "saved inputs as bf16-true; float8 GEMMs at 2x the bf16 rate and a measured eager host cost per "
                   "linear (estimator/model/finetune_time.py).")
    if inputs.compile:
        out.append("--compile: planned as eager Hugging Face (memory and time); torch.compile's fusion and its "
                   "recomputation choices are not modelled or measured here.")
    return out


def assumptions(inputs: PlanInputs) -> tuple[str, ...]:
    m = inputs.model
    out = ["Bytes are per GPU; FLOPs are for the whole model (PyTorch FlopCounterMode convention).",
           "Times come from kernel classes measured on an H200 (python -m validation calibrate: cuBLAS efficiency by "
           "GEMM shape, memory-bound kernels at measured bandwidth, a per-kernel launch floor and Hugging Face's "
           "per-layer Python; other GPUs scale from their datasheet peaks), the attention call model, and "
           "collectives at 0.8 of the catalog's link bandwidth (assumed); estimates with the error band in "
           "time_model.",
           f"Counted: a cuBLAS workspace of {CUBLAS_WORKSPACE_BYTES // 2**20} MiB per thread and the CUDA context "
           f"({CUDA_CONTEXT_BYTES:,} B, measured on an H200 with torch 2.11, assumed for every GPU); "
           "not counted: NCCL buffers. Fits keeps the step's largest single block free on top of the peak "
           "(allocator_reserve_bytes), for the caching allocator's fragmentation near the limit."]
    if inputs.mode == "inference":
        out.append("Inference = prefill of seq_len tokens keeping the KV cache (payload only, no quantisation "
                   f"scales), logits for {'all positions' if inputs.logits == 'all' else 'the last position'} "
                   "in the model dtype plus an fp32 copy; decode reads all weights and the KV cache once per step, "
                   "and a Hugging Face eager decode step is host-bound (about 23 us per launched kernel, measured on "
                   "the H200 host: other hosts differ, and two processes on the same host differed by up to 1.75x). "
                   "decode_time_ms_per_token is the step generate runs (a new cache length every step: where SDPA "
                   "runs it on cuDNN, one ~40 ms graph build a step per layer shape, measured on the H200 with "
                   "torch 2.11 and cuDNN 9.19 at batch 1-8 and caches of 4k-128k tokens; other versions may not "
                   "build per length); the steady, forced-flash and static-cache steps are given beside it.")
    else:
        zero = (f"ZeRO stage {inputs.zero} over {inputs.dp} data-parallel replicas" if inputs.zero else
                "no ZeRO sharding (data-parallel replicas hold full copies)")
        recipe = inputs.recipe
        out.append(f"Training = one {inputs.optimizer} step in {inputs.precision}: weights {recipe.weight_dtype}, "
                   f"compute {recipe.compute_dtype}"
                   + (" under torch.autocast (16-bit weight copies cached per forward, fp32 residual stream)"
                      if recipe.autocast else "")
                   + (", fp32 master weights" if recipe.master_dtype else "")
                   + f"; optimizer state and the step's temporaries per estimator/model/recipes.py; {zero}; the "
                   "peak is the largest of the step's moments (forward end, loss and layer backwards, optimizer).")
        out.append("Activations per layer follow Korthikanti et al. 2022 (arXiv:2205.05198) §4, generalised to "
                   "GQA and SwiGLU, with the attention core's saved tensors from the attention estimator; "
                   "dropout 0; the loss over every position peaks in its backward at 12 bytes per logit "
                   "(saved fp32 log-softmax, fp32 gradients in and out) when the loop keeps only the loss, as the "
                   "HF Trainer does (measured on the H200).")
    if inputs.mode == "training":
        out.extend(finetune_assumptions(inputs))
    if inputs.seq_len > LONGEST_MEASURED_CALL_TOKENS:
        out.append(f"Note: seq_len {inputs.seq_len:,} is past the longest attention call measured "
                   f"({LONGEST_MEASURED_CALL_TOKENS:,} tokens, validation/data/h200_long_calls.csv): the attention "
                   "time extrapolates the power-capped rate measured up to there; no measurement stands behind it.")
    if inputs.mode == "inference" and inputs.seq_len > LONGEST_MEASURED_DECODE_TOKENS:
        out.append(f"Note: the decode step's cuDNN graph build was measured with caches up to "
                   f"{LONGEST_MEASURED_DECODE_TOKENS:,} tokens (validation/data/h200_decode_probe.csv); past that "
                   "it is assumed to stay the same.")
    if any(w is not None for w in inputs.windows):
        out.append("Sliding window w: through SDPA (once seq_len >= w) Hugging Face passes a dense (1, 1, n, n) bool "
                   "mask, so flash cannot run and every score block is computed; through eager a float mask is "
                   "added to the full scores; only flex (FlexAttention's BlockMask) and flash-attn (window_size) "
                   "compute just the window. The KV cache after prefill holds every token (DynamicSlidingWindowLayer "
                   "trims it at the first decode step).")
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
