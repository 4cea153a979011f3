"""The time of one engine step (one forward over the scheduled batch), priced by the project's time model: every
layer's kernels from estimator/model/layer_passes.py `layer_forward` (GEMMs at M = the step's tokens, norms, RoPE,
the MLP or MoE block), the LM head for the rows that produce a token, the attention core from the attention
estimator (estimator/call `estimate_call`) or, for a decode read, `Kernels.decode_attention_ms` over the cached
bytes, and the tensor-parallel all-reduces from estimator/model/comm.py. Host time: Hugging Face eager runs each
kernel from Python (step_time.DECODE_KERNEL_HOST_MS per launched kernel, DECODE_MODEL_PYTHON_MS per forward);
with CUDA graphs a step pays one graph launch (the kernels are replayed, not dispatched).

How each engine runs attention:
- hf-cb through `paged|sdpa` or `paged|eager` (transformers 5.17 integrations/sdpa_paged.py): every layer makes ONE
  call over the whole packed batch, q (1, heads, Q, d) against the keys read from the cache plus the new ones,
  K = sum of the cached lengths + Q, with the dense (1, 1, Q, K) mask; priced as that masked call.
- hf-cb through `paged|flash_attention_*`, vLLM, SGLang, TensorRT-LLM: varlen/paged kernels; each prefill chunk of
  q tokens over ctx cached ones priced as its own flash call (q x (ctx + q)), every decode row as a read of its cache.

Shapes are priced on a geometric grid (8 points per octave, rounded up) and memoised, so a 10,000-request trace
prices a few hundred distinct calls. API (stable): `StepPricer(inputs, memory, cuda_graphs=)`,
`.step_ms(q_tokens, logit_rows, decode_kv_tokens, prefill_chunks, masked_kv_tokens)`.
"""

from __future__ import annotations

import math
from dataclasses import replace

from estimator.call.attention import estimate_call
from estimator.call.config import AttentionCall
from estimator.call.shapes import cdiv
from estimator.hardware import get_gpu
from estimator.model import layer_passes as passes
from estimator.model.calibration import load_constants
from estimator.model.comm import all_reduce_ms, link
from estimator.model.inputs import PlanInputs
from estimator.model.kernel_prices import Kernels
from estimator.model.step_time import DECODE_KERNEL_HOST_MS, DECODE_MODEL_PYTHON_MS
from estimator.serve.memory import EngineMemory

GRID_PER_OCTAVE = 8
# A CUDA-graph replay: one cudaGraphLaunch and the engine's input copies, host time per step. Taken as the
# calibration's launch floor (one kernel launch) times 10 (input ids, positions, slot mapping, block table, sampling
# tensors copied before the replay): an assumption, no engine's own figure.
GRAPH_STEP_LAUNCHES = 10


# hf-cb's per-step overhead beyond the priced kernels (transformers 5.17 runs a step from Python in sync mode: the
# scheduler, prepare_batch_tensors and update_batch loop over the scheduled requests; the read/write index lists
# are built as Python lists, one `range` per block, and copied to the GPU), fitted on the H200 FIT set by
#   python -m validation.serving.fit --cases validation/serving/cases/h200_fit.txt \
#       --steps validation/data/h200_serve_fit_steps.csv
# overhead_ms = BASE + PER_REQUEST * scheduled requests + PER_KV_TOKEN * (cached tokens read + new tokens).
HF_CB_STEP_BASE_MS = 28.09
HF_CB_STEP_PER_REQUEST_MS = 0.2956
HF_CB_STEP_PER_KV_TOKEN_MS = 0.0004897


def hf_cb_overhead_ms(requests: int, kv_tokens: int) -> float:
    """hf-cb's measured per-step overhead (see the constants above)."""
    return HF_CB_STEP_BASE_MS + HF_CB_STEP_PER_REQUEST_MS * requests + HF_CB_STEP_PER_KV_TOKEN_MS * kv_tokens


def grid_up(x: int) -> int:
    """x rounded up to the pricing grid: exact up to 16, then 8 points per octave."""
    if x <= 16:
        return max(1, x)
    e = math.floor(math.log2(x))
    step = 2 ** e / GRID_PER_OCTAVE
    return int(math.ceil(x / step) * step)


