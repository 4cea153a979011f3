"""The engine's step loop, simulated: at each step the scheduler picks what runs (admission by token budget and
free blocks, chunked prefill, the decode batch, preemption with recompute when blocks run out), the step's time
comes from `StepPricer` (estimator/serve/step_cost.py), and every request's first-token and finish times fall out.

Schedulers, each as its engine's source runs it (docs/serving.md has the file paths and versions):
- hf-cb `fifo` (transformers 5.17 generation/continuous_batching/scheduler.py FIFOScheduler): decoding requests
  first, then split prefills, then waiting requests, within max_batch_tokens and max_requests_per_batch; no new
  prefill once free blocks fall under 15% of the pool (safety_margin) unless it is the first of the batch; blocks
  allocated as `_allocate_blocks_if_needed` does; when nothing can be scheduled, or a running request starves, the
  newest starved requests are evicted (offloading_manager.py offload_requests, cpu_offload_space 0: soft reset) and
  later recompute their prompt and generated tokens. `prefill_first`: split prefills before decodes, no margin.
- vLLM (vllm/v1/core/sched/scheduler.py): running requests first (decode or the next prefill chunk), the newest
  running request preempted (recompute) when a block cannot be allocated, then waiting requests while the token
  budget, max_num_seqs and the free blocks allow; a sliding-window group holds at most its window's blocks.
- SGLang (python/sglang/srt/managers/scheduler.py): a prefill batch when waiting requests fit (chunked at
  chunked_prefill_size), admission reserving 0.7 of each running request's remaining output tokens
  (new_token_ratio), else a decode batch; a decode that cannot get a page retracts the newest request.
- TensorRT-LLM guaranteed_no_evict (cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp): a request is admitted
  only when the blocks of its whole prompt + output are free; context and generation requests share a step.

API (stable): `simulate(workload, memory, pricer, config, progress=None)` -> `Simulation` (per-request times in
seconds, the timeline of KV occupancy and queue length, step count, preemptions).
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from dataclasses import dataclass, field

from estimator.serve.engines import ResolvedConfig
from estimator.serve.memory import EngineMemory
from estimator.serve.step_cost import StepPricer
from estimator.serve.workload import Workload

MAX_STEPS = 20_000_000  # a bound on the loop whatever the input (a browser can start a simulation)
SGLANG_NEW_TOKEN_RATIO = 0.7  # sglang python/sglang/srt/managers/schedule_policy.py: SGLANG_INIT_NEW_TOKEN_RATIO


@dataclass(frozen=True, kw_only=True)
class Simulation:
    """Per request (workload order): arrival, first token and finish times (s); the timeline (one point per step,
    thinned to at most `TIMELINE_POINTS`): time s, running requests, waiting requests, KV blocks in use."""

    arrival_s: tuple[float, ...]
    first_token_s: tuple[float, ...]
    finish_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    preemptions: tuple[int, ...]
    steps: int
    busy_s: float
    timeline: dict = field(hash=False)
    max_batch_tokens_used: int = 0
    max_kv_read_tokens: int = 0  # the largest K of one step (hf-cb: the packed masked call)
    max_running: int = 0


TIMELINE_POINTS = 2000


class _State:
    __slots__ = ("computed", "target", "generated", "blocks", "logical", "first", "finish", "preempted", "running")

    def __init__(self, prompt: int) -> None:
        self.computed = 0  # tokens whose k, v are in the cache
        self.target = prompt  # tokens to prefill before the next token comes out (prompt + regenerated)
        self.generated = 0
        self.blocks = 0  # physical blocks held (all groups)
        self.logical = 0  # blocks per group (hf-cb's allocated_blocks)
        self.first = -1.0
        self.finish = -1.0
        self.preempted = 0
        self.running = False


def simulate(workload: Workload, memory: EngineMemory, pricer: StepPricer, config: ResolvedConfig,
             progress=None) -> Simulation:
    """Run the engine's step loop over the workload (see the module docstring). `progress(fraction)` is called
    now and then with the share of requests finished."""
    reqs = workload.requests
    n = len(reqs)
    arrival = [r.arrival_s for r in reqs]
    prompt = [r.prompt_tokens for r in reqs]
    output = [r.output_tokens for r in reqs]
    bs = memory.block_size
    for i, r in enumerate(reqs):
        need = memory.blocks_for(r.total_tokens)
        if need > memory.num_blocks:
            raise ValueError(f"num_blocks: request {i} ({r.prompt_tokens:,} + {r.output_tokens:,} tokens) needs "
                             f"{need:,} KV blocks; the {config.engine.name} pool holds {memory.num_blocks:,}")
    engine = config.engine.name
    if engine == "trtllm" and not config.chunked_prefill:
        longest = max(prompt)
        if longest > memory.max_batch_tokens:
            raise ValueError(f"max_batch_tokens: a {longest:,}-token prompt needs chunked prefill (TensorRT-LLM "
                             f"enable_chunked_prefill) or max_num_tokens >= {longest:,}")
    st = [_State(p) for p in prompt]
    waiting: deque[int] = deque()
    running: list[int] = []
    free = memory.num_blocks
    t = 0.0
    busy = 0.0
    nxt = 0
    done = 0
    steps = 0
    tl_t, tl_run, tl_wait, tl_blocks = [], [], [], []
    max_q = max_k = max_run = 0
    M = memory.max_batch_tokens
    max_seqs = memory.max_seqs
    margin = config.safety_margin * memory.num_blocks
    full_g, slide_g, wblocks = memory.full_groups, memory.sliding_groups, memory.window_blocks

    def phys_blocks(logical_new: int, logical_have: int) -> int:
        """Physical blocks for `logical_new` more blocks per group (cache.py blocks_needed)."""
        extra = logical_new * full_g
        if slide_g:
            extra += min(max(wblocks - logical_have, 0), logical_new) * slide_g
        return extra

    def release(i: int) -> None:
        nonlocal free
        s = st[i]
        free += s.blocks
        s.blocks = 0
        s.logical = 0

    def reset(i: int) -> None:
        """Recompute preemption: the cache is dropped; prompt + generated tokens are prefilled again."""
        s = st[i]
        release(i)
        s.computed = 0
        s.target = prompt[i] + s.generated
        s.preempted += 1
        s.running = False

    def grow(i: int, tokens: int) -> bool:
        """Allocate what request i needs to cache `tokens` more tokens; False (nothing allocated) if the pool
        cannot. hf-cb: scheduler.py _allocate_blocks_if_needed; the others: ceil to whole blocks."""
        nonlocal free
        s = st[i]
        if engine == "hf-cb":
            occupancy = s.logical * bs - s.computed
            if not (occupancy < tokens or s.logical == 0):
                return True
            new_logical = (tokens - occupancy + 1) // bs + 1
        else:
            new_logical = max(0, -(-(s.computed + tokens) // bs) - s.logical)
            if new_logical == 0:
                return True
        need = phys_blocks(new_logical, s.logical)
        if need > free:
            return False
        free -= need
        s.blocks += need
        s.logical += new_logical
        return True

    report_every = max(1, n // 100)
    while done < n:
        if steps >= MAX_STEPS:
            raise ValueError(f"requests: the simulation passed {MAX_STEPS:,} engine steps; shorten the workload")
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if not running and not waiting:
            t = max(t, arrival[nxt])
            continue
        batch: list[tuple[int, int]] = []  # (request, tokens this step)
        if engine == "hf-cb":
            batch = _schedule_hf(st, running, waiting, grow, reset, config, M, max_seqs, margin, lambda: free,
                                 memory, phys_blocks, bs)
        elif engine == "vllm":
            batch = _schedule_vllm(st, running, waiting, grow, reset, config, M, max_seqs)
        elif engine == "sglang":
            batch = _schedule_sglang(st, running, waiting, grow, reset, M, max_seqs, lambda: free, output, memory)
        else:
            batch = _schedule_trtllm(st, running, waiting, grow, config, M, max_seqs, lambda: free, prompt,
                                     output, memory)
        if not batch:
            raise ValueError("num_blocks: the KV pool cannot hold even one waiting request's next step "
                             f"({free:,} of {memory.num_blocks:,} blocks free); give the engine more memory")
        q = rows = decode_kv = masked_kv = 0
        chunks = []
        for i, tokens in batch:
            s = st[i]
            q += tokens
            masked_kv += s.computed
            if s.computed >= s.target:  # a decode row
                decode_kv += s.computed
                rows += 1
            else:
                chunks.append((tokens, s.computed))
                if s.computed + tokens >= s.target:
                    rows += 1
        masked_kv += q
        dt = pricer.step_ms(q, rows, decode_kv, chunks, masked_kv, requests=len(batch)) / 1e3
        t += dt
        busy += dt
        steps += 1
        max_q = max(max_q, q)
        max_k = max(max_k, masked_kv)
        for i, tokens in batch:
            s = st[i]
            if s.computed >= s.target:  # decode: one more token
                s.computed += 1
                s.target += 1
                s.generated += 1
            else:
                s.computed += tokens
                if s.computed >= s.target:  # the prefill (or its recompute) is complete: it yields a token
                    s.generated += 1
                    s.target = s.computed
            if s.generated and s.first < 0:
                s.first = t
            if s.generated >= output[i]:
                s.finish = t
                s.running = False
                release(i)
                running.remove(i)
                done += 1
                if progress is not None and done % report_every == 0:
                    progress(done / n)
        max_run = max(max_run, len(running))
        tl_t.append(t)
        tl_run.append(len(running))
        tl_wait.append(len(waiting))
        tl_blocks.append(memory.num_blocks - free)
    stride = max(1, len(tl_t) // TIMELINE_POINTS)
    timeline = {"time_s": tl_t[::stride], "running": tl_run[::stride], "waiting": tl_wait[::stride],
                "kv_blocks_used": tl_blocks[::stride]}
    return Simulation(arrival_s=tuple(arrival), first_token_s=tuple(s.first for s in st),
                      finish_s=tuple(s.finish for s in st), prompt_tokens=tuple(prompt), output_tokens=tuple(output),
                      preemptions=tuple(s.preempted for s in st), steps=steps, busy_s=busy, timeline=timeline,
                      max_batch_tokens_used=max_q, max_kv_read_tokens=max_k, max_running=max_run)


def _remaining_prefill(s: _State) -> int:
    return s.target - s.computed


def _schedule_hf(st, running, waiting, grow, reset, config, M, max_seqs, margin, free_now, memory, phys, bs):
    """transformers 5.17 scheduler.py FIFOScheduler / PrefillFirstScheduler.schedule_batch + _process_candidates,
    and continuous_api.py prepare_next_batch's eviction loop."""
    for _attempt in range(len(running) + 2):
        decoding = [i for i in running if st[i].computed >= st[i].target]
        splitting = [i for i in running if st[i].computed < st[i].target]
        first, second = (decoding, splitting) if config.scheduler == "fifo" else (splitting, decoding)
        candidates = first + second + list(islice(waiting, max_seqs))
        budget, seqs = M, max_seqs
        batch: list[tuple[int, int]] = []
        failed = False
        starved: list[int] = []
        for i in candidates:
            s = st[i]
            is_decode = s.running and s.computed >= s.target
            if free_now() < margin and batch and not is_decode:
                break
            tokens = 1 if is_decode else _remaining_prefill(s)
            length = min(tokens, budget)
            if not grow(i, length):
                failed = True
                if s.running:
                    starved.append(i)
                elif free_now() == 0:
                    break
                continue
            if not s.running:
                s.running = True
                running.append(i)
                waiting.remove(i)
            batch.append((i, length))
            budget -= length
            seqs -= 1
            if budget == 0 or seqs <= 0:
                break
        if batch or not failed:
            if starved:
                _evict(st, running, waiting, starved, reset, free_now, memory, batch_ids={i for i, _ in batch})
            return batch
        if not _evict(st, running, waiting, starved, reset, free_now, memory, batch_ids=set()):
            return []
    return []


