"""FLOPs and roofline time of a whole-model plan : prefill, decode per token and the
training step, and the attention / FFN / embedding shares. Pure arithmetic over the plan's inputs and the
attention estimator's per-layer estimates."""

from __future__ import annotations

from typing import TYPE_CHECKING

from estimator.call.config import element_bytes
from estimator.hardware import GPU
from estimator.model.finetune import trainable_params
from estimator.units import cdiv

if TYPE_CHECKING:
    from estimator.model.inputs import PlanInputs
    from estimator.model.layer_attention import LayerAttention

# Roofline efficiencies. GEMM: median achieved / dense peak of Llama-3-8B-shaped bf16 GEMMs on the H200, 0.689
# over 20 shapes (0.37 at 512 tokens to 0.78 at 32k; validation/data/h200_bench_plan_gemm.csv,
# `python bench/bench_plan_gemm.py --preset llama-3-8b --gpu h200`).
GEMM_EFFICIENCY = 0.70  # achieved / dense peak for large bf16 GEMMs
# HBM: the H200 calibration set's q_len-1 decode calls (validation/data/h200_calibration.csv, batch 4, 32/8 heads,
# torch 2.11) read a 131,072-token KV cache at 0.78 (flash) to 0.87 (auto -> cuDNN) of the datasheet bandwidth;
# shorter caches are dominated by a ~0.07 ms per-call overhead that this roofline leaves out.
HBM_EFFICIENCY = 0.80  # achieved / datasheet bandwidth for streaming reads (decode weight + KV reads)


# --- FLOPs and time -----------------------------------------------------------------------------------------

def plan_flops(inputs: PlanInputs, attn: list[LayerAttention], *, unsupported: bool) -> dict:
    """Whole-model FLOPs, PyTorch FlopCounterMode convention (2 per multiply-add; attention 4·B·H·L·S·D per
    layer, causal not halved). `forward_executed` scales each layer's attention by the estimator's
    executed/counted ratio (fused kernels skip masked causal tiles). Training step = 3 × forward
    (Narayanan et al. 2021, eq. 3) + one more forward under full recompute (+ the attention core under selective);
    LoRA/QLoRA: less the frozen linears' weight-gradient GEMMs, plus the adapters' forward and backward."""
    m, B, N = inputs.model, inputs.batch, inputs.seq_len
    attn_mat = m._attention_matmul_params()  # q, k, v, o (MLA: its down/up projections; v width v_head_dim)
    ffn_mat, moe_mat = ffn_matmul_params(m)
    dense_layers = m.layers - m.moe_layers
    proj = 2 * attn_mat * m.layers * B * N
    ffn = 2 * ffn_mat * dense_layers * B * N
    # MoE layers: each token runs the router, its top-k experts and the shared expert (active parameters)
    expert = 2 * moe_mat * m.moe_layers * B * N
    core = sum(a.layers * 4 * B * m.q_heads * N * a.span * m.head_dim for a in attn)
    executed = 0.0
    for a in attn:
        counted = a.timing.flops if not unsupported else 0
        ratio = a.timing.executed_flops / counted if counted else 1.0
        executed += a.layers * 4 * B * m.q_heads * N * a.span * m.head_dim * ratio
    if m.kind == "decoder":
        rows = B * N if (inputs.mode == "training" or inputs.logits == "all") else B
        embed = 2 * m.hidden * m.vocab * rows  # LM head; the embedding lookup does no FLOPs
    else:  # patch conv over the patches, classifier head over the class token
        embed = 2 * m.channels * m.patch_size**2 * m.hidden * B * max(N - 1, 0) + 2 * m.hidden * m.vocab * B
    forward = proj + ffn + expert + core + embed
    step = forward
    if inputs.mode == "training":
        step = 3 * forward + (forward if inputs.checkpointing == "full" else 0)
        step += core if inputs.checkpointing == "selective" else 0
        if inputs.finetune != "full":  # a frozen base computes no weight gradients; the adapters' 3 x 2 FLOPs each
            step += -(proj + ffn + embed) + 6 * B * N * trainable_params(inputs)
    decode = None
    if m.kind == "decoder":  # one new token of one sequence, attending over a cache of min(N, window) tokens
        decode = (2 * (attn_mat * m.layers + ffn_mat * dense_layers + moe_mat * m.moe_layers) + 2 * m.hidden * m.vocab
                  + sum(a.layers * 4 * m.q_heads * a.span * m.head_dim for a in attn))
    shares = {"attention": safe_share(proj + core, forward), "attention_core": safe_share(core, forward),
              "ffn": safe_share(ffn, forward), "expert_ffn": safe_share(expert, forward),
              "embedding": safe_share(embed, forward)}
    return {"forward": forward, "forward_executed": proj + ffn + expert + round(executed) + embed, "step": step,
            "decode": decode, "shares": shares}


