"""Activation bytes of a plan: the inference prefill's worst phase, the training step's stored activations and
its peak over the moments of backward. Per GPU, exact ints (notation in estimator/model/inputs.py)."""

from __future__ import annotations

from estimator.call.shapes import cdiv
from estimator.model.inputs import LayerAttention, PlanInputs, Sizes


def inference_activations(inputs: PlanInputs, attn: list[LayerAttention], z: Sizes,
                           kv_bits: int) -> tuple[int, dict[str, int]]:
    """Prefill without grad: the worst of the attention phase and the FFN phase over layers, or the logits.
    Both phases measured to the byte on a HF LlamaDecoderLayer (tests/data/hf_layer_inference_peak.csv)."""
    m = inputs.model
    cp_buffer = z.kv if inputs.cp > 1 else 0  # ring attention receives the next kv block while computing
    attn_phase = 0
    for a in attn:
        cache_layer = 2 * z.b * cdiv(a.span, inputs.cp) * inputs.kv_heads_per_gpu * m.head_dim * kv_bits // 8
        transient_kv = z.kv if m.kind == "encoder" else max(0, z.kv - cache_layer)  # decoders: k, v are the cache
        # layer input + the normed input (the attention module's argument, alive until it returns) + q + the call
        attn_phase = max(attn_phase, 2 * z.resid + z.q + transient_kv + a.memory.peak_extra_bytes + cp_buffer)
    # layer input (the caller still holds it) + the new residual + the normed input + gate, up, act·up (SwiGLU)
    # or fc1, act (GELU)
    ffn_phase = 3 * z.resid + (3 if m.gated_ffn else 2) * z.b * z.n * z.F * z.es
    rows = z.b * (z.n if inputs.logits == "all" and m.kind == "decoder" else 1)
    logits_phase = z.resid + rows * z.V * (z.es + 4)  # logits in dtype, then .float() (HF generate)
    model_level = model_level_bytes(inputs, z)
    detail = {"attention_phase_bytes": attn_phase, "ffn_phase_bytes": ffn_phase, "logits_phase_bytes": logits_phase,
              "model_level_bytes": model_level}
    return max(attn_phase + model_level, ffn_phase + model_level, logits_phase), detail


def model_level_bytes(inputs: PlanInputs, z: Sizes) -> int:
    """Alive while the layers run, outside any layer: the embedding output (HF's model forward keeps
    `inputs_embeds` referenced) and, for decoders (RoPE assumed), the cos/sin tables (n·head_dim each) and the
    int64 position ids. Measured on whole HF models, tests/data/hf_model_prefill_peak.csv."""
    if inputs.model.kind != "decoder":
        return z.resid
    return z.resid + 2 * z.n * inputs.model.head_dim * z.es + z.n * 8


