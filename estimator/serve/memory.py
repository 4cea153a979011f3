"""Each engine's KV pool, from the engine's own sizing rule (docs/serving.md quotes each with its file and version):
how many cache blocks it allocates, how many tokens one forward may batch, and what else sits in memory beside the
pool. The model terms (weights, the KV bytes of one token, the activations of one forward) come from the project's
model room (estimator/model), never re-derived here.

API (stable):

- `engine_memory(inputs, config)` -> `EngineMemory`. `inputs` is a `PlanInputs` for the model, dtype, attention
  backend, GPU and tp (its seq_len and batch are ignored); `config` a `ResolvedConfig` (estimator/serve/engines.py).
  Raises ValueError (one line, naming the field) when the engine cannot start: the weights do not fit, or the pool
  would hold no block.
- `EngineMemory`: `kv_cache_bytes`, `kv_cache_tokens`, `num_blocks`, `block_size`, `max_batch_tokens`,
  `max_seqs`, the layer groups the pool is split into (`full_groups`, `sliding_groups`, `window`,
  `window_blocks`), `weights_bytes`, `available_bytes` (what the rule divides), `static_bytes` (the engine's
  fixed input/output tensors), `mask_bytes` (hf-cb's dense attention mask), `activation_bytes` (the forward of
  `max_batch_tokens` tokens), `reserved_bytes` (what the rule holds back: CUDA graphs, non-torch memory),
  `context_bytes`, `components` (name, bytes) summing to `peak_bytes`, `rule` (one sentence) and `source`.
  `blocks_for(tokens)` is the blocks one request of that many cached tokens holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from estimator.call.attention import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES
from estimator.call.config import DTYPE_BITS, KV_DTYPE_BITS
from estimator.call.shapes import cdiv
from estimator.hardware import get_gpu
from estimator.model.budget import budget
from estimator.model.inputs import PlanInputs
from estimator.serve.engines import ResolvedConfig
from estimator.serve.weights import weights_allocator_bytes, weights_bytes

GIB = 1 << 30
# hf-cb: transformers 5.17 generation/continuous_batching/cache.py PagedAttentionMemoryHandler
HF_MIN_MAX_BATCH_TOKENS = 256  # _min_max_batch_tokens
HF_DEFAULT_MAX_BATCH_TOKENS = 8192  # _default_max_batch_tokens
HF_CACHE_FILL_PER_BATCH = 0.1  # infer_max_batch_tokens_and_num_blocks: "each batch fills 10% of the cache at most"
HF_STATIC_INPUT_ROWS = 7  # input_outputs.py ContinuousBatchingIOs.static_inputs
HF_FALLBACK_MAX_BLOCKS_PER_REQUEST = 32  # configuration_utils.py fallback_max_blocks_per_request


@dataclass(frozen=True, kw_only=True)
class EngineMemory:
    """What the engine allocates on one GPU (bytes per GPU, exact ints)."""

    engine: str
    block_size: int
    num_blocks: int
    kv_cache_tokens: int  # tokens the pool holds for one full-attention layer group (num_blocks·block / groups)
    kv_cache_bytes: int
    kv_bytes_per_token: int  # every layer of one GPU
    max_batch_tokens: int
    max_seqs: int
    full_groups: int  # hf-cb/vLLM layer groups of full attention (each request holds blocks in each)
    sliding_groups: int
    window: int | None
    window_blocks: int  # blocks a request holds at most in each sliding group (0: no sliding groups)
    weights_bytes: int
    available_bytes: int
    static_bytes: int
    mask_bytes: int
    activation_bytes: int
    reserved_bytes: int
    context_bytes: int
    capacity_bytes: int
    components: tuple[tuple[str, int], ...]
    rule: str
    source: str
    kv_read_bytes_per_token: int = 0  # per layer: what one cached token costs an attention read (k and v)

    @property
    def peak_bytes(self) -> int:
        return sum(b for _, b in self.components)

    @property
    def groups(self) -> int:
        return self.full_groups + self.sliding_groups

    def blocks_for(self, tokens: int) -> int:
        """Blocks one request holds with `tokens` tokens cached: ceil(tokens / block) in every full group, at most
        `window_blocks` in every sliding group."""
        n = cdiv(tokens, self.block_size) if tokens > 0 else 0
        return n * self.full_groups + (min(n, self.window_blocks) * self.sliding_groups if self.sliding_groups else 0)


def _gpu(inputs: PlanInputs, config: ResolvedConfig):
    """The catalog GPU, with the total memory a log reported where the config carries one."""
    gpu = get_gpu(inputs.gpu)
    return gpu if config.capacity_bytes is None else replace(gpu, memory_bytes=int(config.capacity_bytes))


def _kv_element_bytes(inputs: PlanInputs, config: ResolvedConfig) -> float:
    kv = config.kv_dtype or inputs.dtype
    return KV_DTYPE_BITS[kv] / 8


def _layer_groups(inputs: PlanInputs) -> tuple[int, int, int, int | None]:
    """(group_size, full groups, sliding groups, window) as transformers 5.17 cache.py group_layers_by_attn_type
    splits the layers (vLLM's hybrid allocator rule): every group the same size, gcd of the counts per type."""
    windows = inputs.windows
    full = sum(1 for w in windows if w is None)
    sliding = len(windows) - full
    size = math.gcd(full, sliding) if full and sliding else (full or sliding)
    window = max((w for w in windows if w is not None), default=None)
    return size, (full // size if full else 0), (sliding // size if sliding else 0), window


@lru_cache(maxsize=256)
def forward_activation_bytes(inputs: PlanInputs, tokens: int, backend: str, logits_rows: int) -> int:
    """Activation peak of one forward of `tokens` tokens packed as one sequence (the project's inference
    activations, estimator/model/activations.py), with logits for `logits_rows` positions."""
    probe = replace(inputs, seq_len=max(1, tokens), batch=1, backend=backend, logits="last", window=None, cp=1,
                    gpus=inputs.tp)
    plan = budget(probe)
    detail = plan.activation_detail
    V = cdiv(inputs.model.vocab, inputs.tp)
    es = DTYPE_BITS[inputs.dtype] // 8
    logits = detail.get("logits_phase_bytes", 0) + max(0, logits_rows - 1) * V * (es + 4)
    return max(plan.activation_bytes, logits)


# The device memory outside PyTorch's allocator when hf-cb sizes its cache (`requests.py
# get_device_and_memory_breakdown`, after the model is loaded, before any forward): device total - mem_get_info free
# - torch.cuda.memory_reserved, 648,871,936 B in every fresh H200 process measured (25 runs:
# validation/data/h200_serve_{heldout,heldout2,heldout4}_summary.csv and each shared process's first run in
# h200_serve_{fit2,heldout3}_summary.csv). That is 2 MiB under CUDA_CONTEXT_BYTES (estimator/call/attention.py), read
# after a first attention kernel had run; what the 2 MiB is was not traced. With CUDA_CONTEXT_BYTES the free memory
# came out 2 MiB low, 2 blocks or 2 max_batch_tokens under in some runs.
HF_CB_CONTEXT_AT_SIZING_BYTES = 648_871_936


def engine_memory(inputs: PlanInputs, config: ResolvedConfig) -> EngineMemory:
    """The engine's pool and the rest of its memory on one GPU (see the module docstring)."""
    if inputs.model.kind != "decoder":
        raise ValueError("preset: serving needs a decoder model (an encoder has no KV cache to page)")
    rule = {"hf-cb": _hf_cb, "vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}[config.engine.name]
    mem = rule(inputs, config)
    if mem.num_blocks < 1:
        raise ValueError(f"memory_fraction: {config.engine.name} would have no KV cache block left "
                         f"({mem.available_bytes / GIB:.2f} GiB available after the weights)")
    return mem


def hf_cb_memory(inputs: PlanInputs, config: ResolvedConfig, available_bytes: int) -> EngineMemory:
    """hf-cb's pool for a given `available_bytes` (what transformers computes as max_memory_percent of the free
    memory after loading): the solve alone, to compare with transformers' own PagedAttentionMemoryHandler."""
    return _hf_cb(inputs, config, available_bytes)


# ------------------------------------------------------------------------------------------------------- hf-cb

def _hf_cb(inputs: PlanInputs, config: ResolvedConfig, available_bytes: int | None = None) -> EngineMemory:
    """transformers 5.17 generation/continuous_batching/cache.py PagedAttentionMemoryHandler: the memory polynomial
    coeff_m·M + coeff_n·N + coeff_mn·M·N + coeff_mm·M² over max_memory_percent of the free memory after loading,
    M = max_batch_tokens, N = cache pages; solved as infer_max_batch_tokens_and_num_blocks does."""
    m, tp = inputs.model, inputs.tp
    if config.kv_dtype and config.kv_dtype != inputs.dtype:
        raise ValueError(f"kv_dtype: hf-cb keeps the cache in the model dtype ({inputs.dtype}); "
                         f"{config.kv_dtype} is not supported")
    gpu = _gpu(inputs, config)
    es = DTYPE_BITS[inputs.dtype] // 8
    a = c = es
    kv_heads = m.kv_heads // tp if m.kv_heads % tp == 0 else m.kv_heads  # cache.py: kv heads split when TP'ed
    page = m.head_dim * kv_heads  # PagedAttentionMemoryHandler.page_size (per GPU)
    group_size, full_groups, sliding_groups, window = _layer_groups(inputs)
    groups = full_groups + sliding_groups
    flash = inputs.backend == "flash-attn"
    masks = 0 if flash else (2 if sliding_groups else 1)  # num_attention_masks
    # async double-buffering (io_multiplier 2) only with CUDA graphs and no mask (initialization.py)
    io = 2 if (config.cuda_graphs and flash) else 1
    # max_blocks_per_request: the decode fast path (flash_attn_with_kvcache) only; 0 otherwise
    # (initialization.py ensure_decode_fast_path_is_available); generate_batch's hint: even, >= max length / block + 1
    if flash and not sliding_groups:
        per_req = cdiv(config.hint_tokens, config.block_size) + 1
        max_blocks = per_req + per_req % 2
    else:
        max_blocks = 0
    i32 = 4
    # the device's free memory after loading: the context and what the allocator reserved for the weights
    # (weights: the bytes allocated for them as the allocator keeps the blocks)
    weights, reserved = weights_allocator_bytes(inputs)
    free = gpu.memory_bytes - HF_CB_CONTEXT_AT_SIZING_BYTES - reserved
    if free <= 0:
        raise ValueError(f"gpu: the weights ({weights / GIB:.2f} GiB per GPU) do not fit on {gpu.label}")
    fraction = config.memory_fraction
    # requests.py get_device_and_memory_breakdown: total - max(allocated, reserved) = the free memory after loading
    available = int(free * fraction) if available_bytes is None else int(available_bytes)
    # activation peaks (cache.py activation_peak): (delta_m, delta_n) per peak; full (not per-GPU) head counts
    lm_head = (m.hidden * a + m.vocab * 4, 0)
    attention = (a * (m.hidden + m.q_heads * m.head_dim + 2 * page), 2 * page * a)

    def coefficients(peak):
        dm, dn = peak
        cn = dn + 2 * group_size * page * c + io * groups * 8
        cm = dm + io * 7 * i32 + io * 1 * i32 + io * groups * max_blocks * i32 + io * groups * 8 + io * groups * 8
        cmn = io * masks * a
        cmm = io * masks * a
        return cm, cn, cmn, cmm

    def quadratic(qa, qb, qc):
        if qa == 0:
            return int(-qc / qb)
        disc = qb * qb - 4 * qa * qc
        if disc < 0:
            raise ValueError("memory_fraction: no cache size fits the memory left (hf-cb's solve has no root)")
        root = (-qb + math.sqrt(disc)) / (2 * qa)
        if root < 0:
            raise ValueError("memory_fraction: no cache size fits the memory left (hf-cb's solve has no root)")
        return int(math.floor(root))

    def solve_one(peak, M, nblocks, fill):
        cm, cn, cmn, cmm = coefficients(peak)
        if M is None and nblocks is None:
            pages = quadratic(cmn * fill + cmm * fill ** 2, cn + cm * fill, -available)
            return int(pages * fill), int(pages) // config.block_size
        if nblocks is None:
            pages = math.floor((available - cm * M - cmm * M * M) / (cn + cmn * M))
            return M, pages // config.block_size
        N = nblocks * config.block_size
        return quadratic(cmm, cm + cmn * N, cn * N - available), nblocks

    def solve(M, nblocks, fill=None):
        sols = [solve_one(p, M, nblocks, fill) for p in (lm_head, attention)]
        return min(s[0] for s in sols), min(s[1] for s in sols)

    M, nblocks = config.max_batch_tokens, config.num_blocks
    if M is None or nblocks is None:
        if M is None and nblocks is None:
            upper, _ = solve(None, None, HF_CACHE_FILL_PER_BATCH)
            M = max(min(HF_DEFAULT_MAX_BATCH_TOKENS, upper), HF_MIN_MAX_BATCH_TOKENS)
        M, nblocks = solve(M, nblocks)
    N = nblocks * config.block_size
    footprint = max(sum(k * v for k, v in zip(coefficients(p), (M, N, M * N, M * M), strict=True))
                    for p in (lm_head, attention))
    if footprint > available:
        raise ValueError(f"num_blocks: {nblocks:,} blocks with max_batch_tokens {M:,} need {footprint / GIB:.2f} GiB, "
                         f"more than the {available / GIB:.2f} GiB hf-cb may use")
    if M <= 0 or nblocks <= 0:
        raise ValueError(f"memory_fraction: hf-cb finds no room (max_batch_tokens {M}, num_blocks {nblocks})")
    # update_cb_config_after_cache_creation: requests per batch capped by M and (no prefix sharing) num_blocks
    max_seqs = min(config.max_seqs, M)
    if groups > 1 or sliding_groups:
        max_seqs = min(max_seqs, nblocks)
    # what is allocated: the cache (cache.py: (num_blocks + 2)·block pages per layer of a group, k and v),
    # the IO tensors (input_outputs.py _setup_static_tensors) and the mask(s)
    kv_bytes = 2 * group_size * (nblocks + 2) * config.block_size * page * c
    bulk = HF_STATIC_INPUT_ROWS * (cdiv(M + 1, 32) * 32) * i32 + (M + 1) * i32
    index = groups * M * 8 + groups * (N + M) * 8 + groups * max_seqs * max_blocks * i32 * (1 if max_blocks else 0)
    static = io * (bulk + index)
    # the solver counts two masks whenever a sliding group exists (cache.py num_attention_masks), but
    # input_outputs.py _setup_static_tensors allocates one (1, 1, M, N + M) mask per layer type present: one for a
    # model whose every layer slides (Mistral)
    allocated_masks = 0 if flash else int(full_groups > 0) + int(sliding_groups > 0)
    mask = io * allocated_masks * M * (N + M) * a
    activation = forward_activation_bytes(inputs, M, "flash-attn" if flash else inputs.backend, min(max_seqs, M))
    components = (("weights", weights), ("kv cache", kv_bytes), ("static input/output tensors", static),
                  ("attention mask (1, 1, M, N + M)", mask), ("forward activations (max_batch_tokens)", activation),
                  ("cuBLAS workspace", CUBLAS_WORKSPACE_BYTES), ("CUDA context", CUDA_CONTEXT_BYTES))
    return EngineMemory(
        engine="hf-cb", block_size=config.block_size, num_blocks=nblocks, kv_cache_tokens=N // max(1, groups),
        kv_cache_bytes=kv_bytes, kv_bytes_per_token=m.layers * 2 * page * c, max_batch_tokens=M, max_seqs=max_seqs,
        full_groups=full_groups, sliding_groups=sliding_groups, window=window if sliding_groups else None,
        window_blocks=cdiv(window, config.block_size) if sliding_groups else 0, weights_bytes=weights,
        available_bytes=available, static_bytes=static, mask_bytes=mask, activation_bytes=activation,
        reserved_bytes=0, context_bytes=CUDA_CONTEXT_BYTES, capacity_bytes=gpu.memory_bytes, components=components,
        rule=f"max_memory_percent {fraction:g} of the free memory after loading ({available / GIB:.2f} GiB) solved "
             f"for max_batch_tokens M and cache pages N in coeff_m·M + coeff_n·N + coeff_mn·M·N + coeff_mm·M²",
        source="transformers 5.17 generation/continuous_batching/cache.py PagedAttentionMemoryHandler",
        kv_read_bytes_per_token=2 * page * es)


# ------------------------------------------------------------------------------------------- vLLM, SGLang, TRT

def _per_token_kv(inputs: PlanInputs, config: ResolvedConfig) -> tuple[int, float]:
    """(elements per token per layer per GPU, element bytes) of the cache the engine keeps."""
    elements = inputs.model.kv_cache_elements_per_token_per_layer(inputs.kv_layout, inputs.tp)
    return elements, _kv_element_bytes(inputs, config)


def _pooled(inputs: PlanInputs, config: ResolvedConfig, *, engine: str, kv_budget: int, available: int,
            activation: int, reserved: int, rule: str, source: str, groups_apply: bool) -> EngineMemory:
    m = inputs.model
    gpu = _gpu(inputs, config)
    elements, kv_es = _per_token_kv(inputs, config)
    weights = weights_bytes(inputs)
    if groups_apply:
        group_size, full_groups, sliding_groups, window = _layer_groups(inputs)
    else:
        group_size, full_groups, sliding_groups, window = m.layers, 1, 0, None
    block_bytes = int(group_size * config.block_size * elements * kv_es)  # k and v of block tokens, one group
    nblocks = config.num_blocks if config.num_blocks is not None else max(0, kv_budget // max(1, block_bytes))
    kv_bytes = nblocks * block_bytes
    groups = full_groups + sliding_groups
    M = config.max_batch_tokens
    components = (("weights", weights), ("kv cache", kv_bytes), ("forward activations (max_batch_tokens)", activation),
                  ("reserved by the rule (graphs, non-torch)", reserved), ("CUDA context", CUDA_CONTEXT_BYTES))
    return EngineMemory(
        engine=engine, block_size=config.block_size, num_blocks=nblocks,
        kv_cache_tokens=nblocks * config.block_size // max(1, groups), kv_cache_bytes=kv_bytes,
        kv_bytes_per_token=int(m.layers * elements * kv_es), max_batch_tokens=M, max_seqs=config.max_seqs,
        full_groups=full_groups, sliding_groups=sliding_groups, window=window if sliding_groups else None,
        window_blocks=(cdiv(min(window - 1 + M, config.max_model_len), config.block_size) + 1) if sliding_groups else 0,
        weights_bytes=weights, available_bytes=available, static_bytes=0, mask_bytes=0, activation_bytes=activation,
        reserved_bytes=reserved, context_bytes=CUDA_CONTEXT_BYTES, capacity_bytes=gpu.memory_bytes,
        components=components, rule=rule, source=source,
        kv_read_bytes_per_token=int(elements * kv_es))


def _vllm(inputs: PlanInputs, config: ResolvedConfig) -> EngineMemory:
    """vLLM V1 (vllm/v1/worker/gpu_worker.py determine_available_memory, vllm/utils/mem_utils.py
    memory_profiling): KV pool = total · gpu_memory_utilization - (weights + the torch peak increase of
    profile_run, one dummy forward of max_num_batched_tokens tokens and a dummy sampler over max_num_seqs rows, +
    the non-torch increase since the worker's first snapshot). The CUDA context predates that snapshot: it is not
    subtracted (it lives in the 1 - utilization margin), nor are the CUDA graphs, captured after the pool exists.
    Non-torch memory (NCCL buffers under tp) is taken as 0 here."""
    gpu = _gpu(inputs, config)
    weights = weights_bytes(inputs)
    activation = forward_activation_bytes(inputs, config.max_batch_tokens, "flash-attn",
                                          min(config.max_seqs, config.max_batch_tokens))
    requested = int(gpu.memory_bytes * config.memory_fraction)
    kv_budget = requested - weights - activation
    if kv_budget <= 0 and config.num_blocks is None:
        raise ValueError(f"memory_fraction: gpu_memory_utilization {config.memory_fraction:g} of {gpu.label} leaves "
                         f"no room for a KV cache after {weights / GIB:.2f} GiB of weights")
    return _pooled(inputs, config, engine="vllm", kv_budget=kv_budget, available=requested, activation=activation,
                   reserved=0, groups_apply=True,
                   rule=f"gpu_memory_utilization {config.memory_fraction:g} x total - weights - profiled forward "
                        "peak (max_num_batched_tokens) - non-torch memory, in blocks of block_size tokens per layer "
                        "group",
                   source="vllm (commit 35d5cda1) vllm/v1/worker/gpu_worker.py determine_available_memory")


def sglang_mem_fraction_static(inputs: PlanInputs, config: ResolvedConfig) -> float:
    """SGLang's default mem_fraction_static (python/sglang/srt/server_args.py _handle_gpu_memory_settings):
    reserved MiB = 512 + max(chunked_prefill_size, 2048)·1.5 + cuda_graph_max_bs·2 + tp·pp/8·1024, at least
    10 GiB on GPUs of more than 60 GiB; mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3), gpu_mem
    the device memory in MiB."""
    from estimator.serve.engines import sglang_defaults

    gpu = _gpu(inputs, config)
    mib = gpu.memory_bytes / (1 << 20)
    _, graph_bs = sglang_defaults(gpu.memory_bytes, inputs.tp)
    reserved = 512 + max(config.max_batch_tokens, 2048) * 1.5 + graph_bs * 2 + inputs.tp * 1 / 8 * 1024
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3)


def _sglang(inputs: PlanInputs, config: ResolvedConfig) -> EngineMemory:
    """SGLang (python/sglang/srt/model_executor/model_runner.py profile_max_num_token): rest = free memory after
    loading - free memory before loading · (1 - mem_fraction_static); max_total_num_tokens = rest / cell_size,
    cell_size the KV bytes of one token over every layer (one-token pages)."""
    gpu = _gpu(inputs, config)
    weights = weights_bytes(inputs)
    fraction = config.memory_fraction if config.memory_fraction is not None else sglang_mem_fraction_static(inputs,
                                                                                                            config)
    before = gpu.memory_bytes - CUDA_CONTEXT_BYTES
    rest = int(before - weights - before * (1 - fraction))
    if rest <= 0 and config.num_blocks is None:
        raise ValueError(f"memory_fraction: mem_fraction_static {fraction:g} of {gpu.label} leaves no room for a KV "
                         f"cache after {weights / GIB:.2f} GiB of weights")
    activation = forward_activation_bytes(inputs, config.max_batch_tokens, "flash-attn",
                                          min(config.max_seqs, config.max_batch_tokens))
    return _pooled(inputs, config, engine="sglang", kv_budget=rest, available=rest, activation=activation,
                   reserved=0, groups_apply=False,
                   rule=f"mem_fraction_static {fraction:g}: free memory after loading - free memory before loading "
                        f"x (1 - {fraction:g}), divided by the KV bytes of one token (page_size 1)",
                   source="sglang python/sglang/srt/model_executor/model_runner.py profile_max_num_token")


def _trtllm(inputs: PlanInputs, config: ResolvedConfig) -> EngineMemory:
    """TensorRT-LLM PyTorch backend (tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator.configure_kv_cache_capacity
    and _cal_max_memory): after the weights and a dry run of dummy requests, free_gpu_memory_fraction of
    (total - peak) goes to the KV cache, max_tokens = that / the KV bytes of one token."""
    gpu = _gpu(inputs, config)
    weights = weights_bytes(inputs)
    activation = forward_activation_bytes(inputs, config.max_batch_tokens, "flash-attn", config.max_seqs)
    # _cal_max_memory: (total - peak) x fraction, peak = torch peak of the dry run (weights, activations) + the
    # memory used outside torch (the CUDA context, NCCL, CUDA graphs: the context here)
    free = gpu.memory_bytes - CUDA_CONTEXT_BYTES - weights - activation
    kv_budget = int(free * config.memory_fraction)
    if kv_budget <= 0 and config.num_blocks is None:
        raise ValueError(f"gpu: the weights ({weights / GIB:.2f} GiB per GPU) leave no free memory on {gpu.label}")
    return _pooled(inputs, config, engine="trtllm", kv_budget=kv_budget, available=free, activation=activation,
                   reserved=0, groups_apply=False,
                   rule=f"free_gpu_memory_fraction {config.memory_fraction:g} of the memory free after the weights "
                        "and a dry-run forward, in blocks of tokens_per_block tokens",
                   source="TensorRT-LLM v1.0 tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator")