def ffn_matmul_params(m) -> tuple[int, int]:
    """(dense MLP, MoE MLP) GEMM weights one token runs through in one layer: (3 if gated else 2)·H·ffn; router
    E·H + top-k experts k·3·H·moe_ffn + shared expert 3·H·shared (+ its gate H). Biases and norms left out."""
    dense = (3 if m.gated_ffn else 2) * m.hidden * m.ffn
    if not m.experts:
        return dense, 0
    moe = (m.experts * m.hidden + m.experts_per_token * 3 * m.hidden * m.moe_ffn + 3 * m.hidden * m.shared_experts_ffn
           + m.shared_expert_gate * m.hidden)
    return dense, moe


def plan_times(inputs: PlanInputs, attn: list[LayerAttention], gpu: GPU, params_gpu: int, weights: int,
               kv_cache: int, flops: dict, *, unsupported: bool) -> dict:
    """Per-GPU wall time (ms) of the whole job on the planned GPUs: the kernel-class model of
    estimator/model/step_time.py (constants measured on the H200, or `inputs.calibration`, scaled to `gpu`'s
    datasheet peaks) + the exposed communication of estimator/model/comm.py. The attention / FFN / embedding
    shares keep the roofline's split by model part (`_roofline_times`); `time_split` is the kernel-class split."""
    from estimator.model.calibration import load_constants
    from estimator.model.comm import communication
    from estimator.model.decode_time import DECODE_KEYS
    from estimator.model.step_time import TIME_ERROR_BAND, step_times

    roof = _roofline_times(inputs, attn, gpu, params_gpu, weights, kv_cache, flops, unsupported=unsupported)
    consts = load_constants(inputs.calibration).with_overrides(inputs.gemm_efficiency, inputs.hbm_efficiency)
    st = step_times(inputs, attn, gpu, params_gpu, weights, kv_cache, consts, unsupported=unsupported)
    m = inputs.model
    core_f = sum(a.layers * ((a.forward_timing or a.timing).time_ms or 0.0) for a in attn) if not unsupported else 0
    core_fb = sum(a.layers * (a.timing.time_ms or 0.0) for a in attn) if not unsupported else 0
    layers = max(m.layers, 1)
    comm = communication(inputs, gpu, params_gpu, {
        "core_forward_ms_per_layer": core_f / layers / inputs.cp,
        "core_backward_ms_per_layer": max(core_fb - core_f, 0.0) / layers / inputs.cp,
        "backward_ms": st.get("backward_time_ms", 0.0), "forward_ms": st.get("forward_time_ms", 0.0)})
    training = inputs.mode == "training"
    prefill = st["prefill_time_ms"] + (0.0 if training else comm["total_ms"])
    step = st["step_time_ms"] + comm["total_ms"]
    # decode in each regime (estimator/model/decode_time.py: decode_regimes), each with the step's collectives
    regimes = {k: st.get(k) for k in DECODE_KEYS if k != "decode_graph_builds_per_step"}
    regimes = {k: (v + comm["decode_ms_per_token"] if v is not None else None) for k, v in regimes.items()}
    decode = regimes["decode_time_ms_per_token"]
    out = dict(roof)
    out.update(prefill_time_ms=prefill, step_time_ms=step, **regimes,
               decode_graph_builds_per_step=st.get("decode_graph_builds_per_step"),
               decode_first_pass_ms_per_token=decode,
               prefill_tokens_per_s=inputs.batch * inputs.seq_len / (prefill / 1e3) if prefill else 0.0,
               decode_tokens_per_s=inputs.batch / (decode / 1e3) if decode else None,
               communication_time_ms=comm["total_ms"],
               communication={k: (round(v, 4) if isinstance(v, float) else v) for k, v in comm.items()},
               time_split=st["time_split"],
               time_model={"measured_on": consts.device_name, "constants": consts.source,
                           "scaled_to": gpu.name if gpu.name != consts.ref_gpu else None,
                           "gemm_efficiency_override": inputs.gemm_efficiency,
                           "hbm_efficiency_override": inputs.hbm_efficiency,
                           "error_band": {k: list(v) for k, v in TIME_ERROR_BAND.items()},
                           # each phase's host time that overlaps its GPU work (time_split keeps only the part
                           # the GPU waited for)
                           "host_ms_by_phase": {k: round(v, 4) for k, v in st.get("host_ms", {}).items()}})
    if training:
        out["time_split"] = {**st["time_split"], "communication": comm["total_ms"]}
    return out


