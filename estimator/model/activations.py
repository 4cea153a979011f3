"""Activation bytes of a plan: the inference prefill's worst phase, the training step's stored activations and
its peak over the moments of backward. Per GPU, exact ints (notation in estimator/model/inputs.py)."""

from __future__ import annotations

from dataclasses import dataclass

from estimator.model.blocks import (
    MoeShape,
    mla_attention_live,
    moe_backward_transient,
    moe_forward_peak,
    moe_saved_bytes,
    sinks_eager_backward,
    sinks_eager_peak,
    sinks_eager_saved,
)
from estimator.model.finetune import (
    ADAPTER_BYTES,
    adapted_linears,
    adapter_backward_bytes,
    adapter_saved_bytes,
    dequantised_weight_bytes,
)
from estimator.model.inputs import PlanInputs, Sizes
from estimator.model.layer_attention import LayerAttention
from estimator.model.state import optimizer_step_bytes
from estimator.units import cdiv


def inference_activations(inputs: PlanInputs, attn: list[LayerAttention], z: Sizes,
                           kv_bits: int) -> tuple[int, dict[str, int]]:
    """Prefill without grad: the worst of the attention phase and the FFN phase over layers, or the logits.
    Both phases measured to the byte on a HF LlamaDecoderLayer (tests/data/hf_layer_inference_peak.csv)."""
    m = inputs.model
    cp_buffer = z.kv if inputs.cp > 1 else 0  # ring attention receives the next kv block while computing
    attn_phase = 0
    for a in attn:
        # the cache keeps every prefill token, windowed layers too (transformers 5.17 DynamicSlidingWindowLayer
        # keeps a view of the concatenated tensor, whose storage holds all of them until the next update)
        cache_layer = (z.b * cdiv(inputs.seq_len, inputs.cp) * kv_bits
                       * m.kv_cache_elements_per_token_per_layer(inputs.kv_layout, inputs.tp) // 8)
        transient_kv = z.kv if m.kind == "encoder" else max(0, z.kv - cache_layer)  # decoders: k, v are the cache
        if m.mla:  # q and the decompressed per-head k, v live beside the cached latent (blocks.mla_attention_live)
            transient_kv = mla_attention_live(z.b * z.n, inputs.q_heads_per_gpu, m.qk_nope_head_dim,
                                              m.qk_rope_head_dim, m.v_head, m.kv_lora_rank, z.es) - z.q
        # a fused qkv_proj (Phi-3) returns one tensor that q, k and v view: its q and k parts stay alive beside the
        # rotated q and k until the attention module returns
        fused = z.q + z.kv // 2 if m.fused_qkv else 0
        # layer input + the normed input (the attention module's argument, alive until it returns) + q + the call
        attn_phase = max(attn_phase, 2 * z.resid + z.q + transient_kv + a.kv_repeat_bytes + fused
                         + call_peak_bytes(inputs, a, z) + cp_buffer)
    # layer input (the caller still holds it) + the new residual + the normed input + gate, up, act·up (SwiGLU)
    # or fc1, act (GELU)
    ffn_phase = 3 * z.resid + ffn_block_peak(inputs, z)
    rows = z.b * (z.n if inputs.logits == "all" and m.kind == "decoder" else 1)
    logits_phase = z.resid + rows * z.V * (z.es + 4)  # logits in dtype, then .float() (HF generate)
    model_level = model_level_bytes(inputs, z) + sum(a.mask_bytes for a in attn)
    detail = {"attention_phase_bytes": attn_phase, "ffn_phase_bytes": ffn_phase, "logits_phase_bytes": logits_phase,
              "model_level_bytes": model_level}
    return max(attn_phase + model_level, ffn_phase + model_level, logits_phase), detail


def call_peak_bytes(inputs: PlanInputs, a: LayerAttention, z: Sizes) -> int:
    """The attention call's peak extra bytes (prefill): the estimator's for the selected backend, except where the
    model changes the eager core: gpt-oss' sinks (blocks.sinks_eager_peak, plus repeat_kv's per-head k and v)."""
    m = inputs.model
    if m.attention_sinks and a.memory.selected_backend == "eager":
        q_len, kv_len = a.memory.call.q_len, a.memory.call.kv_len
        repeat = 2 * z.b * kv_len * inputs.q_heads_per_gpu * m.head_dim * z.es if m.q_heads != m.kv_heads else 0
        return repeat + sinks_eager_peak(z.b, inputs.q_heads_per_gpu, q_len, kv_len, z.es)
    return a.memory.peak_extra_bytes


def moe_shape(inputs: PlanInputs, z: Sizes) -> MoeShape:
    """The MoE block one GPU runs: every token routed to top-k of the experts it holds (tp splits each expert's
    intermediate; expert parallelism dispatches tokens, which leaves T·k rows per GPU on average)."""
    m, tp = inputs.model, inputs.tp
    return MoeShape(T=z.b * z.n, H=m.hidden, F=cdiv(m.moe_ffn, tp), k=m.experts_per_token,
                    E=m.experts, router=m.router_style, bias=m.expert_bias, shared_F=cdiv(m.shared_experts_ffn, tp),
                    shared_gate=m.shared_expert_gate)


def weight_element_bytes(inputs: PlanInputs, z: Sizes) -> int:
    """Element bytes of the weights' dtype (a training recipe's, else the plan's): what the experts compute in
    (grouped_mm casts its input to the weight dtype, not autocast's) and what an encoder's pixels are cast to."""
    return inputs.recipe.weight_bytes if inputs.recipe else z.es


def ffn_block_peak(inputs: PlanInputs, z: Sizes) -> int:
    """Bytes the MLP of the worst layer allocates above its input during a forward without autograd: a dense
    gated MLP holds act(gate), up and their product (3·T·F), a GELU MLP fc1 and act (2·T·F); a MoE block what
    blocks.moe_forward_peak replays."""
    m = inputs.model
    # a fused gate_up projection (Phi-3) returns one (T, 2F) tensor that chunk() views: it stays alive until the
    # MLP returns, so act(gate) and the product come on top of both halves (4·T·F)
    widths = 4 if m.fused_gate_up else (3 if m.gated_ffn else 2)
    dense = widths * z.b * z.n * z.F * z.es if m.layers > m.moe_layers else 0
    if not m.moe_layers:
        return dense
    return max(dense, moe_forward_peak(moe_shape(inputs, z), z.rs, weight_element_bytes(inputs, z), z.es))


def model_level_bytes(inputs: PlanInputs, z: Sizes) -> int:
    """Alive while the layers run, outside any layer: the embedding output (HF's model forward keeps
    `inputs_embeds` referenced) and, for decoders (RoPE assumed), the cos/sin tables (n·head_dim each) and the
    int64 position ids; for an encoder, its input pixels (`pixel_bytes`). Measured on whole HF models,
    tests/data/hf_model_prefill_peak.csv."""
    if inputs.model.kind != "decoder":
        return z.resid + pixel_bytes(inputs, z)
    return z.resid + 2 * z.n * inputs.model.head_dim * z.rs + z.n * 8


def pixel_bytes(inputs: PlanInputs, z: Sizes) -> int:
    """An image encoder's `pixel_values` (batch × channels × pixels, in the weights' dtype): the caller holds them
    for the whole forward (and autograd keeps them for the patch convolution's weight gradient). HF's ViTModel.forward
    (transformers 5.17 models/vit/modeling_vit.py) casts pixels of another dtype to the projection's before the
    embeddings, and keeps that copy to the end: the plan assumes the common `pixel_values.to(model.dtype)`, one
    tensor. At the config's own resolution the image is image_size² pixels (HF floors the patch grid, so a ViT-H/14
    at 1024 px keeps every pixel); at another token count, (tokens - 1) patches of patch_size² pixels."""
    m = inputs.model
    if not m.holds_pixels:
        return 0
    if inputs.seq_len == m.native_tokens:
        per_image = m.image_size ** 2
    else:
        per_image = max(inputs.seq_len - 1, 1) * m.patch_size ** 2
    return z.b * m.channels * per_image * weight_element_bytes(inputs, z)


def training_peak(inputs: PlanInputs, attn: list[LayerAttention], z: Sizes,
                  grads: int) -> tuple[dict[str, int], dict[str, int]]:
    """The components that change during a training step, at its peak: {activations, weight_casts, gradients,
    optimizer_step}, and the detail.

    Gradients stay resident with `persistent_grads`, across micro-batches (accumulation) and under ZeRO ≥ 2
    (sharded buffers); otherwise (`zero_grad(set_to_none=True)`, PyTorch's default) they are allocated during
    backward, head first, layer by layer, embedding last, while each layer's saved activations (and, under
    autocast, its 16-bit weight copies) are freed. The peak is the largest of: the loss backward (no gradients
    yet), the top layer's backward, the bottom layer's backward, the end of backward, and the optimizer step
    (every gradient, plus the step's temporaries; estimator/model/recipes.py). The optimizer state exists in every
    phase (it is created on the first step and kept), so it is not part of this comparison.
    Checked against Hugging Face models on the H200 (validation/data/h200_hf_*.csv)."""
    m = inputs.model
    activations, detail = training_activations(inputs, attn, z)
    casts_layer, casts_head = detail["weight_casts_per_layer_bytes"], detail["weight_casts_head_bytes"]
    casts_all = casts_layer * m.layers + casts_head
    step_grads, step_transient = optimizer_step_bytes(inputs)
    step = {"activations": 0, "weight_casts": 0, "gradients": step_grads, "optimizer_step": step_transient}
    resident = inputs.persistent_grads or inputs.accumulation_steps > 1 or inputs.zero >= 2 or grads == 0
    fixed = detail["model_level_bytes"] + detail["gradient_buffers_bytes"]
    stored, transient = detail["stored_layers_bytes"], detail["backward_transient_bytes"]
    checkpointed = inputs.checkpointing in ("full", "hf")
    # Autocast's cache holds every 16-bit weight copy until the forward's autocast region closes. Without
    # checkpointing autograd also saves each copy until that layer's backward; under checkpointing the saved copies
    # are dropped (recomputed in backward, one layer at a time) and only the output head's survives the forward.
    casts_saved = casts_head + (0 if checkpointed else casts_layer * m.layers)
    if inputs.finetune != "full":
        # autocast caches only casts of weights that need a gradient: the frozen base's copies live only where
        # autograd saved them
        casts_all = casts_saved
    if resident:
        phases = [("backward", {"activations": activations, "weight_casts": casts_all, "gradients": grads,
                                "optimizer_step": 0})]
    else:
        tp, gb = inputs.tp, inputs.recipe.weight_bytes
        if m.kind == "decoder":
            head, emb = -(-m.vocab // tp) * m.hidden, (0 if m.tied_embeddings else -(-m.vocab // tp) * m.hidden)
        else:
            head, emb = m.head_params, m.embedding_params
        head_grad = (head + m.norm_params) * gb
        layer_grad = max(0, grads - head_grad - emb * gb) // m.layers
        top_ffn_grad = detail["top_layer_ffn_params"] * gb
        if inputs.finetune != "full":  # only the adapters get gradients (fp32), layer by layer
            head_grad, layer_grad = 0, grads // m.layers
            top_ffn_grad = sum(inputs.lora_rank * (lin.fan_in + lin.fan_out) for lin in adapted_linears(inputs)
                               if lin.group == "mlp") * ADAPTER_BYTES

        def phase(act, casts, grad):
            return {"activations": act, "weight_casts": casts, "gradients": grad, "optimizer_step": 0}

        layer_casts_live = casts_layer if checkpointed else casts_layer * m.layers
        phases = [("end of forward", phase(fixed + stored + detail["forward_logits_bytes"], casts_all, 0)),
                  ("loss", phase(fixed + stored + detail["logits_phase_bytes"], casts_saved, 0)),
                  ("top layer backward", phase(fixed + stored + transient, layer_casts_live, head_grad)),
                  # the MLP's backward runs first: when attention's transient is the larger, the top layer's MLP
                  # gradients exist (a MoE layer's experts: GBs) and its saved MLP tensors are gone
                  ("top layer attention backward",
                   phase(fixed + stored - detail["layer_ffn_bytes"] * (not checkpointed)
                         + detail["backward_attention_transient_bytes"], layer_casts_live,
                         head_grad + top_ffn_grad)),
                  ("bottom layer backward", phase(fixed + stored // m.layers + transient, casts_layer,
                                                  head_grad + (m.layers - 1) * layer_grad)),
                  ("end of backward", phase(detail["model_level_bytes"], 0, grads))]
    backward_peak = max((p for _, p in phases), key=lambda p: sum(p.values()))
    # the same forward/backward with the weights frozen (requires_grad False, the gradient still flowing through:
    # a VLM's language model under `--trainable projector`): no weight gradients, so the peak is the phase with the
    # most activations and live weight casts (each Linear keeps its cast weight for grad_input)
    frozen_peak = max(p["activations"] + p["weight_casts"] for _, p in phases)
    phases.append(("optimizer step", step))
    name, peak = max(phases, key=lambda p: sum(p[1].values()))
    return peak, {**detail, "weight_casts_bytes": casts_all,
                  "backward_peak_activations_bytes": backward_peak["activations"],
                  "backward_peak_bytes": sum(backward_peak.values()),
                  "backward_peak_frozen_bytes": frozen_peak,
                  "peak_phase_" + name.replace(" ", "_"): sum(peak.values())}


@dataclass(frozen=True, kw_only=True)
class LayerSaves:
    """What one layer saves for its backward outside the attention core, and its backward's FFN transient
    (bytes per GPU; `moe_extra`: what the MoE and dense layers save less than the worst kind, over all layers)."""

    norm: int  # every norm of the layer
    attn_in: int  # the normed input the q, k, v projections save
    ffn: int  # the MLP's saved tensors (the worst kind of MLP when the model has MoE layers)
    ffn_grads: int  # the MLP backward's transient
    moe_extra: int
    layer_input: int  # what full checkpointing keeps per layer
    frozen_out_in: int = 0  # LoRA/QLoRA: o_proj's input that a frozen o_proj does not keep (subtracted)


def layer_saves(inputs: PlanInputs, z: Sizes) -> LayerSaves:
    """Korthikanti et al. 2022 §4, generalised; checked against a HF LlamaDecoderLayer
    (tests/data/hf_layer_saved_bytes.csv)."""
    m, b, n, es, rs = inputs.model, z.b, z.n, z.es, z.rs
    # Sequence parallelism (Korthikanti et al. §4.2.2) splits the residual-stream tensors tp ways as well.
    n_sp = cdiv(n, inputs.tp if inputs.sequence_parallel else 1)
    # Each norm saves: HF RMSNorm its fp32 input, the normalised tensor (residual dtype) and rsqrt (b·n fp32);
    # LayerNorm its input, mean and rstd (b·n fp32 each).
    if m.norm == "rmsnorm":
        norm_save = m.norms_per_layer * (b * n_sp * m.hidden * (4 + rs) + b * n_sp * 4)
    else:
        norm_save = m.norms_per_layer * (b * n_sp * m.hidden * rs + 2 * b * n_sp * 4)
    # the normed input the projections save: one tensor shared by q/k/v (and one by the FFN), or under autocast
    # one 16-bit cast per linear (q, k, v: 3; gate, up: 2)
    normed = b * n_sp * m.hidden * es
    # (Phi-3's fused qkv_proj and gate_up_proj are one linear each: one cast)
    attn_in_saved = (1 if m.fused_qkv else 3) * normed if z.autocast else normed
    ffn_in_saved = (2 if m.gated_ffn and not m.fused_gate_up else 1) * normed if z.autocast else normed
    ffn_save = ffn_in_saved + (4 if m.gated_ffn else 2) * b * n * z.F * es  # + gate, act, up, product (SwiGLU)
    ffn_grads = 2 * b * n * z.F * es
    # MoE layers (grouped_mm experts, blocks.moe_saved_bytes): what they save replaces the dense MLP's in
    # `moe_layers` layers; the worst layer and the backward transient take the larger of the two kinds
    # (the attention loop stores every layer with the worst kind's MLP; `moe_extra` takes back the difference)
    moe_extra = 0
    dense_layers = m.layers - m.moe_layers
    if m.moe_layers:
        shape, wb = moe_shape(inputs, z), weight_element_bytes(inputs, z)
        moe_save = moe_saved_bytes(shape, rs, wb, es, z.autocast)
        worst_ffn = max(ffn_save if dense_layers else 0, moe_save)
        moe_extra = m.moe_layers * (moe_save - worst_ffn) + dense_layers * (ffn_save - worst_ffn)
        ffn_save = worst_ffn
        ffn_grads = max(ffn_grads if dense_layers else 0, moe_backward_transient(shape, wb))
    if inputs.finetune != "full":
        # a frozen base (estimator/model/finetune.py): no linear keeps its input, no norm its scaled output; the
        # adapters keep theirs; the MLP keeps gate, act(gate), up (SwiGLU) or fc1's output (GELU)
        attn_adapters, mlp_adapters = adapter_saved_bytes(inputs, b * n, es, z.autocast)
        if m.norm == "rmsnorm":
            norm_save = m.norms_per_layer * (b * n_sp * m.hidden * 4 + b * n_sp * 4)
        ffn_frozen = (3 if m.gated_ffn else 1) * b * n * z.F * es + mlp_adapters
        ffn_grads += adapter_backward_bytes(inputs, b * n, z.autocast) + dequantised_weight_bytes(inputs)
        return LayerSaves(norm=norm_save, attn_in=attn_adapters, ffn=ffn_frozen, ffn_grads=ffn_grads,
                          moe_extra=0, layer_input=b * n_sp * m.hidden * rs,
                          frozen_out_in=b * n * inputs.q_heads_per_gpu * m.v_head * es)
    return LayerSaves(norm=norm_save, attn_in=attn_in_saved, ffn=ffn_save, ffn_grads=ffn_grads, moe_extra=moe_extra,
                      layer_input=b * n_sp * m.hidden * rs)


def weight_casts(inputs: PlanInputs, z: Sizes) -> tuple[int, int]:
    """(per layer, output head) bytes of autocast's 16-bit copies of every matmul weight, saved for its backward
    (0 without autocast); the routed experts get none (grouped_mm is not autocast-enabled: they run in the
    weights' dtype)."""
    m = inputs.model
    cast_params = m.matmul_params_per_layer
    if m.moe_layers:
        routed = m.experts_per_token * 3 * m.hidden * m.moe_ffn
        cast_params = max(p - routed * f for p, f in zip(m.matmul_params_by_layer, m.moe_layer_flags, strict=True))
    casts_layer = cast_params // inputs.tp * z.es if z.autocast else 0
    casts_head = z.V * m.hidden * z.es if z.autocast and m.kind == "decoder" else 0
    return casts_layer, casts_head


def attention_layers_saved(inputs: PlanInputs, attn: list[LayerAttention], z: Sizes,
                           saves: LayerSaves) -> tuple[int, int, int, dict[str, int]]:
    """Over the layer kinds: (stored bytes of every layer, the largest backward transient, the largest attention
    backward transient without checkpointing, the worst layer's parts) under the plan's checkpointing."""
    m, b, es = inputs.model, z.b, z.es
    stored = transient = attn_transient = 0
    worst: dict[str, int] = {}
    for a in attn:
        est, backend = a.memory, a.memory.selected_backend
        retained = est.forward_retained_bytes or 0
        if backend in ("math", "eager") and inputs.cp > 1:  # every ring block's score matrix is saved
            retained *= inputs.cp
        # q, k, v stay alive because the kernel saves them; math saves fp32 copies instead, and eager with GQA
        # saves its repeated k, v (both inside `retained`)
        qkv_saved = {"math": 0, "eager": z.q if m.q_heads != m.kv_heads else z.q + z.kv}.get(
            backend, z.q + (a.kv_repeat_bytes or z.kv))  # SDPA with a mask saves the repeated k, v
        if m.fused_qkv and backend not in ("math", "eager") and not a.kv_repeat_bytes:
            # the saved v is a view of the fused qkv_proj output: the whole (q, k, v) buffer stays alive beside
            # the rotated q and k the kernel saves
            qkv_saved += z.q + z.kv // 2
        none_layer = saves.norm + saves.attn_in + qkv_saved + retained + saves.ffn - saves.frozen_out_in
        if none_layer > sum(worst.values()):
            worst = {"layer_attention_bytes": saves.attn_in + qkv_saved + retained, "layer_ffn_bytes": saves.ffn,
                     "layer_norms_bytes": saves.norm, "layer_attention_core_bytes": qkv_saved + retained}
        attn_bwd = max(0, (est.peak_extra_bytes or 0) - retained)
        if m.attention_sinks and backend == "eager":  # gpt-oss: sink column, softmax in the scores' dtype
            call = est.call
            retained = sinks_eager_saved(b, call.q_heads, call.q_len, call.kv_len, m.head_dim, es, z.autocast)
            none_layer = saves.norm + saves.attn_in + retained + saves.ffn  # q, k, v inside sinks_eager_saved
            attn_bwd = sinks_eager_backward(b, call.q_heads, call.q_len, call.kv_len, es, z.autocast)
        if inputs.checkpointing == "none":
            layer, bwd = none_layer, max(attn_bwd, saves.ffn_grads)
        elif inputs.checkpointing == "selective":  # attention core recomputed; q, k, v and out kept (§4.2)
            layer = saves.norm + saves.attn_in + z.q + z.kv + z.q + saves.ffn - saves.frozen_out_in
            bwd = max(est.peak_extra_bytes or 0, saves.ffn_grads)
        else:  # full, hf: keep each layer's input, recompute the layer during its backward
            layer, bwd = saves.layer_input, none_layer + max(attn_bwd, saves.ffn_grads)
        stored += layer * a.layers
        transient = max(transient, bwd)
        attn_transient = max(attn_transient, attn_bwd if inputs.checkpointing == "none" else 0)
    return stored, transient, attn_transient, worst


def loss_bytes(inputs: PlanInputs, z: Sizes) -> tuple[int, int]:
    """(the loss backward, the end of the forward) bytes of the logits' phase.

    Loss backward (HF ForCausalLMLoss: logits.float(), cross_entropy): the saved fp32 log-softmax + its incoming
    and outgoing fp32 gradients, 12 B/logit; the 16-bit logits are gone when the training loop keeps only the
    loss (HF Trainer's compute_loss, Lightning's training_step). Measured on the H200 (h200_hf_recipes.csv);
    a loop that keeps the model output through backward adds the logits (dtype bytes each). The end of the
    forward: logits (dtype), their fp32 copy and the saved log-softmax."""
    m = inputs.model
    rows = z.b * z.n if m.kind == "decoder" else z.b
    logits_phase = z.resid + rows * z.V * 12
    forward_logits = z.resid + rows * z.V * (z.es + 8)
    if m.final_logit_softcap:  # Gemma-2: logits / cap, tanh, · cap: tanh's output is saved until its backward
        logits_phase += rows * z.V * z.es
        forward_logits += rows * z.V * z.es
    return logits_phase, forward_logits


def training_activations(inputs: PlanInputs, attn: list[LayerAttention], z: Sizes) -> tuple[int, dict[str, int]]:
    """Stored activations of every layer (`layer_saves`, `attention_layers_saved`) + the larger of one layer's
    backward transient and the loss backward (`loss_bytes`). Under autocast (bf16-mixed, 16-mixed) the residual
    stream, the norms and the embedding output are fp32 (`z.rs`), each linear saves its own 16-bit cast of its
    input, and the 16-bit weight copies are counted apart (`weight_casts_*`)."""
    m = inputs.model
    saves = layer_saves(inputs, z)
    casts_layer, casts_head = weight_casts(inputs, z)
    stored, transient, attn_transient, worst = attention_layers_saved(inputs, attn, z, saves)
    if inputs.checkpointing in ("none", "selective"):
        stored += saves.moe_extra
    logits_phase, forward_logits = loss_bytes(inputs, z)
    model_level = model_level_bytes(inputs, z) + sum(a.mask_bytes for a in attn)  # masks live the whole step
    grad_buffers = 2 * z.resid  # backward: the gradient flowing into a layer and the residual branch's
    top_moe = m.moe_layer_flags[-1] if m.moe_layers else False
    top_ffn = (m._moe_ffn_params(inputs.tp, inputs.ep) if top_moe else m._dense_ffn_params(inputs.tp))
    detail = {"stored_layers_bytes": stored, "backward_transient_bytes": transient,
              "backward_attention_transient_bytes": attn_transient, "top_layer_ffn_params": top_ffn,
              "logits_phase_bytes": logits_phase, "forward_logits_bytes": forward_logits,
              "model_level_bytes": model_level,
              "gradient_buffers_bytes": grad_buffers, "weight_casts_per_layer_bytes": casts_layer,
              "weight_casts_head_bytes": casts_head, **worst}
    return model_level + stored + grad_buffers + max(transient, logits_phase), detail


def largest_allocation_bytes(inputs: PlanInputs, attn: list[LayerAttention], z: Sizes) -> int:
    """The largest single tensor the step allocates: the loss's fp32 logits-sized tensors (training) or the fp32
    copy of the kept logits (inference), a materialised fp32 score matrix (math, eager), the FFN's widest
    intermediate, or the largest parameter-sized tensor (the embedding, its gradient or moment).

    The CUDA caching allocator serves a request from one free cached block at least as large, or from a new
    segment; once freed blocks of a step have been split by smaller requests, a late large request can need fresh
    memory although enough is free in pieces. On the H200 two training runs planned at 136.8 and 133.5 GiB of the
    139.2 GiB the allocator can hand out ran out of memory asking for 14.7 and 39.5 GiB (logits-sized tensors of
    the loss; validation/data/h200_hf_heldout.csv). A plan therefore fits only with this much left free."""
    m = inputs.model
    training = inputs.mode == "training"
    rows = z.b * (z.n if training or (inputs.logits == "all" and m.kind == "decoder") else 1)
    logits = rows * z.V * 4
    # math and eager softmax in fp32; gpt-oss's sink path softmaxes the 16-bit scores at inference
    fp32_softmax = training or not m.attention_sinks
    scores = max((a.memory.scores_bytes * (4 // z.es if fp32_softmax else 1)
                  if a.memory.selected_backend in ("math", "eager") else 0) for a in attn) if attn else 0
    ffn = z.b * z.n * z.F * (4 if z.autocast and m.experts else z.es)
    state_bytes = 4 if training else z.es
    # a frozen embedding (LoRA, QLoRA) gets no gradient or moments: no embedding-sized tensor is allocated
    embedding = 0 if training and inputs.finetune != "full" else z.V * m.hidden * state_bytes
    return max(logits, scores, ffn, embedding)
