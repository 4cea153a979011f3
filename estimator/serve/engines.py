"""Serving engines: one `Engine` record per engine (its defaults and where they come from), the knobs a user sets
(`EngineConfig`), and the resolved configuration (`resolve_config`). The memory rules that size each engine's KV
pool live in estimator/serve/memory.py; docs/serving.md explains every rule with its source file and version.

API (stable):

- `ENGINES`: name -> `Engine` for `hf-cb` (Hugging Face transformers continuous batching: `generate_batch` /
  `init_continuous_batching`), `vllm`, `sglang`, `trtllm`.
- `EngineConfig(engine=, memory_fraction=, block_size=, max_batch_tokens=, num_blocks=, max_seqs=,
  max_model_len=, kv_dtype=, cuda_graphs=, scheduler=, chunked_prefill=)`: what the user set; None = the engine's
  default. ValueError naming the field on bad input.
- `resolve_config(config, max_sequence_tokens)` -> `ResolvedConfig`: every knob filled with the engine's default
  (the memory-derived ones, num_blocks and an auto max_batch_tokens, are filled by the memory rule).
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.call.config import KV_DTYPE_BITS, MAX_SEQ_LEN, check_positive_int, optional_float


@dataclass(frozen=True, kw_only=True)
class Engine:
    """An engine's defaults, the name of its memory-fraction knob and the source they were read from."""

    name: str
    label: str
    fraction_knob: str  # the engine's own name of --memory-fraction
    memory_fraction: float | None  # None: derived by the engine from the GPU (SGLang)
    block_size: int  # tokens per KV block (page)
    max_batch_tokens: int | None  # None: solved from memory (hf-cb)
    max_seqs: int
    schedulers: tuple[str, ...]
    cuda_graphs: bool  # default
    chunked_prefill: bool  # default
    sliding_window_release: bool  # frees the blocks a sliding-window layer no longer reads
    preemption: str  # what happens to a running request when blocks run out
    source: str


