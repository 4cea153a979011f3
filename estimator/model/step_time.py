"""Whole-model time from measured kernel classes: prefill, decode per token and the training step (forward,
backward, optimizer), each split into its kernel classes. Pure arithmetic; the constants come from a kernel
calibration file (`estimator/model/calibration.py`), by default the one measured on the H200; each layer's
kernels are priced in estimator/model/layer_passes.py:

    python -m validation calibrate --device cuda --budget-s 120 --out validation/data/h200_calibration_kernels.json
    (torch 2.11.0+cu130, H200; a copy ships as estimator/model/data/h200_calibration_kernels.json)

The mechanism, for one pass over the layers of one GPU (tokens T = batch per GPU × tokens per GPU):

- GEMM (every nn.Linear, forward and the two backward GEMMs): t = max(2·M·N·K / (peak_dtype · η(M, N, K, kind)),
  weight+activation bytes / (HBM · η_stream)). η is cuBLAS's measured efficiency at the nearest measured shapes
  (inverse-distance in log2 M, N, K, same dtype and kind; small M stream the weight at η_stream, the median of the
  calibration's M <= 64 GEMMs over >= 50M-element weights).
- memory-bound kernels (norms, RoPE, SiLU·mul, residual adds, casts, copies, softmax, cross-entropy): each op's
  measured time t = a + b·elements (least squares over the calibration's sizes), b scaled by HBM_ref / HBM_gpu.
  Backward of an elementwise op = BACKWARD_MEMORY_FACTOR × its forward (reads its saved inputs and the incoming
  gradient, writes the outgoing one).
- attention core: `estimate_call`'s time (estimator/call/timing.py) of the layer's call; decode: KV bytes at
  the stream rate of the measured q_len = 1 SDPA rows.
- optimizer: measured ms per 1e9 parameters of `--optimizer` in the update dtype, × HBM_ref / HBM_gpu.
- decode (estimator/model/decode_time.py): + one cuDNN graph build (`CUDNN_GRAPH_BUILD_MS`) per step per distinct
  growing-cache layer shape that SDPA runs on cuDNN (`decode_graph_builds`): each new KV length is a new graph in
  PyTorch's cache.
- CPU: every kernel costs the host `launch_floor_ms` (a GEMM the measured eager matmul floor), and each decoder
  layer HF's eager Python (`LAYER_PYTHON_MS`, set from the fit set of whole models, see below). A pass takes
  max(GPU sum, CPU sum) (the host runs ahead of the device while the queue is deep) + the model-level Python the
  device waits for (`MODEL_PYTHON_MS`) + one synchronize. A decode step charges `DECODE_KERNEL_HOST_MS` per
  launched kernel instead (profiled: its Python dispatch, not the bare launch, sets the pace).

Other GPUs: GEMM efficiencies and stream fractions are relative to the measuring GPU's datasheet peaks and
scale with the target's; CPU costs do not scale. Not modelled: clocks under power limits, cache effects across
kernels, torch.compile. Error band: `TIME_ERROR_BAND` (measured / planned over the fit and held-out sets).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from estimator.hardware import GPU
from estimator.model import decode_time as dt
from estimator.model import finetune_time as ft
from estimator.model import layer_passes as passes
from estimator.model.finetune import trainable_params
from estimator.model.kernel_prices import KernelConstants, Kernels
from estimator.model.step_state import Step
from estimator.units import cdiv

if TYPE_CHECKING:
    from estimator.model.inputs import PlanInputs
    from estimator.model.layer_attention import LayerAttention

# HF's eager Python: per decoder-layer call (module __call__s, cache bookkeeping; host time that overlaps queued
# device work) and per model forward (mask and rotary set-up, output dataclasses, the first kernels' start: host
# time the device waits for). Set by hand from the fit set's residuals (measured - planned with both at 0) on the
# dense rows of <= 4,096 tokens per GPU: 2-layer prefills and training forwards +2.2..+3.5 ms, the 6-layer
# gemma-3 prefill +5.9 ms; `python -m validation.model_report validation/data/h200_hf_recipes.csv
# validation/data/h200_hf_archs.csv validation/data/h200_hf_windows_a.csv validation/data/h200_hf_windows_b.csv`
# shows the rows. Not fitted on validation/data/h200_hf_time.csv (held out).
LAYER_PYTHON_MS = 0.70
MODEL_PYTHON_MS = 3.0
# Relative error band of the whole-model times: measured / planned - 1, 10th and 90th percentile over every H200
# whole-model row, fit and held-out sets together (prefill 104 rows, step 161, steady decode 42), as printed by
# `python -m validation.model_report` over validation/data/h200_hf_{archs,decode,heldout,heldout_b,heldout_c,
# recipes,time,windows_a,windows_b,decode_heldout_p1,decode_heldout_p2}.csv. Decode is the weak one: a decode step
# is host-bound, and the same step measured in two processes one after the other differed by up to 1.75x
# (h200_hf_decode_heldout_p1/p2.csv).
# The decode band is the headline's (a step as generate runs it): measured / planned - 1, 10th-90th percentile over
# the 76 growing-cache decode rows of seven processes in several device calls (h200_hf_decode,
# h200_hf_decode_heldout_p1/p2, h200_hf_long_fit, h200_hf_long_heldout, h200_hf_decode_repeat, h200_hf_long_heldout2:
# -0.15..+0.52; 60 of 76 within 30%). The spread is the host's: the same 8 rows measured in two device
# calls (h200_hf_long_heldout.csv, then h200_hf_decode_repeat.csv) ran their decode steps 53-74 ms in one and 37-41 ms
# in the other, while their prefills agreed within 2.3%; validation/timing/host_speed.py read a pure-Python loop at
# 31.6 ns and 60.5 ns two minutes apart on one machine (validation/data/h200_host_speed.csv). A host-bound figure
# is priced at the middle of that spread. The 16 rows outside 30% all come from the two slow-host calls
# (h200_hf_long_heldout, h200_hf_long_heldout2), where steps with a cuDNN build and steps without one ran a median
# 1.41x and 1.47x the plan alike: the host's speed, not a per-graph or per-shape cost (docs/plan.md).
TIME_ERROR_BAND = {"prefill": (-0.08, 0.17), "step": (-0.09, 0.03), "decode": (-0.15, 0.52)}

# An encoder layer's no-grad forward (ViT, CLIP/SigLIP and Qwen vision blocks, Swin blocks) has no cache, rotary or
# mask set-up, so its host time is its kernels' dispatch alone, at the per-kernel cost of HF's eager decode step
# (DECODE_KERNEL_HOST_MS: Python module calls, dispatch and launch, profiled); its model level (patch conv, class
# token, positions, final norm, head) is ENCODER_MODEL_PYTHON_MS plus those kernels' own dispatch. Measured on the
# H200 with ViT-L/16 at 224 px, batch 1, where the prefill is host-bound: 4 layers 1.83 ms, 24 layers 8.53 ms, so
# 0.335 ms a layer (~14 kernels) and 0.49 ms at zero layers (validation/data/h200_hf_vision_breakdown.jsonl,
# `python bench/bench_vision_breakdown.py --cases validation/cases/h200_hf_vision_breakdown.csv --sdpa`). A training
# forward (autograd recording, autocast) keeps LAYER_PYTHON_MS: the ViT and Swin training steps of the same runs were
# host-bound at 2-5 ms a layer.
ENCODER_MODEL_PYTHON_MS = 0.35


def step_times(inputs: PlanInputs, attn: list[LayerAttention], gpu: GPU, params_gpu: int, weights: int,
               kv_cache: int, constants: KernelConstants, *, unsupported: bool) -> dict:
    """Per-GPU wall times (ms) and their kernel-class split; see the module docstring."""
    recipe = inputs.recipe
    training = inputs.mode == "training"
    dtype = recipe.compute_dtype if (training and recipe) else inputs.dtype
    autocast = bool(training and recipe and recipe.autocast)
    st = Step(inputs=inputs, attn=attn, kern=Kernels(constants, gpu), dtype=dtype, autocast=autocast,
               unsupported=unsupported)
    sync = constants.sync_ms
    fwd, per_kind_layers, rows = _forward_pass(st)

    result: dict = {}
    split: dict = {}
    host: dict = {}  # each phase's own host time (launches and Python that overlap the GPU work), ms
    if not training:
        prefill_ms = fwd.total(sync)
        split["prefill"] = fwd.split(sync)
        host["prefill"] = fwd.cpu
        step_ms = prefill_ms
    else:
        bwd, opt = _backward_pass(st, per_kind_layers, rows), _optimizer_pass(st, params_gpu)
        fwd_ms, bwd_ms, opt_ms = fwd.total(sync), bwd.total(sync), opt.total(sync)
        k_acc = inputs.accumulation_steps
        prefill_ms = fwd_ms * k_acc
        step_ms = k_acc * (fwd_ms + bwd_ms) + opt_ms
        split["forward"] = fwd.split(sync)
        split["backward"] = bwd.split(sync)
        split["optimizer"] = opt.split(sync)
        host.update(forward=fwd.cpu, backward=bwd.cpu, optimizer=opt.cpu)
        result.update(forward_time_ms=k_acc * fwd_ms, backward_time_ms=k_acc * bwd_ms, optimizer_time_ms=opt_ms)

    result.update(prefill_time_ms=prefill_ms, step_time_ms=step_ms, time_split=split, host_ms=host,
                  **dict.fromkeys(dt.DECODE_KEYS))
    if inputs.model.kind == "decoder" and not training:
        dec = dt.decode_pass(st)
        split["decode"] = dec.split(sync)
        result.update(dt.decode_regimes(st, gpu, dec.total(sync), sync))
    return result


def core_kernels(a: LayerAttention, backend: str) -> int:
    """Kernels one layer's attention core launches in a forward: eager's and math's op chain (bmm, scale, mask
    add, softmax, casts, bmm: estimator/call/op_chain.py `kernel_count`), each one more host dispatch of the
    whole model; a fused kernel's few launches are 3 (`layer_passes.layer_forward`'s default)."""
    from estimator.call import registry
    from estimator.call.op_chain import kernel_count
    from estimator.call.shapes import Calls

    if a.timing is None or backend not in registry.OP_CHAIN:
        return 3
    call = replace(a.timing.call, mode="forward")
    return max(3, int(kernel_count(Calls.from_call(call), backend)))


def _forward_pass(st: Step) -> tuple[passes.Pass, list, int]:
    """The prefill, or the training forward: every layer kind (by window, dense and MoE in proportion) and the
    model level. Also returns each layer kind's pass (for the backward) and the rows the head computes."""
    inputs, kern, dtype, autocast, backend = st.inputs, st.kern, st.dtype, st.autocast, st.backend
    m, T, b, H = inputs.model, st.T, st.b, inputs.model.hidden
    fwd = passes.Pass()
    which_fwd = "forward_timing" if st.training else "timing"
    per_kind_layers = []
    for a in st.attn:  # layers by window; each window group split into dense and MoE layers proportionally
        frac_moe = m.moe_layers / m.layers if m.layers else 0.0
        for moe, count in ((False, a.layers * (1 - frac_moe)), (True, a.layers * frac_moe)):
            if count <= 0:
                continue
            lp = passes.layer_forward(inputs, kern, T, dtype, autocast, moe, st.core(a, which_fwd), backend,
                                      core_kernels(a, backend))
            if ft.frozen(inputs):  # LoRA / QLoRA adapters, QLoRA's dequantisation (finetune_time.py)
                ft.adapter_forward(lp, kern, inputs, T, autocast)
                g, kn = ft.dequantise_ms(kern, inputs)
                lp.add("memory_bound", g, kern.k.launch_floor_ms * kn, kn)
            if ft.fp8(inputs):
                ft.fp8_forward(lp, kern, inputs, T, dtype)
            if a.kv_repeat_bytes:
                passes.mem(lp, kern, "copy", a.kv_repeat_bytes / st.es, dtype)
            if m.attention_sinks and backend == "eager" and a.timing is not None:
                passes.sinks_eager(lp, kern, a.timing.call, dtype)
            if m.kind == "decoder" or st.training:
                lp.add("host", 0.0, LAYER_PYTHON_MS, 0)  # overlaps the GPU work queued before it
            else:  # an encoder's no-grad forward: see ENCODER_MODEL_PYTHON_MS
                lp.cpu = lp.kernels * dt.DECODE_KERNEL_HOST_MS
            fwd.merge(lp, count)
            per_kind_layers.append((a, moe, count, lp))
    # model level: embedding gather, (Gemma's scale), final norm, head, masks and rotary set-up
    passes.mem(fwd, kern, "copy", T * H, st.rdt)
    passes.norm(fwd, kern, "rmsnorm" if m.norm == "rmsnorm" else "layernorm", T * H, st.rdt)
    if m.kind == "decoder":
        fwd.add("memory_bound", 0.0, kern.k.launch_floor_ms * 10, 10)  # position ids, cos/sin, mask set-up
    fwd.add("python", 0.0, MODEL_PYTHON_MS if m.kind == "decoder" or st.training else ENCODER_MODEL_PYTHON_MS, 0)
    if m.kind == "decoder":
        rows = T if (st.training or inputs.logits == "all") else b
    else:
        conv = m.channels * m.patch_size**2
        passes.gemm(fwd, kern, max(T - b, 1), H, conv, dtype, cast_weight=autocast)
        rows = b
    passes.gemm(fwd, kern, rows, st.V, H, dtype, cast_weight=autocast)
    if st.training:  # HF's loss: logits.float(), cross_entropy (forward and its backward measured together)
        passes.mem(fwd, kern, "cast_bf16_fp32", rows * st.V)
        g, kn = kern.mem_ms("cross_entropy_fwd_bwd", rows * st.V, "float32")
        fwd.add("memory_bound", g / 3, kern.k.launch_floor_ms * 2, 2)
    return fwd, per_kind_layers, rows