class StepPricer:
    """Prices engine steps for one model, GPU, tp and engine (see the module docstring)."""

    def __init__(self, inputs: PlanInputs, memory: EngineMemory, *, cuda_graphs: bool) -> None:
        self.inputs = inputs
        self.memory = memory
        self.cuda_graphs = cuda_graphs
        self.gpu = get_gpu(inputs.gpu)
        consts = load_constants(inputs.calibration).with_overrides(inputs.gemm_efficiency, inputs.hbm_efficiency)
        self.kern = Kernels(consts, self.gpu)
        self.sync_ms = consts.sync_ms
        m = inputs.model
        self.masked = memory.engine == "hf-cb" and inputs.backend != "flash-attn"
        self.attn_backend = inputs.backend if self.masked else "flash-attn"
        self.dtype = inputs.dtype
        self.hq, self.hk = inputs.q_heads_per_gpu, inputs.kv_heads_per_gpu
        self.moe_frac = m.moe_layers / m.layers if m.layers else 0.0
        self.V = cdiv(m.vocab, inputs.tp)
        kind, bw = link(self.gpu, inputs.tp, 1, inputs.gpus_per_node)
        self._link = (kind, bw)
        self._linear: dict[tuple[int, int], tuple[float, float, int]] = {}
        self._attn: dict[tuple, float] = {}
        self.kv_bytes_per_token_layer = memory.kv_read_bytes_per_token

    # --- the parts, memoised on the grid
    def _linear_part(self, tokens: int, rows: int) -> tuple[float, float, int]:
        """(GPU ms, eager host ms, kernels) of every layer's non-attention kernels over `tokens` tokens plus the
        model level (embedding, final norm, LM head over `rows` rows)."""
        key = (grid_up(tokens), grid_up(rows))
        hit = self._linear.get(key)
        if hit is not None:
            return hit
        T, R = key
        inp, kern, m = self.inputs, self.kern, self.inputs.model
        total = passes.Pass()
        for moe, count in ((False, m.layers * (1 - self.moe_frac)), (True, m.layers * self.moe_frac)):
            if count <= 0:
                continue
            lp = passes.layer_forward(inp, kern, T, self.dtype, False, moe, 0.0, self.attn_backend)
            total.merge(lp, count)
        passes.mem(total, kern, "copy", T * m.hidden, self.dtype)
        passes.norm(total, kern, "rmsnorm" if m.norm == "rmsnorm" else "layernorm", T * m.hidden, self.dtype)
        total.add("memory_bound", 0.0, 0.0, 10)
        passes.gemm(total, kern, R, self.V, m.hidden, self.dtype)
        gpu_ms = sum(total.gpu.values())
        if inp.tp > 1:  # two all-reduces of the hidden states per layer (Megatron tensor parallel)
            kind, bw = self._link
            gpu_ms += 2 * m.layers * all_reduce_ms(T * m.hidden * passes.element_bytes(self.dtype), inp.tp, kind, bw)
        out = (gpu_ms, total.cpu, total.kernels)
        self._linear[key] = out
        return out

    def _call_ms(self, q: int, kv: int, masked: bool, causal: bool) -> float:
        key = (grid_up(q), grid_up(kv), masked, causal)
        hit = self._attn.get(key)
        if hit is not None:
            return hit
        Q, K = key[0], max(key[1], key[0] if causal else 1)
        call = AttentionCall(batch=1, q_heads=self.hq, kv_heads=self.hq if masked else self.hk,
                             head_dim=self.inputs.model.head_dim, q_len=Q, kv_len=K, dtype=self.dtype,
                             causal=causal and Q == K, mask="bool" if masked else "none", mode="forward",
                             backend=self.attn_backend if self.attn_backend != "auto" else "auto")
        try:
            est = estimate_call(call, self.gpu, self.inputs.torch_version)
            ms = est.time_ms if est.supported and est.time_ms is not None else None
        except ValueError:
            ms = None
        if ms is None:  # the requested backend cannot run it: the fastest that can
            est = estimate_call(replace(call, backend="auto"), self.gpu, self.inputs.torch_version)
            ms = est.time_ms or 0.0
        self._attn[key] = ms
        return ms

    # --- one step
    def step_ms(self, q_tokens: int, logit_rows: int, decode_kv_tokens: int,
                prefill_chunks: list[tuple[int, int]], masked_kv_tokens: int = 0, requests: int = 0,
                overhead: bool = True) -> float:
        """Wall ms of one step: `q_tokens` new tokens in the forward, `logit_rows` of them produce a token,
        decode rows read `decode_kv_tokens` cached tokens in all, `prefill_chunks` are (chunk tokens, cached tokens
        before the chunk); for hf-cb's masked path `masked_kv_tokens` is the K of its one packed call. hf-cb steps
        add the engine's measured per-step overhead for `requests` scheduled requests (`overhead=False`: without
        it, as validation/serving/fit.py prices measured steps to fit it)."""
        if q_tokens <= 0:
            return 0.0
        m = self.inputs.model
        gpu_ms, host_ms, kernels = self._linear_part(q_tokens, max(1, logit_rows))
        if self.masked:
            core = self._call_ms(q_tokens, max(masked_kv_tokens, q_tokens), True, False)
            # reading the cache into the contiguous k, v the call takes (index_select over the read pages)
            gather = self.kern.mem_ms("copy", max(masked_kv_tokens - q_tokens, 0)
                                      * self.kv_bytes_per_token_layer / 2, self.dtype)[0]
            # sdpa_paged.py then hands SDPA contiguous (1, q_heads, K, d) keys and values: repeat_kv copies them
            # to every query head (GQA), or .contiguous() copies the transposed view (MHA): one copy of K and V
            # at q_heads either way
            heads_copy = self.kern.mem_ms("copy", 2 * max(masked_kv_tokens, q_tokens) * self.hq
                                          * self.inputs.model.head_dim, self.dtype)[0]
            attn_ms = m.layers * (core + gather + heads_copy)
        else:
            core = 0.0
            if decode_kv_tokens:
                core += self.kern.decode_attention_ms("flash", decode_kv_tokens * self.kv_bytes_per_token_layer)
            for chunk, ctx in prefill_chunks:
                core += self._call_ms(chunk, ctx + chunk, False, ctx == 0)
            attn_ms = m.layers * core
        kernels += 3 * m.layers
        gpu_ms += attn_ms
        if self.cuda_graphs:
            host = self.kern.k.launch_floor_ms * GRAPH_STEP_LAUNCHES
            return max(gpu_ms, host) + self.sync_ms
        host = kernels * DECODE_KERNEL_HOST_MS
        extra = 0.0
        if overhead and self.memory.engine == "hf-cb":
            extra = hf_cb_overhead_ms(requests, max(masked_kv_tokens, q_tokens))
        return max(gpu_ms, host) + DECODE_MODEL_PYTHON_MS + self.sync_ms + extra