# Every default is read from the engine's source at the version named in `source`; docs/serving.md quotes them.
ENGINES: dict[str, Engine] = {
    "hf-cb": Engine(
        name="hf-cb", label="Hugging Face transformers continuous batching (generate_batch)",
        fraction_knob="max_memory_percent", memory_fraction=0.9, block_size=256, max_batch_tokens=None,
        max_seqs=1024, schedulers=("fifo", "prefill_first"), cuda_graphs=False, chunked_prefill=True,
        sliding_window_release=True, preemption="evict the newest request, recompute it later (cpu_offload_space 0)",
        source="transformers 5.17: generation/configuration_utils.py ContinuousBatchingConfig (block_size 256, "
               "scheduler_type fifo); generation/continuous_batching/initialization.py FALLBACK_DEFAULTS "
               "(max_requests_per_batch 1024) and resolve_max_memory_percent (0.9, 0.8 with logits processors); "
               "decide_use_cuda_graphs (off when an attention mask is needed: paged|sdpa, paged|eager)"),
    "vllm": Engine(
        name="vllm", label="vLLM (V1 engine)", fraction_knob="gpu_memory_utilization", memory_fraction=0.9,
        block_size=16, max_batch_tokens=8192, max_seqs=1024, schedulers=("fcfs",), cuda_graphs=True,
        chunked_prefill=True, sliding_window_release=True, preemption="recompute (the newest running request)",
        source="vllm main as stored (commit 35d5cda1): vllm/config/cache.py (gpu_memory_utilization 0.9, "
               "block_size 16), vllm/engine/arg_utils.py get_batch_defaults (OpenAI server: 8192 tokens and "
               "1024 sequences on GPUs of 70 GiB or more but A100, else 2048 and 256), vllm/v1/worker/gpu_worker.py "
               "determine_available_memory and vllm/utils/mem_utils.py memory_profiling"),
    "sglang": Engine(
        name="sglang", label="SGLang", fraction_knob="mem_fraction_static", memory_fraction=None, block_size=1,
        max_batch_tokens=8192, max_seqs=4096, schedulers=("lpm", "fcfs"), cuda_graphs=True, chunked_prefill=True,
        sliding_window_release=False, preemption="retract decoding requests back to the queue (recompute)",
        source="sglang main as stored: python/sglang/srt/server_args.py _handle_gpu_memory_settings (page_size 1, "
               "chunked_prefill_size and cuda_graph_max_bs by GPU memory, mem_fraction_static from the reserved "
               "memory), python/sglang/srt/model_executor/model_runner.py profile_max_num_token; max_running_requests "
               "4096 assumed (SGLang derives it from the pool)"),
    "trtllm": Engine(
        name="trtllm", label="TensorRT-LLM (PyTorch backend)", fraction_knob="free_gpu_memory_fraction",
        memory_fraction=0.9, block_size=32, max_batch_tokens=8192, max_seqs=2048, schedulers=("guaranteed_no_evict",
                                                                                               "max_utilization"),
        cuda_graphs=True, chunked_prefill=False, sliding_window_release=False,
        preemption="none under guaranteed_no_evict (admission reserves every block a request will need)",
        source="TensorRT-LLM v1.0: tensorrt_llm/llmapi/llm_args.py KvCacheConfig (free_gpu_memory_fraction 0.9, "
               "tokens_per_block 32), BuildConfig (max_num_tokens 8192, max_batch_size 2048), "
               "tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator (the dry run)"),
}


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """The knobs a user set. None: the engine's default (docs/contract.md §6)."""

    engine: str = "hf-cb"
    memory_fraction: float | None = None
    block_size: int | None = None
    max_batch_tokens: int | None = None
    num_blocks: int | None = None
    max_seqs: int | None = None
    max_model_len: int | None = None
    kv_dtype: str | None = None  # None: the model dtype
    cuda_graphs: bool | None = None
    scheduler: str | None = None
    chunked_prefill: bool | None = None

    def __post_init__(self) -> None:
        name = str(self.engine).strip().lower()
        if name not in ENGINES:
            raise ValueError(f"engine: unknown value {self.engine!r}; expected one of {', '.join(ENGINES)}")
        object.__setattr__(self, "engine", name)
        fraction = optional_float("memory_fraction", self.memory_fraction, "a fraction in (0, 1]")
        if fraction is not None and not 0 < fraction <= 1:
            raise ValueError(f"memory_fraction: expected a fraction in (0, 1], got {self.memory_fraction!r}")
        object.__setattr__(self, "memory_fraction", fraction)
        for field, limit in (("block_size", 1 << 16), ("max_batch_tokens", MAX_SEQ_LEN), ("num_blocks", 1 << 30),
                             ("max_seqs", 1 << 20), ("max_model_len", MAX_SEQ_LEN)):
            value = getattr(self, field)
            if value is not None:
                object.__setattr__(self, field, check_positive_int(field, value, limit))
        if self.engine == "hf-cb" and self.block_size is not None and self.block_size < 4:
            raise ValueError(f"block_size: hf-cb needs at least 4 tokens per block, got {self.block_size}")
        if self.kv_dtype is not None:
            kv = str(self.kv_dtype).strip().lower()
            kv = {"fp8": "float8", "bf16": "bfloat16", "fp16": "float16", "auto": ""}.get(kv, kv)
            if kv and kv not in KV_DTYPE_BITS:
                raise ValueError(f"kv_dtype: unknown value {self.kv_dtype!r}; expected one of "
                                 f"{', '.join(KV_DTYPE_BITS)}")
            object.__setattr__(self, "kv_dtype", kv or None)
        engine = ENGINES[self.engine]
        if self.scheduler is not None:
            sched = str(self.scheduler).strip().lower()
            if sched not in engine.schedulers:
                raise ValueError(f"scheduler: {self.scheduler!r} is not a {self.engine} scheduler; expected one of "
                                 f"{', '.join(engine.schedulers)}")
            object.__setattr__(self, "scheduler", sched)
        for field in ("cuda_graphs", "chunked_prefill"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, bool):
                raise ValueError(f"{field}: expected true or false, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ResolvedConfig:
    """Every knob with its value (user's or the engine default). `max_batch_tokens` and `num_blocks` stay None
    where the engine derives them from memory (hf-cb); `memory_fraction` None where SGLang derives it."""

    engine: Engine
    memory_fraction: float | None
    block_size: int
    max_batch_tokens: int | None
    num_blocks: int | None
    max_seqs: int
    max_model_len: int
    kv_dtype: str | None
    cuda_graphs: bool
    scheduler: str
    chunked_prefill: bool
    safety_margin: float  # hf-cb: no new prefill while free blocks < margin · num_blocks (after the first)
    hint_tokens: int = 0  # hf-cb generate_batch's WorkloadHints: longest prompt + max_new_tokens
    tp: int = 1
    capacity_bytes: int | None = None  # total device memory when it differs from the catalog's (a logged figure)


GIB = 1 << 30
MIB = 1 << 20


def vllm_batch_defaults(gpu_memory_bytes: int, gpu_name: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM's OpenAI server takes by default: 8192 and 1024 on GPUs of
    70 GiB or more that are not an A100, else 2048 and 256 (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults,
    UsageContext.OPENAI_API_SERVER; the offline LLM class would take 16384 / 8192 tokens)."""
    if gpu_memory_bytes >= 70 * GIB and "a100" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256


def sglang_defaults(gpu_memory_bytes: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) by GPU memory in MiB (python/sglang/srt/server_args.py
    ServerArgs._handle_gpu_memory_settings)."""
    mib = gpu_memory_bytes / MIB
    if mib < 20 * 1024:
        return 2048, 8
    if mib < 35 * 1024:
        return 2048, 24 if tp < 4 else 80
    if mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def resolve_config(config: EngineConfig, max_sequence_tokens: int, *, num_requests: int | None = None,
                   hint_tokens: int = 0, gpu_memory_bytes: int | None = None, gpu_name: str = "",
                   tp: int = 1) -> ResolvedConfig:
    """Fill the engine defaults. `max_sequence_tokens`: the longest prompt + output of the workload (the default
    max_model_len; a workload request longer than an explicit max_model_len is an error). hf-cb's generate_batch
    also passes WorkloadHints: `num_requests` caps max_requests_per_batch (initialization.py resolve_using_hints)
    and `hint_tokens` (longest prompt + max_new_tokens) sizes the decode fast path's block table."""
    e = ENGINES[config.engine]
    max_len = config.max_model_len or max_sequence_tokens
    if max_len < max_sequence_tokens:
        raise ValueError(f"max_model_len: {max_len:,} tokens is shorter than the workload's longest request "
                         f"({max_sequence_tokens:,} prompt + output tokens)")
    scheduler = config.scheduler or e.schedulers[0]
    default_tokens, default_seqs = e.max_batch_tokens, e.max_seqs
    if gpu_memory_bytes is not None and e.name == "vllm":
        default_tokens, default_seqs = vllm_batch_defaults(gpu_memory_bytes, gpu_name)
    if gpu_memory_bytes is not None and e.name == "sglang":
        default_tokens = sglang_defaults(gpu_memory_bytes, tp)[0]
    # hf-cb: FIFOScheduler's safety margin 0.15, PrefillFirstScheduler's 0.0 (transformers 5.17
    # generation/continuous_batching/scheduler.py __init__ of each)
    margin = (0.15 if scheduler == "fifo" else 0.0) if e.name == "hf-cb" else 0.0
    return ResolvedConfig(
        engine=e, memory_fraction=config.memory_fraction if config.memory_fraction is not None else e.memory_fraction,
        block_size=config.block_size or e.block_size,
        max_batch_tokens=config.max_batch_tokens or default_tokens, num_blocks=config.num_blocks,
        max_seqs=config.max_seqs or (min(e.max_seqs, num_requests) if e.name == "hf-cb" and num_requests else
                                     default_seqs), max_model_len=max_len, tp=tp, kv_dtype=config.kv_dtype,
        cuda_graphs=e.cuda_graphs if config.cuda_graphs is None else config.cuda_graphs, scheduler=scheduler,
        chunked_prefill=e.chunked_prefill if config.chunked_prefill is None else config.chunked_prefill,
        safety_margin=margin, hint_tokens=hint_tokens or max_len)