def _evict(st, running, waiting, starved, reset, free_now, memory, batch_ids) -> int:
    """offloading_manager.py offload_requests: newest starved first until the rest's demand fits; never the last
    active request; victims requeued oldest first at the head of the queue."""
    starved = [i for i in starved if i not in batch_ids]
    free = free_now()
    demand = sum(max(1, memory.full_groups + memory.sliding_groups) for _ in starved)
    victims = []
    while demand > free and starved and len(running) - len(victims) > 1:
        i = starved.pop()
        victims.append(i)
        demand -= max(1, memory.full_groups + memory.sliding_groups)
        free += st[i].blocks
    for i in victims:
        reset(i)
        running.remove(i)
    for i in victims:  # newest popped first: appendleft restores oldest-first order at the head
        waiting.appendleft(i)
    return len(victims)


def _schedule_vllm(st, running, waiting, grow, reset, config, M, max_seqs):
    """vllm/v1/core/sched/scheduler.py Scheduler.schedule: running first, preempting the newest when a block
    cannot be had (recompute), then waiting requests if nothing was preempted."""
    budget = M
    batch: list[tuple[int, int]] = []
    preempted = False
    idx = 0
    while idx < len(running) and budget > 0:
        i = running[idx]
        s = st[i]
        tokens = 1 if s.computed >= s.target else min(_remaining_prefill(s), budget)
        while not grow(i, tokens):
            victim = running.pop()
            reset(victim)
            waiting.appendleft(victim)
            preempted = True
            if victim == i:
                break
        else:
            batch.append((i, tokens))
            budget -= tokens
            idx += 1
            continue
        break
    if not preempted:
        while waiting and budget > 0 and len(running) < max_seqs:
            i = waiting[0]
            s = st[i]
            tokens = _remaining_prefill(s)
            if not config.chunked_prefill and tokens > budget:
                break
            tokens = min(tokens, budget)
            if not grow(i, tokens):
                break
            waiting.popleft()
            s.running = True
            running.append(i)
            batch.append((i, tokens))
            budget -= tokens
    return batch