def training_peak(inputs: PlanInputs, attn: list[LayerAttention], z: Sizes,
                   grads: int) -> tuple[int, int, dict[str, int]]:
    """(activations, gradients allocated, detail) at the peak of a training step.

    Gradients stay resident with `persistent_grads`, across micro-batches (accumulation) and under ZeRO ≥ 2
    (sharded buffers); otherwise
    (`zero_grad(set_to_none=True)`, PyTorch's default) they are allocated during backward, head first, layer by
    layer, embedding last, while each layer's saved activations are freed: the peak is then the largest of the
    loss backward (no gradients yet), the first layer's backward, the last layer's backward and the end.
    Checked against a Hugging Face Llama on the H200 (validation/data/h200_hf_llama.csv)."""
    m, es = inputs.model, z.es
    activations, detail = training_activations(inputs, attn, z)
    if inputs.persistent_grads or inputs.accumulation_steps > 1 or inputs.zero >= 2 or grads == 0:
        return activations, grads, detail
    fixed = detail["model_level_bytes"] + detail["gradient_buffers_bytes"]
    stored, transient = detail["stored_layers_bytes"], detail["backward_transient_bytes"]
    tp = inputs.tp
    if m.kind == "decoder":
        head, emb = -(-m.vocab // tp) * m.hidden, (0 if m.tied_embeddings else -(-m.vocab // tp) * m.hidden)
    else:
        head, emb = m.head_params, m.embedding_params
    head_grad = (head + m.norm_params) * es
    layer_grad = max(0, grads - head_grad - emb * es) // m.layers
    phases = [("loss", fixed + stored + detail["logits_phase_bytes"], 0),
              ("top layer backward", fixed + stored + transient, head_grad),
              ("bottom layer backward", fixed + stored // m.layers + transient,
               head_grad + (m.layers - 1) * layer_grad),
              ("end of backward", detail["model_level_bytes"], grads)]
    name, act, live = max(phases, key=lambda p: p[1] + p[2])
    return act, live, {**detail, "peak_phase_" + name.replace(" ", "_"): act + live}


def training_activations(inputs: PlanInputs, attn: list[LayerAttention], z: Sizes) -> tuple[int, dict[str, int]]:
    """Stored activations of every layer (Korthikanti et al. 2022 §4, generalised; checked against a HF
    LlamaDecoderLayer, tests/data/hf_layer_saved_bytes.csv) + the larger of one layer's backward transient
    and the loss backward."""
    m, b, n, es = inputs.model, z.b, z.n, z.es
    # Sequence parallelism (Korthikanti et al. §4.2.2) splits the residual-stream tensors tp ways as well.
    n_sp = cdiv(n, inputs.tp if inputs.sequence_parallel else 1)
    # Each norm saves: HF RMSNorm its fp32 input, the normalised 16-bit tensor and rsqrt (b·n fp32);
    # LayerNorm its input, mean and rstd (b·n fp32 each).
    if m.norm == "rmsnorm":
        norm_save = m.norms_per_layer * (b * n_sp * m.hidden * (4 + es) + b * n_sp * 4)
    else:
        norm_save = m.norms_per_layer * (b * n_sp * m.hidden * es + 2 * b * n_sp * 4)
    resid_saved = b * n_sp * m.hidden * es  # the normed input that q/k/v (and the FFN) projections save
    ffn_save = resid_saved + (4 if m.gated_ffn else 2) * b * n * z.F * es  # + gate, act, up, product (SwiGLU)
    ffn_grads = 2 * b * n * z.F * es
    stored = transient = 0
    worst: dict[str, int] = {}
    for a in attn:
        est, backend = a.memory, a.memory.selected_backend
        retained = est.forward_retained_bytes or 0
        if backend in ("math", "eager") and inputs.cp > 1:  # every ring block's score matrix is saved
            retained *= inputs.cp
        # q, k, v stay alive because the kernel saves them; math saves fp32 copies instead, and eager with GQA
        # saves its repeated k, v (both inside `retained`)
        qkv_saved = {"math": 0, "eager": z.q if m.q_heads != m.kv_heads else z.q + z.kv}.get(backend, z.q + z.kv)
        none_layer = norm_save + resid_saved + qkv_saved + retained + ffn_save
        if none_layer > sum(worst.values()):
            worst = {"layer_attention_bytes": resid_saved + qkv_saved + retained, "layer_ffn_bytes": ffn_save,
                     "layer_norms_bytes": norm_save, "layer_attention_core_bytes": qkv_saved + retained}
        attn_bwd = max(0, (est.peak_extra_bytes or 0) - retained)
        if inputs.checkpointing == "none":
            layer, bwd = none_layer, max(attn_bwd, ffn_grads)
        elif inputs.checkpointing == "selective":  # attention core recomputed; q, k, v and out kept (§4.2)
            layer = norm_save + resid_saved + z.q + z.kv + z.q + ffn_save
            bwd = max(est.peak_extra_bytes or 0, ffn_grads)
        else:  # full: keep each layer's input, recompute the layer during its backward
            layer, bwd = resid_saved, none_layer + max(attn_bwd, ffn_grads)
        stored += layer * a.layers
        transient = max(transient, bwd)
    rows = b * n if m.kind == "decoder" else b
    # Loss backward: logits (dtype) + the saved fp32 log-softmax + its incoming and outgoing fp32 gradients (the
    # fp32 copy of the logits is gone by then). Measured 14 B/logit bf16, 16 fp32 (tests/data/hf_loss_peak.csv).
    logits_phase = z.resid + rows * z.V * (es + 12)
    model_level = model_level_bytes(inputs, z)
    grad_buffers = 2 * z.resid  # backward: the gradient flowing into a layer and the residual branch's
    detail = {"stored_layers_bytes": stored, "backward_transient_bytes": transient,
              "logits_phase_bytes": logits_phase, "model_level_bytes": model_level,
              "gradient_buffers_bytes": grad_buffers, **worst}
    return model_level + stored + grad_buffers + max(transient, logits_phase), detail