def _backward_pass(st: Step, per_kind_layers: list, rows: int) -> passes.Pass:
    """The training backward: each layer kind's backward (with its recompute under checkpointing), then the head,
    the loss and the embedding."""
    inputs, kern, dtype, autocast = st.inputs, st.kern, st.dtype, st.autocast
    m, T, H, V = inputs.model, st.T, inputs.model.hidden, st.V
    bwd = passes.Pass()
    for a, moe, count, lp in per_kind_layers:
        core_fb = st.core(a, "timing")
        core_f = st.core(a, "forward_timing")
        gemm_bwd = passes.gemm_backward_ms(inputs, kern, T, dtype, moe, autocast)
        if ft.frozen(inputs):  # no weight gradients for the base; the adapters' four GEMMs
            gemm_bwd += (ft.adapter_backward_gemm_ms(kern, inputs, T, autocast)
                         - ft.base_grad_weight_ms(kern, inputs, T, dtype))
        lb = passes.backward_of(lp, kern, gemm_bwd, max(core_fb - core_f, 0.0))
        if ft.frozen(inputs):  # backward_of doubled the forward's dequantisation: backward dequantises once
            g, kn = ft.dequantise_ms(kern, inputs)
            lb.add("memory_bound", -g * (passes.BACKWARD_MEMORY_FACTOR - 1), 0.0, 0)
        if ft.fp8(inputs):
            ft.fp8_backward(lb, kern, inputs, T, dtype)
        if autocast and not ft.frozen(inputs):  # AccumulateGrad: the 16-bit weight gradients cast into the fp32 .grad
            lparams = sum(n_ * k_ * c for n_, k_, c in passes.linear_shapes(inputs)[0] if n_ > 1)
            lparams += (cdiv(m._attention_matmul_params(), inputs.tp) if m.kv_lora_rank else 0)
            ffn_params = (3 if m.gated_ffn else 2) * H * cdiv(m.ffn, inputs.tp)
            g, kn = kern.mem_ms("cast_bf16_fp32", lparams + ffn_params)
            lb.add("memory_bound", g, kern.k.launch_floor_ms * 9, 9)
        if inputs.checkpointing in ("full", "hf"):
            lb.merge(lp)  # the layer's forward re-run inside its backward
        elif inputs.checkpointing == "selective":
            lb.add("attention", core_f, 0.0, 0)
        bwd.merge(lb, count)
    # head and loss backward, embedding backward (zeroed V×H gradient + scatter-add)
    for kind in ("grad_input",) if ft.frozen(inputs) else ("grad_input", "grad_weight"):
        bwd.add("gemm", kern.gemm_ms(rows, V, H, dtype, kind), kern.k.matmul_floor_ms, 1)
    g, kn = kern.mem_ms("cross_entropy_fwd_bwd", rows * V, "float32")
    bwd.add("memory_bound", g * 2 / 3, kern.k.launch_floor_ms * 3, 3)
    passes.mem(bwd, kern, "cast_bf16_fp32", rows * V)
    if not ft.frozen(inputs):  # the embedding's zeroed gradient (a frozen embedding has none)
        passes.mem(bwd, kern, "copy", V * H, "float32" if autocast else dtype)
    passes.mem(bwd, kern, "add", T * H, st.rdt)
    return bwd


