"""Run Hugging Face transformers' continuous batching (5.17: transformers/generation/continuous_batching/) on one
device for a workload of requests arriving at their times, and record what the engine did.

Protocol, one run:
  1. The model is built from a config dict (validation.hf_configs, random weights) in bf16 under
     `with torch.device(device)`, `attn_implementation="sdpa"`; the engine switches it to `paged|sdpa` itself
     (continuous_api.py ContinuousBatchingManager.switch_to_cb_friendly_attn: no flash-attn on the machine).
  2. `model.init_continuous_batching(GenerationConfig(do_sample=False, eos_token_id=-1), ContinuousBatchingConfig
     (block_size, num_blocks, max_batch_tokens, max_memory_percent, max_requests_per_batch))`, no workload hints
     (a server does not know its requests in advance); `manager.warmup()` builds the batch processor, which
     allocates the paged cache (cache.py PagedAttentionMemoryHandler) in this thread: num_blocks, block_size and
     max_batch_tokens are read from `manager.batch_processor.cache` exactly as the engine chose them.
  3. `manager.start()`; `warmup_requests` short requests are served and waited for (cuBLAS handles, the first
     kernels); then the peak counters are reset and t0 = time.perf_counter().
  4. Request i is added with `add_request(random prompt ids, max_new_tokens=output_tokens, record_timestamps=True,
     eos_token_id=-1)` once perf_counter() - t0 >= arrival_s (the main thread sleeps until then): EOS is disabled,
     so each request produces exactly its output length. Its arrival is the state's `created_time`.
  5. Results are collected from `get_result` until every request finished or `timeout_s` passed (then the engine is
     hard-stopped and the unfinished requests are recorded as such).
Per request: arrival (created_time), start (leaving the waiting queue: lifespan[0]), each generated token's
timestamp (the first is the end of the prefill step), finish (lifespan[1]); all seconds from t0.
Per engine step (the scheduler's `schedule_batch` is wrapped on the instance, nothing else is changed): its start
time, the requests and query tokens it scheduled, the most KV it reads, the free blocks and the waiting queue.
Memory (CUDA): torch.cuda.max_memory_allocated / max_memory_reserved over step 3-5, the weights, the bytes
resident after the cache was allocated, and what the engine sized its cache from (torch.cuda.mem_get_info just
before, as requests.py get_device_and_memory_breakdown reads it: free = total - everything in use).
On a CPU the engine cannot read the machine's memory without psutil (requests.py get_device_and_memory_breakdown
returns 0); `cpu_memory_bytes` is then handed to it as the whole device, so CI runs are bounded.
"""

from __future__ import annotations

import contextlib
import gc
import random
import threading
import time
from dataclasses import dataclass, field

import torch

from validation.serving.records import RequestRecord, StepRecord

MAX_PROMPT_ID = 1000  # prompt ids are drawn below min(vocab, this); their values play no part in the timing


@dataclass(frozen=True, kw_only=True)
class EngineKnobs:
    """The ContinuousBatchingConfig fields a run sets; None leaves the engine's own rule."""
    block_size: int = 256
    num_blocks: int | None = None
    max_batch_tokens: int | None = None
    max_memory_percent: float | None = None
    max_requests_per_batch: int | None = None

    def __post_init__(self) -> None:
        if self.block_size < 4:
            raise ValueError(f"block_size: the engine needs at least 4 tokens a block, got {self.block_size}")
        for name in ("num_blocks", "max_batch_tokens", "max_requests_per_batch"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value}")
        if self.max_memory_percent is not None and not 0 < self.max_memory_percent <= 1:
            raise ValueError(f"max_memory_percent: expected a fraction in (0, 1], got {self.max_memory_percent}")


@dataclass(kw_only=True)
class EngineRun:
    """What one run recorded (seconds from t0; bytes exact)."""
    device_name: str
    cache: dict
    memory: dict
    requests: list[RequestRecord] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    wall_s: float = 0.0
    timed_out: bool = False


def build_model(cfg: dict, device: str):
    """The bf16 causal LM of a config dict (validation.hf_configs), random weights, on `device`."""
    from transformers import AutoModelForCausalLM

    from validation.model.hf_configs import to_hf_config

    with torch.device(device):
        model = AutoModelForCausalLM.from_config(to_hf_config(cfg), attn_implementation="sdpa", dtype=torch.bfloat16)
    return model.eval()


@contextlib.contextmanager
def _cpu_memory(device: str, cpu_memory_bytes: int):
    """On a CPU, report `cpu_memory_bytes` as the device's total and nothing used (see the module docstring)."""
    if device != "cpu":
        yield
        return
    from transformers.generation.continuous_batching import cache as cb_cache

    original = cb_cache.get_device_and_memory_breakdown
    cb_cache.get_device_and_memory_breakdown = lambda: (torch.device("cpu"), cpu_memory_bytes, 0, 0)
    try:
        yield
    finally:
        cb_cache.get_device_and_memory_breakdown = original