def _schedule_sglang(st, running, waiting, grow, reset, M, max_seqs, free_now, output, memory):
    """SGLang: a prefill (extend) batch when waiting requests can be admitted, else one decode batch of every
    running request; the newest decoding request retracted when a page is missing."""
    splitting = [i for i in running if st[i].computed < st[i].target]
    if waiting or splitting:
        reserve = sum(int((output[i] - st[i].generated) * SGLANG_NEW_TOKEN_RATIO) for i in running)
        budget = M
        batch: list[tuple[int, int]] = []
        for i in splitting:
            tokens = min(_remaining_prefill(st[i]), budget)
            if tokens and grow(i, tokens):
                batch.append((i, tokens))
                budget -= tokens
        while waiting and budget > 0 and len(running) < max_seqs:
            i = waiting[0]
            s = st[i]
            rest = _remaining_prefill(s)
            want = rest + int((output[i] - s.generated) * SGLANG_NEW_TOKEN_RATIO)
            if free_now() * memory.block_size - reserve < want:
                break
            tokens = min(rest, budget)
            if not grow(i, tokens):
                break
            waiting.popleft()
            s.running = True
            running.append(i)
            reserve += int((output[i] - s.generated) * SGLANG_NEW_TOKEN_RATIO)
            batch.append((i, tokens))
            budget -= tokens
        if batch:
            return batch
    batch = []
    for i in list(running):
        s = st[i]
        if s.computed < s.target:
            continue
        while not grow(i, 1):
            victim = max((j for j in running if st[j].computed >= st[j].target), key=lambda j: j, default=None)
            if victim is None or len(running) <= 1:
                return batch
            running.remove(victim)
            reset(victim)
            waiting.appendleft(victim)
            if victim == i:
                break
        else:
            batch.append((i, 1))
    return batch


def _schedule_trtllm(st, running, waiting, grow, config, M, max_seqs, free_now, prompt, output, memory):
    """TensorRT-LLM GUARANTEED_NO_EVICT: running requests continue; a waiting request is admitted only when the
    blocks of its whole prompt + output are free beyond what the running ones will still need."""
    budget = M
    batch: list[tuple[int, int]] = []
    for i in running:
        s = st[i]
        tokens = 1 if s.computed >= s.target else min(_remaining_prefill(s), budget)
        if tokens == 0 or not grow(i, tokens):
            continue
        batch.append((i, tokens))
        budget -= tokens
    committed = sum(memory.blocks_for(prompt[i] + output[i]) - st[i].blocks for i in running)
    while waiting and budget > 0 and len(running) < max_seqs:
        i = waiting[0]
        s = st[i]
        need = memory.blocks_for(prompt[i] + output[i])
        if free_now() - committed < need:
            break
        tokens = _remaining_prefill(s)
        if not config.chunked_prefill and tokens > budget:
            break
        tokens = min(tokens, budget)
        if not grow(i, tokens):
            break
        waiting.popleft()
        s.running = True
        running.append(i)
        committed += need - st[i].blocks
        batch.append((i, tokens))
        budget -= tokens
    return batch