def _optimizer_pass(st: Step, params_gpu: int) -> passes.Pass:
    """The optimizer step over this GPU's parameters, with the recipe's gradient unscale and master-weight casts."""
    inputs, kern, recipe = st.inputs, st.kern, st.inputs.recipe
    opt = passes.Pass()
    upd_dtype = "float32" if recipe and recipe.optimizer_param_bytes == 4 else st.dtype
    if ft.frozen(inputs):  # the fp32 adapters only
        params_gpu, upd_dtype = trainable_params(inputs), "float32"
    if inputs.optimizer == "adamw-8bit":  # measured (finetune_time.BNB_ADAMW8BIT_MS_PER_1E9)
        scale = kern.bw_scale if kern.bw_scale is not None else kern.k.ref_hbm / kern.gpu.hbm_bytes_per_s
        opt.add("optimizer", ft.BNB_ADAMW8BIT_MS_PER_1E9 * params_gpu / 1e9 * scale, kern.k.launch_floor_ms, 1)
    else:
        opt.add("optimizer", kern.optimizer_ms(inputs.optimizer, upd_dtype, params_gpu), kern.k.launch_floor_ms, 1)
    if recipe and recipe.grad_scaler:  # unscale_ + inf check: read and write every fp32 gradient
        passes.mem(opt, kern, "mul", params_gpu, "float32")
    if recipe and recipe.master_dtype:  # grads to fp32 masters, masters copied back to the 16-bit weights
        g, kn = kern.mem_ms("cast_bf16_fp32", params_gpu)
        opt.add("optimizer", 2 * g, kern.k.launch_floor_ms * kn, kn)
    return opt