def _cb_config(knobs: EngineKnobs):
    from transformers import ContinuousBatchingConfig

    return ContinuousBatchingConfig(block_size=knobs.block_size, num_blocks=knobs.num_blocks,
                                    max_batch_tokens=knobs.max_batch_tokens,
                                    max_memory_percent=knobs.max_memory_percent,
                                    max_requests_per_batch=knobs.max_requests_per_batch,
                                    allow_block_sharing=False)


def _instrument(processor, steps: list, clock) -> contextlib.AbstractContextManager:
    """Wrap the engine's step methods on this instance to log each step (no behaviour change): the scheduler's
    schedule_batch opens a step record; prepare_next_batch, cache.extend_read_and_write_indices, the module's
    build_attention_mask, _generation_step (the forward and the blocking copy of the new tokens) and update_batch add
    their wall time to it (ms), with the engine thread's CPU time over the step and the time the garbage collector
    ran in it; the read-index lengths of the full and the sliding layer groups come from the IO object after the
    batch is prepared. Returns a context that removes the module-level patches (the mask builder, gc.callbacks)."""
    from transformers.generation.continuous_batching import input_outputs as cb_io

    scheduler, cache = processor.scheduler, processor.cache
    io = processor.inputs_and_outputs
    sliding_groups = [type(cm).__name__.startswith("Sliding") for cm in cache.group_cache_managers]
    gc_ms = [0.0]
    gc_t = [0.0]

    def current() -> dict | None:
        return steps[-1].phases if steps else None

    def add(key: str, ms: float) -> None:
        ph = current()
        if ph is not None:
            ph[key] = ph.get(key, 0.0) + ms

    def timed(fn, key: str):
        def wrapper(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                add(key, (time.perf_counter() - t) * 1e3)
        return wrapper

    original_schedule = scheduler.schedule_batch

    def schedule_batch(token_budget, cache_budget):
        t = clock()
        t_perf, cpu = time.perf_counter(), time.thread_time()
        waiting = len(scheduler.waiting_requests)
        result = original_schedule(token_budget, cache_budget)
        batch, _, q_tokens, kv_read = result
        if batch:
            decode = sum(1 for fs in batch if fs.query_length == 1 and fs.state.generated_len() > 0)
            steps.append(StepRecord(start_s=t, requests=len(batch), decode_requests=decode, q_tokens=q_tokens,
                                    max_kv_read=kv_read, free_blocks=cache.get_num_free_blocks(),
                                    waiting=waiting,
                                    phases={"schedule_ms": (time.perf_counter() - t_perf) * 1e3, "_cpu0": cpu,
                                            "_gc0": gc_ms[0]}))
        return result

    original_prepare = processor.prepare_next_batch

    def prepare_next_batch():
        t = time.perf_counter()
        n = len(steps)
        ok = original_prepare()
        if ok and len(steps) > n:
            ph = steps[-1].phases
            ph["prepare_ms"] = (time.perf_counter() - t) * 1e3
            sizes = getattr(io, "true_read_sizes", None) or []
            full = sum(s for s, sl in zip(sizes, sliding_groups, strict=False) if not sl)
            ph["read_full_tokens"] = int(full)
            ph["read_sliding_tokens"] = int(sum(sizes) - full)
        return ok

    original_update = processor.update_batch

    def update_batch():
        t = time.perf_counter()
        try:
            return original_update()
        finally:
            ph = current()
            if ph is not None and "_cpu0" in ph:
                ph["update_ms"] = (time.perf_counter() - t) * 1e3
                ph["cpu_ms"] = (time.thread_time() - ph.pop("_cpu0")) * 1e3
                ph["gc_ms"] = gc_ms[0] - ph.pop("_gc0")

    def on_gc(phase, info):
        if phase == "start":
            gc_t[0] = time.perf_counter()
        else:
            gc_ms[0] += (time.perf_counter() - gc_t[0]) * 1e3

    scheduler.schedule_batch = schedule_batch
    processor.prepare_next_batch = prepare_next_batch
    processor.update_batch = update_batch
    processor._generation_step = timed(processor._generation_step, "forward_ms")
    cache.extend_read_and_write_indices = timed(cache.extend_read_and_write_indices, "index_ms")
    original_mask = cb_io.build_attention_mask

    @contextlib.contextmanager
    def patches():
        cb_io.build_attention_mask = timed(original_mask, "mask_ms")
        gc.callbacks.append(on_gc)
        try:
            yield
        finally:
            cb_io.build_attention_mask = original_mask
            gc.callbacks.remove(on_gc)

    return patches()


def _cache_facts(manager) -> dict:
    cache, cfg = manager.batch_processor.cache, manager.batch_processor.cb_config
    return {"num_blocks": int(cache.num_blocks), "block_size": int(cache.block_size),
            "max_batch_tokens": int(cache.max_batch_tokens),
            "max_requests_per_batch": int(cfg.max_requests_per_batch),
            "max_memory_percent": float(cfg.max_memory_percent),
            "use_cuda_graph": ",".join(str(int(b)) for b in cfg.cuda_graph_booleans),
            "use_async_batching": int(bool(cfg.use_async_batching)),
            "attn_implementation": str(manager.model.config._attn_implementation)}


def _prompt(rng: random.Random, n: int, vocab: int) -> list[int]:
    hi = max(2, min(vocab, MAX_PROMPT_ID))
    return [rng.randrange(1, hi) for _ in range(n)]


def run_engine(model, requests: list, knobs: EngineKnobs, *, device: str, timeout_s: float, seed: int = 0,
               warmup_requests: int = 2, cpu_memory_bytes: int = 1 << 30) -> EngineRun:
    """Serve `requests` (objects with arrival_s, prompt_tokens, output_tokens, sorted by arrival) on the engine."""
    from transformers import GenerationConfig

    cuda = device.startswith("cuda")
    rng = random.Random(seed)
    vocab = int(model.config.get_text_config().vocab_size)
    gen = GenerationConfig(do_sample=False, eos_token_id=-1, max_new_tokens=1)
    steps: list[StepRecord] = []
    clock_origin = [time.perf_counter()]

    def clock() -> float:
        return time.perf_counter() - clock_origin[0]

    engine_view = {}
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()  # what requests.py get_device_and_memory_breakdown reads
        engine_view = {"device_total_bytes": int(total), "device_free_bytes": int(free),
                       "reserved_before_bytes": int(torch.cuda.memory_reserved())}
    before_cache = torch.cuda.memory_allocated() if cuda else None
    with _cpu_memory(device, cpu_memory_bytes):
        manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=_cb_config(knobs))
        manager.warmup()
    cache = _cache_facts(manager)
    memory = {"before_cache_bytes": before_cache,
              "after_cache_bytes": torch.cuda.memory_allocated() if cuda else None, **engine_view}
    stack = contextlib.ExitStack()
    patches = _instrument(manager.batch_processor, steps, clock)
    manager.start()
    timed_out = False
    try:
        stack.enter_context(patches)
        ids = [manager.add_request(_prompt(rng, 16, vocab), request_id=f"warmup{i}", max_new_tokens=4,
                                   eos_token_id=-1) for i in range(warmup_requests)]
        _collect(manager, set(ids), time.perf_counter() + timeout_s)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        steps.clear()
        prompts = [_prompt(rng, r.prompt_tokens, vocab) for r in requests]
        t0 = time.perf_counter()
        clock_origin[0] = t0
        deadline = t0 + timeout_s
        pending = {}
        results: dict = {}
        feeder_error: list = []

        def feed():
            try:
                for i, (req, prompt) in enumerate(zip(requests, prompts, strict=False)):
                    wait = t0 + req.arrival_s - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                    if time.perf_counter() > deadline:
                        return
                    rid = manager.add_request(prompt, request_id=f"r{i}", max_new_tokens=req.output_tokens,
                                              record_timestamps=True, eos_token_id=-1)
                    pending[rid] = i
            except Exception as exc:  # noqa: BLE001 - reported by the main thread
                feeder_error.append(exc)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        want = {f"r{i}" for i in range(len(requests))}
        results = _collect(manager, want, deadline)
        feeder.join(timeout=max(0.0, deadline - time.perf_counter()) + 1)
        wall_s = time.perf_counter() - t0
        timed_out = len(results) < len(requests)
        if feeder_error:
            raise RuntimeError(f"adding requests failed: {feeder_error[0]}")
        if cuda:
            torch.cuda.synchronize()
            memory["peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
            memory["peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
    finally:
        manager.stop(block=True, timeout=30, hard_stop=timed_out)
        stack.close()
        manager.destroy()
    records = [_record(i, req, results.get(f"r{i}"), t0) for i, req in enumerate(requests)]
    run = EngineRun(device_name=torch.cuda.get_device_name() if cuda else "cpu", cache=cache, memory=memory,
                    requests=records, steps=list(steps), wall_s=wall_s, timed_out=timed_out)
    manager = None  # the engine's cache tensors go with it before the next run (a closure above holds the name)
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return run


def _collect(manager, want: set, deadline: float) -> dict:
    """Finished outputs of the ids in `want`, until all came or the deadline passed."""
    got: dict = {}
    while len(got) < len(want):
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        out = manager.get_result(timeout=min(0.5, left))
        if out is None:
            if not manager.is_running():
                raise RuntimeError("the continuous batching thread stopped: " +
                                   str(manager.background_thread_status.fatal_error or "no error recorded"))
            continue
        if out.request_id in want and out.is_finished():
            if out.error:
                raise RuntimeError(f"request {out.request_id} failed in the engine: {out.error}")
            got[out.request_id] = out
    return got


def _record(i: int, req, out, t0: float) -> RequestRecord:
    if out is None:
        return RequestRecord(index=i, arrival_s=req.arrival_s, prompt_tokens=req.prompt_tokens,
                             output_tokens=req.output_tokens, finished=False)
    stamps = [t - t0 for t in (out.timestamps or [])]
    return RequestRecord(index=i, arrival_s=out.created_time - t0, prompt_tokens=req.prompt_tokens,
                         output_tokens=req.output_tokens, finished=True, start_s=out.lifespan[0] - t0,
                         finish_s=out.lifespan[1] - t0, generated_tokens=len(out.generated_tokens),
                         token_times_s=stamps)
