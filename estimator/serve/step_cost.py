"""The time of one engine step (one forward over the scheduled batch), priced by the project's time model: every
layer's kernels from estimator/model/layer_passes.py `layer_forward` (GEMMs at M = the step's tokens, norms, RoPE,
the MLP or MoE block), the LM head for the rows that produce a token, the attention core from the attention
estimator (estimator/call `estimate_call`) or, for a decode read, `Kernels.decode_attention_ms` over the cached
bytes, and the tensor-parallel all-reduces from estimator/model/comm.py. Host time: hf-cb (transformers continuous
batching, eager) as estimator/serve/hf_host.py models it (the engine's per-step Python, then every kernel's launch
followed by its GPU work); the other engines' eager steps as Hugging Face's generate loop
(decode_time.DECODE_KERNEL_HOST_MS per launched kernel, overlapping the GPU, DECODE_MODEL_PYTHON_MS per forward);
with CUDA graphs a step pays one graph launch (the kernels are replayed, not dispatched).

How each engine runs attention:
- hf-cb through `paged|sdpa` or `paged|eager` (transformers 5.17 integrations/sdpa_paged.py): every layer gathers
  the cached pages of the batch's requests and the new tokens into one k and v (K = sum of the cached lengths + Q),
  repeats them to every query head (repeat_kv) and makes ONE call over the whole packed batch, q (1, heads, Q, d),
  with the dense (1, 1, Q, K) mask; priced as those two copies and that masked call.
- hf-cb through `paged|flash_attention_*`, vLLM, SGLang, TensorRT-LLM: varlen/paged kernels; each prefill chunk of
  q tokens over ctx cached ones priced as its own flash call (q x (ctx + q)), every decode row as a read of its cache.

Every attention call a step can make is priced once, when the pricer is built, on a geometric grid (4 points
per octave; queries rounded up, keys interpolated linearly) in one columnar pass of the attention estimator.

API (stable): `StepPricer(inputs, memory, cuda_graphs=)`, `.step_parts(q_tokens, logit_rows, decode_kv_tokens,
prefill_chunks, masked_kv_tokens=0, decode_window_kv_tokens=None, masked_window_kv_tokens=None)` -> (GPU ms,
kernels launched, K), `.step_ms(` the same `, *, requests=0, new_graphs=0, overhead=True)`,
`.graph_keys(q_tokens, masked_kv_tokens, masked_window_kv_tokens=None)` (the cuDNN graphs an hf-cb step needs);
`.window`, `.full_layers`, `.sliding_layers`, `.masked` (hf-cb's packed masked call), `.attn_backend`,
`.graph_builds` (that call runs on cuDNN).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import replace

import numpy as np

from estimator.call.attention import estimate_call, estimate_columns
from estimator.call.config import AttentionCall
from estimator.call.shapes import Calls, cdiv
from estimator.hardware import get_gpu
from estimator.model import layer_passes as passes
from estimator.model.calibration import load_constants
from estimator.model.comm import all_reduce_ms, link
from estimator.model.decode_time import DECODE_KERNEL_HOST_MS, DECODE_MODEL_PYTHON_MS
from estimator.model.inputs import PlanInputs
from estimator.model.kernel_prices import Kernels
from estimator.serve import hf_host
from estimator.serve.memory import EngineMemory

GRID_PER_OCTAVE = 4
# A CUDA-graph replay: one cudaGraphLaunch and the engine's input copies, host time per step. Taken as the
# calibration's launch floor (one kernel launch) times 10 (input ids, positions, slot mapping, block table, sampling
# tensors copied before the replay): an assumption, no engine's own figure.
GRAPH_STEP_LAUNCHES = 10
# transformers 5.17 continuous_batching/cache.py PagedAttentionCache.update, a sliding-window layer: the read indices
# carry a sentinel where each new token goes; `mask = (read_index == sentinel)[:, None, None]`, then for k and for v
# index_select the window and `masked_scatter_(mask, new states)`. PyTorch's CUDA masked_scatter_
# (aten/src/ATen/native/cuda/IndexKernel.cu launch_masked_scatter_kernel, torch 2.11) makes the broadcast mask
# contiguous (1 byte an element of the gathered (K, kv_heads, head_dim) tensor), takes its int64 exclusive prefix sum
# with cub (read 1 byte, write 8) and runs one TensorIterator kernel over every element (read self 2 bytes, mask 1,
# prefix 8; write self 2): 23 bytes an element. Its kernels (contiguous, two cub passes, the size check, the scatter)
# are launched from C++ inside one call; what the step's launch count (the host's dispatch) adds for a sliding layer
# is the three calls made from Python: the `==` and the two masked_scatter_.
MASKED_SCATTER_BYTES_PER_ELEMENT = 1 + 1 + 8 + 2 + 1 + 8 + 2
SLIDING_UPDATE_EXTRA_KERNELS = 3
HF_Q_PADDING = 64  # transformers 5.17 continuous_batching/initialization.py FALLBACK_DEFAULTS q_padding_interval_size
HF_KV_PADDING = 64 * 256  # kv_padding_interval_size


def grid_up(x: int) -> int:
    """x rounded up to the pricing grid: exact up to 16, then GRID_PER_OCTAVE points per octave."""
    if x <= 16:
        return max(1, x)
    step = 2 ** math.floor(math.log2(x)) / GRID_PER_OCTAVE
    return int(math.ceil(x / step) * step)


def grid_points(maximum: int) -> list[int]:
    """The pricing grid up to `maximum` (included, rounded up): every integer to 16, then GRID_PER_OCTAVE points
    per octave."""
    points = list(range(1, 17))
    while points[-1] < maximum:
        x = points[-1]
        step = 2 ** math.floor(math.log2(x)) / GRID_PER_OCTAVE
        points.append(int(math.floor(x / step + 1) * step))
    return points


def price_grid(gpu: str, q_heads: int, kv_heads: int, head_dim: int, dtype: str, backend: str, torch_version: str,
               q_grid: list[int], k_grid: list[int], masked: bool) -> tuple[np.ndarray, np.ndarray]:
    """(times [q, k] of the full (non-causal) calls, times [q] of the causal q x q calls) of forward attention calls
    of batch 1, priced by the attention estimator's columnar `estimate_columns` in one pass; where the requested
    backend cannot run a call, the fastest that can (backend auto)."""
    gpu_spec = get_gpu(gpu)
    template = Calls.from_call(AttentionCall(batch=1, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim,
                                             q_len=1, kv_len=1, dtype=dtype, mask="bool" if masked else "none",
                                             mode="forward", backend=backend))
    Q, K = np.meshgrid(np.array(q_grid, dtype=np.int64), np.array(k_grid, dtype=np.int64), indexing="ij")
    diag = np.array(q_grid, dtype=np.int64)
    L = np.concatenate([Q.ravel(), diag])
    S = np.concatenate([K.ravel(), diag])
    causal = np.concatenate([np.zeros(Q.size, dtype=bool), np.ones(diag.size, dtype=bool)])
    if masked:
        causal[:] = False
    c = replace(template, L=L, S=S, causal=causal, B=np.full(L.shape, template.B))
    cols = estimate_columns(c, np.full(L.shape, backend, dtype=object), gpu_spec, torch_version)
    times = np.where(cols["supported"], np.nan_to_num(np.asarray(cols["time_ms"], dtype=np.float64)), np.nan)
    missing = ~np.asarray(cols["supported"], dtype=bool)
    if missing.any():
        fallback = estimate_columns(c, np.full(L.shape, "auto", dtype=object), gpu_spec, torch_version)
        times = np.where(missing, np.asarray(fallback["time_ms"], dtype=np.float64), times)
    times = np.nan_to_num(times)
    return times[:Q.size].reshape(Q.shape), times[Q.size:]


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
        self._linear: dict[int, tuple[float, float, int]] = {}
        self._head: dict[int, tuple[float, float, int]] = {}
        # the attention calls of every step shape this engine can run, priced at once
        self._q_grid = grid_points(max(1, memory.max_batch_tokens))
        longest = memory.num_blocks * memory.block_size + memory.max_batch_tokens if self.masked else max(
            memory.kv_cache_tokens, memory.max_batch_tokens) + memory.max_batch_tokens
        self._k_grid = grid_points(max(2, longest))
        self._table, self._diag = price_grid(
            inputs.gpu, self.hq, self.hq if self.masked else self.hk, m.head_dim, self.dtype, self.attn_backend,
            inputs.torch_version, self._q_grid, self._k_grid, self.masked)
        self.kv_bytes_per_token_layer = memory.kv_read_bytes_per_token
        windows = inputs.windows
        self.window = max((w for w in windows if w is not None), default=0)
        self.sliding_layers = sum(1 for w in windows if w is not None)
        self.full_layers = m.layers - self.sliding_layers
        # hf-cb's packed masked call on cuDNN: one graph build per shape the process has not run (graph_keys)
        self.graph_builds = self.masked and not cuda_graphs and self._masked_backend() == "cudnn"

    def _masked_backend(self) -> str:
        """The backend SDPA picks for hf-cb's packed masked call (a representative one: 16 queries, 1024 keys; the
        estimator's choice for this model's heads, head_dim and dtype)."""
        call = AttentionCall(batch=1, q_heads=self.hq, kv_heads=self.hq, head_dim=self.inputs.model.head_dim,
                             q_len=16, kv_len=1024, dtype=self.dtype, mask="bool", mode="forward",
                             backend=self.attn_backend)
        try:
            est = estimate_call(call, self.gpu, self.inputs.torch_version)
        except ValueError:
            return ""
        return est.selected_backend if est.supported else ""

    def graph_keys(self, q_tokens: int, masked_kv_tokens: int,
                   masked_window_kv_tokens: int | None = None) -> tuple[tuple[int, int], ...]:
        """The cuDNN graphs an hf-cb step's attention needs: one (Q, K) per layer type (full: K = the packed keys,
        sliding: K = the window-capped keys), one when both are equal; () when the call does not run on cuDNN.

        PyTorch keeps one cuDNN execution graph per distinct call (aten/src/ATen/native/cudnn/MHA.cpp, torch 2.11:
        MHAGraphCache keyed by b, h, s_q, s_kv, d and the strides of q, k, v, o and the bias, never evicted), and
        builds one, host time, the first time a key is called. transformers 5.17 `paged|sdpa` calls SDPA once per
        layer on (1, heads, Q, d) queries, (1, heads, K, d) keys and values and the `[..., :Q, :K]` slice of the
        engine's static bias (input_outputs.py `_setup_static_tensors`, `get_model_kwargs`): within one engine (its
        pool fixes the bias strides) a graph is new exactly when (Q, K) is. A key length of 1 runs on the efficient
        kernel (estimator/call/backends.py), not cuDNN."""
        if not self.graph_builds or q_tokens <= 0:
            return ()
        keys = set()
        if self.full_layers:
            keys.add((q_tokens, max(masked_kv_tokens, q_tokens)))
        if self.sliding_layers:
            win = masked_kv_tokens if masked_window_kv_tokens is None else masked_window_kv_tokens
            keys.add((q_tokens, max(win, q_tokens)))
        return tuple(sorted(k for k in keys if k[1] > 1))

    # --- the parts, memoised on the grid
    def _linear_part(self, tokens: int, rows: int) -> tuple[float, float, int]:
        """(GPU ms, eager host ms, kernels) of every layer's non-attention kernels over `tokens` tokens plus the
        model level (embedding, final norm; the LM head over `rows` rows)."""
        body = self._linear.get(grid_up(tokens))
        if body is None:
            body = self._layers(grid_up(tokens))
            self._linear[grid_up(tokens)] = body
        head = self._head.get(grid_up(rows))
        if head is None:
            p = passes.Pass()
            passes.gemm(p, self.kern, grid_up(rows), self.V, self.inputs.model.hidden, self.dtype)
            head = (sum(p.gpu.values()), p.cpu, p.kernels)
            self._head[grid_up(rows)] = head
        return body[0] + head[0], body[1] + head[1], body[2] + head[2]

    def _layers(self, T: int) -> tuple[float, float, int]:
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
        gpu_ms = sum(total.gpu.values())
        if inp.tp > 1:  # two all-reduces of the hidden states per layer (Megatron tensor parallel)
            kind, bw = self._link
            gpu_ms += 2 * m.layers * all_reduce_ms(T * m.hidden * passes.element_bytes(self.dtype), inp.tp, kind, bw)
        return gpu_ms, total.cpu, total.kernels

    def _call_ms(self, q: int, kv: int, causal: bool) -> float:
        """One attention call's ms: q rounded up to the grid, kv interpolated linearly between its two grid
        neighbours (an attention kernel's time is linear in the keys at fixed queries)."""
        qg, kg = self._q_grid, self._k_grid
        qi = min(bisect_left(qg, q), len(qg) - 1)
        if causal and kv <= qg[qi]:
            return float(self._diag[qi])
        ki = bisect_left(kg, kv)
        row = self._table[qi]
        if ki < len(kg) and kg[ki] == kv:
            return float(row[ki])
        lo, hi = (ki - 1, ki) if ki < len(kg) else (len(kg) - 2, len(kg) - 1)
        a, b = float(row[lo]), float(row[hi])
        return a + (b - a) * (kv - kg[lo]) / (kg[hi] - kg[lo])

    # --- one step
    def step_parts(self, q_tokens: int, logit_rows: int, decode_kv_tokens: int,
                   prefill_chunks: list[tuple[int, int]], masked_kv_tokens: int = 0,
                   decode_window_kv_tokens: int | None = None,
                   masked_window_kv_tokens: int | None = None) -> tuple[float, int, int]:
        """(GPU ms, kernels launched, K of hf-cb's packed call after padding) of one step's forward; the arguments
        as `step_ms`."""
        if q_tokens <= 0:
            return 0.0, 0, 0
        m = self.inputs.model
        win_dec = decode_kv_tokens if decode_window_kv_tokens is None else decode_window_kv_tokens
        win_masked = masked_kv_tokens if masked_window_kv_tokens is None else masked_window_kv_tokens
        if self.masked and self.cuda_graphs:
            # hf-cb with CUDA graphs replays shapes padded to intervals (transformers 5.17 model_runner.py
            # maybe_pad_inputs, utils.py pad_to_interval; initialization.py FALLBACK_DEFAULTS: q to 64 tokens, the
            # keys read to 16384, capped at max_batch_tokens and the cache's pages)
            padded_q = min(-(-q_tokens // HF_Q_PADDING) * HF_Q_PADDING, self.memory.max_batch_tokens)

            def pad(k: int) -> int:
                read = max(k - q_tokens, 0)
                read = min(-(-read // HF_KV_PADDING) * HF_KV_PADDING if read else HF_KV_PADDING,
                           self.memory.num_blocks * self.memory.block_size)
                return padded_q + read

            masked_kv_tokens, win_masked, q_tokens = pad(masked_kv_tokens), pad(win_masked), padded_q
        gpu_ms, host_ms, kernels = self._linear_part(q_tokens, max(1, logit_rows))
        attn_ms = 0.0
        for layers, windowed in ((self.full_layers, False), (self.sliding_layers, True)):
            if not layers:
                continue
            if self.masked:
                K = win_masked if windowed else masked_kv_tokens
                core = self._call_ms(q_tokens, max(K, q_tokens), False)
                # transformers 5.17 integrations/sdpa_paged.py: cache.update gathers the read pages and the new
                # tokens into one k and one v (index_select), repeat_kv copies them to every query head (GQA)
                elements = K * self.kv_bytes_per_token_layer / passes.element_bytes(self.dtype)
                gather = self.kern.mem_ms("copy", elements, self.dtype)[0]
                repeat = (self.kern.mem_ms("copy", elements * self.hq / self.hk, self.dtype)[0]
                          if self.hq > self.hk else 0.0)
                scatter = 0.0
                if windowed:  # the masked_scatter_ of k and of v in the sliding update (constants above;
                    # `elements` counts k and v together)
                    scatter = self.kern.mem_ms(
                        "copy", elements * MASKED_SCATTER_BYTES_PER_ELEMENT / 4, "bfloat16")[0]
                    kernels += layers * SLIDING_UPDATE_EXTRA_KERNELS
                attn_ms += layers * (core + gather + repeat + scatter)
                continue
            core = 0.0
            read = win_dec if windowed else decode_kv_tokens
            if read:
                core += self.kern.decode_attention_ms("flash", read * self.kv_bytes_per_token_layer)
            for chunk, ctx in prefill_chunks:
                seen = min(ctx, self.window - 1) if windowed else ctx
                core += self._call_ms(chunk, seen + chunk, seen == 0)
            attn_ms += layers * core
        kernels += 3 * m.layers
        gpu_ms += attn_ms
        return gpu_ms, kernels, max(masked_kv_tokens, q_tokens)

    def step_ms(self, q_tokens: int, logit_rows: int, decode_kv_tokens: int,
                prefill_chunks: list[tuple[int, int]], masked_kv_tokens: int = 0,
                decode_window_kv_tokens: int | None = None, masked_window_kv_tokens: int | None = None, *,
                requests: int = 0, new_graphs: int = 0, overhead: bool = True) -> float:
        """Wall ms of one step: `q_tokens` new tokens in the forward, `logit_rows` of them produce a token,
        decode rows read `decode_kv_tokens` cached tokens in all, `prefill_chunks` are (chunk tokens, cached tokens
        before the chunk); for hf-cb's masked path `masked_kv_tokens` is the K of its one packed call. Sliding-window
        layers read at most window - 1 cached tokens a request: `decode_window_kv_tokens` and
        `masked_window_kv_tokens` are those sums (None: the same as the full ones, no sliding layers). An hf-cb step
        (without CUDA graphs) is estimator/serve/hf_host.py's prepare + forward + update for `requests`
        scheduled requests, the forward with `new_graphs` cuDNN graph builds (the step's `graph_keys` the engine's
        process had not run; the caller keeps that set) (`overhead=False`: the GPU ms alone, as
        validation/serving/fit.py prices measured steps to fit the host terms)."""
        if q_tokens <= 0:
            return 0.0
        gpu_ms, kernels, K = self.step_parts(q_tokens, logit_rows, decode_kv_tokens, prefill_chunks,
                                             masked_kv_tokens, decode_window_kv_tokens, masked_window_kv_tokens)
        if self.cuda_graphs:
            host = self.kern.k.launch_floor_ms * GRAPH_STEP_LAUNCHES
            return max(gpu_ms, host) + self.sync_ms
        if self.memory.engine == "hf-cb":
            if not overhead:
                return gpu_ms
            cached = max(masked_kv_tokens - q_tokens, 0)
            window_cached = cached if masked_window_kv_tokens is None else max(masked_window_kv_tokens - q_tokens, 0)
            shape = hf_host.host_shape(requests=requests, q_tokens=q_tokens, cached_tokens=cached,
                                       window_cached_tokens=window_cached, full_groups=self.memory.full_groups,
                                       sliding_groups=self.memory.sliding_groups, masked=self.masked)
            return hf_host.step_ms(shape, gpu_ms, kernels, new_graphs)
        host = kernels * DECODE_KERNEL_HOST_MS
        return max(gpu_ms, host) + DECODE_MODEL_PYTHON_MS + self.sync_ms