def _roofline_times(inputs: PlanInputs, attn: list[LayerAttention], gpu: GPU, params_gpu: int, weights: int,
                    kv_cache: int, flops: dict, *, unsupported: bool) -> dict:
    """Per-GPU wall time (ms) by roofline, kept for the shares by model part: GEMMs and memory-bound passes,
    t = max(FLOPs / (peak·GEMM_EFFICIENCY), bytes / (HBM bandwidth·HBM_EFFICIENCY)), attention cores from
    estimate_call's time_ms (÷ cp: a load-balanced ring splits the work evenly). Decode is bandwidth-bound:
    weights + KV cache read once per step. Communication (TP all-reduce, CP ring) is not modelled."""
    m = inputs.model
    es = element_bytes(inputs.dtype)
    peak = gpu.peak_flops_per_s[inputs.dtype] * (inputs.gemm_efficiency or GEMM_EFFICIENCY)
    bw = gpu.hbm_bytes_per_s * (inputs.hbm_efficiency or HBM_EFFICIENCY)
    b, n, H, tp = inputs.batch_per_gpu, inputs.tokens_per_gpu, m.hidden, inputs.tp
    hq, hk, d, F = inputs.q_heads_per_gpu, inputs.kv_heads_per_gpu, m.head_dim, cdiv(m.ffn, tp)
    V = cdiv(m.vocab, tp) if m.kind == "decoder" else m.vocab
    T = b * n  # tokens on this GPU

    def roof_ms(flop_count: float, byte_count: float) -> float:
        return max(flop_count / peak, byte_count / bw) * 1e3

    attn_mat = cdiv(m._attention_matmul_params(), tp)
    ffn_mat = (3 if m.gated_ffn else 2) * H * F
    proj_ms = m.layers * roof_ms(2 * attn_mat * T, (attn_mat + T * (2 * H + 2 * (hq + hk) * d)) * es)
    act_passes = 3 if m.gated_ffn else 2  # act(gate)·up: read 2, write 1; GELU: read 1, write 1
    dense_layers = m.layers - m.moe_layers
    ffn_ms = dense_layers * (roof_ms(2 * ffn_mat * T, (ffn_mat + T * (2 * H + act_passes * F)) * es)
                             + act_passes * T * F * es / bw * 1e3)
    expert_ms = 0.0
    if m.moe_layers:  # active GEMMs over T·k rows; every resident expert's weights read once per forward
        _, moe_mat = ffn_matmul_params(m)
        Fe, S = cdiv(m.moe_ffn, tp), T * m.experts_per_token
        resident = cdiv(m.experts, inputs.ep) * 3 * H * Fe + 3 * H * cdiv(m.shared_experts_ffn, tp)
        expert_ms = m.moe_layers * (roof_ms(2 * cdiv(moe_mat, tp) * T, (resident + S * (2 * H + 3 * Fe)) * es)
                                    + 3 * S * Fe * es / bw * 1e3)
    # norms (read + write) and two residual adds (read 2, write 1) per layer, memory-bound
    other_ms = m.layers * (2 * m.norms_per_layer + 6) * T * H * es / bw * 1e3

    def core_ms(which: str) -> float:
        if unsupported:
            return 0.0
        return sum(a.layers * (getattr(a, which).time_ms or 0.0) for a in attn) / inputs.cp

    if m.kind == "decoder":
        rows = T if (inputs.mode == "training" or inputs.logits == "all") else b
        embed_ms = 2 * T * H * es / bw * 1e3 + roof_ms(2 * H * V * rows, H * V * es + rows * V * (es + 4))
    else:
        conv = m.channels * m.patch_size**2 * H
        embed_ms = roof_ms(2 * conv * T, conv * es + T * H * es) + roof_ms(2 * H * V * b, H * V * es)
    if inputs.mode == "inference":
        core = core_ms("timing")
        forward_ms = step_ms = proj_ms + ffn_ms + expert_ms + core + other_ms + embed_ms
        parts = {"attention": proj_ms + core, "ffn": ffn_ms, "expert_ffn": expert_ms, "embedding": embed_ms}
    else:
        core_fwd, core_fb = core_ms("forward_timing"), core_ms("timing")
        forward_ms = proj_ms + ffn_ms + expert_ms + core_fwd + other_ms + embed_ms
        recompute = {"none": 0.0, "selective": core_fwd,
                     "full": proj_ms + ffn_ms + expert_ms + core_fwd + other_ms}
        recompute["hf"] = recompute["full"]  # both re-run each layer's forward in its backward
        adamw_ms = params_gpu * (2 * es + (24 if es < 4 else 16)) / bw * 1e3  # fused AdamW: read and write state
        k = inputs.accumulation_steps  # micro-batches per step; the optimizer runs once
        forward_ms *= k
        step_ms = k * (3 * (proj_ms + ffn_ms + expert_ms + other_ms + embed_ms) + core_fb
                       + recompute[inputs.checkpointing])
        step_ms += adamw_ms
        full = inputs.checkpointing == "full"
        attention_ms = (3 + full) * proj_ms + core_fb + (core_fwd if inputs.checkpointing != "none" else 0)
        parts = {"attention": k * attention_ms, "ffn": k * (3 + full) * ffn_ms,
                 "expert_ffn": k * (3 + full) * expert_ms, "embedding": k * 3 * embed_ms}
    decode_ms = decode_tps = None
    if m.kind == "decoder" and inputs.mode == "inference":
        moe_gpu = cdiv(ffn_matmul_params(m)[1], tp)
        decode_gpu_flops = b * (2 * (m.layers * attn_mat + dense_layers * ffn_mat + m.moe_layers * moe_gpu + H * V)
                                + sum(a.layers * 4 * hq * cdiv(a.span, inputs.cp) * d for a in attn))
        decode_ms = roof_ms(decode_gpu_flops, weights + kv_cache + b * V * (es + 4))
        decode_tps = inputs.batch / (decode_ms / 1e3)
    shares = {k: safe_share(v, step_ms) for k, v in parts.items()}
    return {"prefill_time_ms": forward_ms, "step_time_ms": step_ms, "decode_time_ms_per_token": decode_ms,
            "prefill_tokens_per_s": inputs.batch * inputs.seq_len / (forward_ms / 1e3) if forward_ms else 0.0,
            "decode_tokens_per_s": decode_tps, "attention_share": shares["attention"], "ffn_share": shares["ffn"],
            "expert_ffn_share": shares["expert_ffn"],
            "embedding_share": shares["embedding"], "other_share": max(0.0, 1.0 - sum(shares.values()))}


def safe_share(part: float, total: float) -> float:
    return 0.0 if total <= 0 else part / total
