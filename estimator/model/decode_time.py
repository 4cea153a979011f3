"""Decode as Hugging Face `generate` runs it: one step's kernels over the KV cache (host-bound), the cuDNN graph a
new cache length builds, and the other stacks a user can switch to (forced flash, StaticCache, torch.compile).
The step's shared state is estimator/model/step_state.py's `Step`; the prefill and training passes live in
estimator/model/step_time.py."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from estimator.call.config import DTYPE_BITS
from estimator.hardware import GPU
from estimator.model import layer_passes as passes
from estimator.units import cdiv

if TYPE_CHECKING:
    from estimator.model.inputs import PlanInputs
    from estimator.model.layer_attention import LayerAttention
    from estimator.model.step_state import Step

# cuDNN SDPA builds one execution graph per distinct call shape and keeps it in a per-process cache
# (aten/src/ATen/native/cudnn/MHA.cpp: MHAGraphCache, an unordered_map keyed by b, h, s_q, s_kv, d, strides, with
# no eviction); building one takes tens of ms of host time. Hugging Face's decode loop grows the KV cache by one
# token a step (DynamicCache: torch.cat), so every step of a global-attention layer calls SDPA with a new s_kv and,
# where SDPA picks cuDNN (torch 2.11 prefers it on Hopper for 16-bit q_len = 1 calls), pays one build per step per
# distinct layer shape. A sliding-window layer whose window is full keeps a constant-length cache
# (DynamicSlidingWindowLayer) and builds once (checked on CPU, transformers 5.17, tiny Llama and Mistral: SDPA's key
# length 41, 42, 43 over three decode steps, against a constant 16 for a full 16-token window). Host time the device
# waits for. Measured directly on the H200 (validation/data/h200_decode_probe.csv,
# `python -m validation.timing.decode_probe`): one q_len = 1 cuDNN call at a new key length of a shape already
# built, minus the same call repeated: median 40.9 ms over 12 shapes x lengths (36.8-48.5; batch 1-8, 16-32 query
# heads, head_dim 64-256, 4k-128k keys: no trend with any of them); a decode step of 4 such layers pays one build
# (34.8-44.6 ms a step), not four; flash at a new length costs 0.1 ms. Whole models agree: the first pass minus
# the warm pass of 21 growing-cache rows (validation/data/h200_hf_{decode,decode_heldout_p1,decode_heldout_p2,
# long_fit}.csv) has median 39.4 ms (33.1-57.0; the 8-layer and batch-8 rows pay the most). The first call of a
# process at a new (batch, heads, head_dim) can cost 360-510 ms once (`decode_first_step_ms`, not in the per-step
# figure).
CUDNN_GRAPH_BUILD_MS = 40.0
CUDNN_FIRST_BUILD_MS = 440.0  # the once-per-process first build (h200_decode_probe.csv: 363-512 ms, median 444)
# A decode step of Hugging Face eager is host-bound: profiled on the H200 (validation/data/h200_hf_profile_decode.csv,
# `python -m validation.hf_profile --case ...:decode`), 10 models ran 171-416 kernels a step with 1.0-2.3 ms of GPU
# work inside a 4.2-12.2 ms step, about 20-25 us of wall time per kernel launched (Python module calls, dispatch,
# the launch itself), against 6.6 us for a bare launch in a loop. So a step costs max(GPU, kernels x
# DECODE_KERNEL_HOST_MS) + DECODE_MODEL_PYTHON_MS (the model-level Python the device waits for). Both are chosen
# by `python -m validation.fit_time --decode validation/data/h200_hf_decode.csv
# validation/data/h200_hf_profile_decode.csv` (least mean squared log error over the 17 warm steps: 23 us per
# kernel, matching the profile). The same host-bound step measured in two processes differs by up to 1.8x (the eager
# Llama: 4.9 and 8.6 ms), so decode carries a wide error band.
DECODE_KERNEL_HOST_MS = 0.023
DECODE_MODEL_PYTHON_MS = 0.25


def decode_graph_builds(inputs: PlanInputs, attn: list[LayerAttention], gpu: GPU) -> int:
    """cuDNN graphs a decode step builds: one per distinct shape among the layers whose key length grows each step
    (global layers, or windows not yet full) when SDPA runs their q_len = 1 call on cuDNN."""
    from estimator.call.attention import estimate_call
    from estimator.model.layer_attention import attention_call

    shapes = set()
    for a in attn:
        if a.window and a.window <= inputs.seq_len:
            continue  # constant-length sliding cache: one graph, built on the first step
        S = inputs.seq_len + 1
        call = attention_call(inputs, span=S, q_len=1, kv_len=S, causal=False, mode="forward")
        try:
            est = estimate_call(call, gpu, inputs.torch_version)
        except ValueError:
            continue
        if est.supported and est.selected_backend == "cudnn":
            shapes.add((call.q_heads, call.kv_heads, call.head_dim))
    return len(shapes)


DECODE_KEYS = ("decode_time_ms_per_token", "decode_steady_ms_per_token", "decode_forced_flash_ms_per_token",
               "decode_static_cache_ms_per_token", "decode_static_compiled_ms_per_token", "decode_first_step_ms",
               "decode_graph_builds_per_step")


def decode_regimes(st: Step, gpu: GPU, steady: float, sync: float) -> dict:
    """One decode step in each regime (ms; None where the plan has no decode or the regime cannot run):

    decode_time_ms_per_token: the step the chosen stack really runs: Hugging Face `generate` (DynamicCache, a new
      cache length every step), so where SDPA runs the single-token calls on cuDNN, the steady step plus one graph
      build per distinct growing-cache layer shape (CUDNN_GRAPH_BUILD_MS).
    decode_steady_ms_per_token: every cache length seen before in the process (a second pass; what the kernels and
      the host's launches cost alone: `steady`, the plan's decode pass).
    decode_forced_flash_ms_per_token: the single-token calls forced to flash
      (`torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)` around the decode): no graph per length; None
      where flash cannot run the call (head_dim > 256, fp32).
    decode_static_cache_ms_per_token: a StaticCache: one fixed key length (the cache's size), so one graph for the
      whole generation; no torch.cat of the cache, but HF then passes a mask, so GQA's K/V are repeated to the query
      heads (repeat_kv) every step.
    decode_static_compiled_ms_per_token: the StaticCache step under torch.compile(mode="reduce-overhead"): Inductor
      replays the step as one CUDA graph, so the host's launches and HF's Python are gone and the step is its GPU
      work (Inductor's fusion of the elementwise ops is not priced: an upper bound). The compile itself (11.5 s for a
      4-layer Llama-3.1-8B on the H200) and the graph capture (30 ms) are paid once, not per step. Measured there
      (`python -m validation.timing.decode_probe --hf-out OUT.csv --hf-compiled-only`,
      validation/data/h200_decode_probe_compiled.csv): 2.53-2.56 ms a step from the third, against 5.0 ms eager.
    decode_first_step_ms: the first step of a fresh process, where cuDNN builds its first graph of the shape
      (CUDNN_FIRST_BUILD_MS) on top of the headline step.
    """
    inputs = st.inputs
    out = dict.fromkeys(DECODE_KEYS)
    builds = decode_graph_builds(inputs, st.attn, gpu) if not st.unsupported and inputs.cp == 1 else 0
    out.update(decode_time_ms_per_token=steady + CUDNN_GRAPH_BUILD_MS * builds, decode_steady_ms_per_token=steady,
               decode_graph_builds_per_step=builds,
               decode_first_step_ms=steady + (CUDNN_GRAPH_BUILD_MS + CUDNN_FIRST_BUILD_MS) * builds if builds
               else steady)
    if not st.unsupported and _flash_runs_decode(inputs, gpu):
        out["decode_forced_flash_ms_per_token"] = decode_pass(st, backend="flash").total(sync)
    if not st.unsupported:
        static = decode_pass(st, static=True)
        out["decode_static_cache_ms_per_token"] = static.total(sync)
        out["decode_static_compiled_ms_per_token"] = sum(static.gpu.values()) + sync
    return out


def _flash_runs_decode(inputs: PlanInputs, gpu: GPU) -> bool:
    """Whether SDPA's flash kernel runs the plan's q_len = 1 call (estimator/call eligibility rules)."""
    from estimator.call.attention import estimate_call
    from estimator.model.layer_attention import attention_call

    S = inputs.seq_len + 1
    call = attention_call(inputs, span=S, q_len=1, kv_len=S, causal=False, mode="forward")
    try:
        est = estimate_call(replace(call, backend="flash"), gpu, inputs.torch_version)
    except ValueError:
        return False
    return bool(est.supported)


def decode_pass(st: Step, backend: str | None = None, static: bool = False) -> passes.Pass:
    """One steady-state decode step: every layer's one-token forward over its KV cache (host-bound), then the
    model level. backend: the single-token calls' kernel (default the plan's); static: a StaticCache (no torch.cat
    of the cache; the mask HF then passes turns off SDPA's GQA, so K/V are repeated to the query heads)."""
    inputs, kern, dtype, b = st.inputs, st.kern, st.dtype, st.b
    backend = backend or st.backend
    m, H, es = inputs.model, inputs.model.hidden, st.es
    dec = passes.Pass()
    for a in st.attn:
        frac_moe = m.moe_layers / m.layers if m.layers else 0.0
        S = cdiv(a.span, inputs.cp) if a.window else cdiv(inputs.seq_len, inputs.cp)
        kv_dtype = inputs.kv_dtype if inputs.kv_dtype in DTYPE_BITS else dtype
        # k at the q/k width, v at its own (MLA: 192 + 128)
        kv_bytes = b * inputs.kv_heads_per_gpu * S * (m.head_dim + m.v_head) * passes.element_bytes(kv_dtype)
        dcore = 0.0 if st.unsupported else kern.decode_attention_ms(backend, kv_bytes)
        for moe, count in ((False, a.layers * (1 - frac_moe)), (True, a.layers * frac_moe)):
            if count <= 0:
                continue
            lp = passes.layer_forward(inputs, kern, b, dtype, False, moe, dcore, backend)
            if not static:
                g, kn = kern.mem_ms("copy", 2 * kv_bytes / es, dtype)  # DynamicCache.update: torch.cat
                lp.add("memory_bound", g, kern.k.launch_floor_ms * 2, 2)
            else:  # StaticCache.update: index_copy_ of the new token's k and v
                lp.add("memory_bound", 0.0, kern.k.launch_floor_ms * 2, 2)
            if (backend == "eager" or static) and inputs.kv_heads_per_gpu < inputs.q_heads_per_gpu:
                repeated = kv_bytes / es * inputs.q_heads_per_gpu / inputs.kv_heads_per_gpu
                passes.mem(lp, kern, "copy", repeated, dtype)
            lp.cpu = lp.kernels * DECODE_KERNEL_HOST_MS  # host-bound: see DECODE_KERNEL_HOST_MS
            dec.merge(lp, count)
    top = passes.Pass()  # model level: embedding, final norm, mask/position set-up, LM head
    passes.mem(top, kern, "copy", b * H, dtype)
    passes.norm(top, kern, "rmsnorm", b * H, dtype)
    top.add("memory_bound", 0.0, 0.0, 10)
    passes.gemm(top, kern, b, st.V, H, dtype)
    top.cpu = top.kernels * DECODE_KERNEL_HOST_MS
    top.add("python", 0.0, DECODE_MODEL_PYTHON_MS, 0)
    dec.merge(top)
    return dec
