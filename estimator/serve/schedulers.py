"""One scheduling decision per engine: which requests run in the next step and how many tokens each. Each returns
(decoders, items): `decoders` an array of decoding requests that get one token each (the common case, done in one
numpy pass), `items` a list of (request, tokens) for everything else (prefill chunks, and decoders when the fast
pass could not take them all). The rules, with their source files:

- hf-cb (transformers 5.17 generation/continuous_batching/scheduler.py): FIFOScheduler puts decoding requests
  first, then split prefills, then waiting requests; PrefillFirstScheduler split prefills first. `_process_candidates`:
  within max_batch_tokens and max_requests_per_batch; once free blocks < safety_margin x num_blocks only decoding
  requests (or the batch's first request) are taken; a failed allocation skips the request (and stops the loop at a
  waiting request when no block is free). When nothing could be scheduled, or running requests starved,
  continuous_api.py prepare_next_batch evicts through offloading_manager.py offload_requests: newest starved
  first, never the last active one, requeued at the back oldest first (cpu_offload_space 0: their cache is
  dropped), and no waiting request is taken again until a request finishes (block_new_requests).
- vLLM (vllm/v1/core/sched/scheduler.py Scheduler.schedule): running requests in order, each its decode token or
  its next prefill chunk within max_num_batched_tokens; when a block cannot be allocated the newest running request
  is preempted (recompute) until it can; then waiting requests in order while nothing was preempted, within
  max_num_seqs and the token budget (a prompt split into chunks when chunked prefill is on).
- SGLang (python/sglang/srt/managers/scheduler.py get_next_batch_to_run, schedule_policy.py PrefillAdder): a
  prefill batch whenever waiting requests can be admitted (chunked at chunked_prefill_size), admission keeping
  new_token_ratio x min(remaining output, 4096) tokens of every admitted request in reserve; otherwise one decode
  batch of every running request. The ratio starts at 0.7, decays by (0.7 - 0.098) / 600 a decode batch down to
  0.098, and after a retraction is re-estimated as (decoded tokens + 20 x requests) / their output tokens; a decode
  that cannot get a page retracts the newest request (recompute).
- TensorRT-LLM GUARANTEED_NO_EVICT (cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp): running requests go
  on; a waiting request is admitted only when the blocks of its whole prompt + output are free beyond what the
  running requests will still need, so nothing is ever evicted.

Simplification shared by vLLM, SGLang and TensorRT-LLM here: decoders are served before running prefills in the
same step (the engines walk the running list in admission order, where decoders are the older ones).
"""

from __future__ import annotations

from itertools import islice

import numpy as np

from estimator.serve.pool import Pool

# sglang python/sglang/srt/environ.py: SGLANG_INIT_NEW_TOKEN_RATIO 0.7, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14,
# SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600, SGLANG_RETRACT_DECODE_STEPS 20, SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION 4096
SGLANG_NEW_TOKEN_RATIO = 0.7
SGLANG_MIN_NEW_TOKEN_RATIO = 0.7 * 0.14
SGLANG_NEW_TOKEN_RATIO_DECAY = (SGLANG_NEW_TOKEN_RATIO - SGLANG_MIN_NEW_TOKEN_RATIO) / 600
SGLANG_RETRACT_DECODE_STEPS = 20
SGLANG_CLIP_MAX_NEW_TOKENS = 4096
EMPTY = np.zeros(0, dtype=np.int64)


def _split(pool: Pool) -> tuple[np.ndarray, np.ndarray]:
    ra = pool.running_array()
    if not len(ra):
        return EMPTY, EMPTY
    mask = pool.comp[ra] >= pool.targ[ra]
    return ra[mask], ra[~mask]


# ------------------------------------------------------------------------------------------------------- hf-cb

def schedule_hf(pool: Pool, max_tokens: int, max_seqs: int, margin_blocks: float, prefill_first: bool):
    for _attempt in range(len(pool.running) + 2):
        dec, split = _split(pool)
        budget, seqs = max_tokens, max_seqs
        fast = EMPTY
        # scheduler.py: waiting requests are candidates unless an eviction blocked new requests (cleared by
        # continuous_api.py update_batch when a request finishes)
        waiting = [] if pool.block_new else list(islice(pool.waiting, max_seqs))
        if not prefill_first and len(dec) <= min(budget, seqs) and pool.grow_decoders(dec):
            fast, budget, seqs = dec, budget - len(dec), seqs - len(dec)
            candidates = list(split) + waiting
        elif not prefill_first:
            candidates = list(dec) + list(split) + waiting
        else:
            candidates = list(split) + list(dec) + waiting
        items, failed, starved = _hf_candidates(pool, candidates, budget, seqs, margin_blocks, len(fast) > 0)
        if len(fast) or items or not failed:
            if starved:
                _hf_evict(pool, starved, exclude={i for i, _ in items} | set(int(i) for i in fast))
            return fast, items
        if not _hf_evict(pool, starved, exclude=set()):
            return EMPTY, []
    return EMPTY, []


def _hf_candidates(pool: Pool, candidates, budget: int, seqs: int, margin_blocks: float, started: bool):
    items: list[tuple[int, int]] = []
    failed = False
    starved: list[tuple[int, int]] = []  # (request, physical blocks it asked for)
    running = pool.running
    for i in candidates:
        i = int(i)
        active = i in running
        is_decode = active and pool.decoding(i)
        if pool.free < margin_blocks and (items or started) and not is_decode:
            break
        length = 1 if is_decode else min(pool.remaining(i), budget)
        if not pool.grow(i, length):
            failed = True
            if active:
                starved.append((i, pool.last_need))
            elif pool.free == 0:
                break
            continue
        if not active:
            pool.waiting.remove(i)
            pool.admit(i)
        items.append((i, length))
        budget -= length
        seqs -= 1
        if budget == 0 or seqs <= 0:
            break
    return items, failed, starved


def _hf_evict(pool: Pool, starved: list[tuple[int, int]], exclude: set) -> int:
    """offloading_manager.py offload_requests: victims taken from the starved requests, newest first, until the
    remaining starved requests' demand fits in the free blocks (never the last active request); each victim's cache
    is dropped (cpu_offload_space 0: create_equivalent_initial_request, prompt + generated tokens to recompute) and
    it is requeued at the back of the queue, oldest first (scheduler.py add_waiting_request); new requests are then
    blocked until a request finishes."""
    starved = [(i, need) for i, need in starved if i not in exclude]
    free = pool.free
    demand = sum(need for _, need in starved)
    victims = []
    while demand > free and starved and len(pool.running) - len(victims) > 1:
        i, need = starved.pop()
        victims.append(i)
        demand -= need
        free += int(pool.blocks[i])
    if not victims:
        return 0
    victims.reverse()
    for i in victims:
        pool.reset(i)
    pool.drop(victims)
    pool.waiting.extend(victims)
    pool.block_new = True
    return len(victims)


# -------------------------------------------------------------------------------------------------------- vLLM

def schedule_vllm(pool: Pool, max_tokens: int, max_seqs: int, chunked: bool):
    dec, split = _split(pool)
    budget = max_tokens
    items: list[tuple[int, int]] = []
    preempted = False
    fast = EMPTY
    if len(dec) <= budget and pool.grow_decoders(dec):
        fast, budget = dec, budget - len(dec)
        for i in split:
            i = int(i)
            if budget <= 0:
                break
            tokens = min(pool.remaining(i), budget)
            if pool.grow(i, tokens):
                items.append((i, tokens))
                budget -= tokens
    else:  # the engine's own walk: in order, preempting the newest when a block is missing
        order = list(pool.running)
        idx = 0
        while idx < len(order) and budget > 0:
            i = order[idx]
            if i not in pool.running:  # preempted by an earlier request of this walk
                break
            tokens = 1 if pool.decoding(i) else min(pool.remaining(i), budget)
            scheduled = True
            while not pool.grow(i, tokens):
                victim = pool.newest()
                pool.preempt(victim)
                preempted = True
                if victim == i:
                    scheduled = False
                    break
            if not scheduled:
                break
            items.append((i, tokens))
            budget -= tokens
            idx += 1
    if not preempted:
        while pool.waiting and budget > 0 and len(pool.running) < max_seqs:
            i = pool.waiting[0]
            tokens = _admit_head(pool, budget, chunked)
            if tokens is None:
                break
            items.append((i, tokens))
            budget -= tokens
    return fast, items


# ------------------------------------------------------------------------------------------------------ SGLang

def _sglang_future(pool: Pool, ids) -> int:
    """Tokens PrefillAdder keeps in reserve for requests: min(remaining output, CLIP) x new_token_ratio."""
    remaining = np.minimum(pool.out[ids] - pool.gen[ids], SGLANG_CLIP_MAX_NEW_TOKENS)
    return int((remaining * pool.new_token_ratio).sum())


def schedule_sglang(pool: Pool, max_tokens: int, max_seqs: int):
    dec, split = _split(pool)
    if pool.waiting or len(split):
        ra = pool.running_array()
        reserve = _sglang_future(pool, ra) if len(ra) else 0
        budget = max_tokens
        items: list[tuple[int, int]] = []
        for i in split:
            i = int(i)
            tokens = min(pool.remaining(i), budget)
            if tokens > 0 and pool.grow(i, tokens):
                items.append((i, tokens))
                budget -= tokens
        while pool.waiting and budget > 0 and len(pool.running) < max_seqs:
            i = pool.waiting[0]
            rest = pool.remaining(i)
            future = _sglang_future(pool, np.array([i]))
            if pool.free * pool.bs - reserve < rest + future:
                break
            tokens = min(rest, budget)
            if not pool.grow(i, tokens):
                break
            pool.waiting.popleft()
            pool.admit(i)
            reserve += future
            items.append((i, tokens))
            budget -= tokens
        if items:
            return EMPTY, items
    if pool.grow_decoders(dec):
        # scheduler.py update_running_batch: the ratio decays towards its minimum with every decode batch
        pool.new_token_ratio = max(pool.new_token_ratio - SGLANG_NEW_TOKEN_RATIO_DECAY, SGLANG_MIN_NEW_TOKEN_RATIO)
        return dec, []
    items = []
    retracted = False
    for i in list(dec):  # retract the newest decoding requests until the rest get their page
        i = int(i)
        if i not in pool.running:
            continue
        ok = True
        while not pool.grow(i, 1):
            if len(pool.running) <= 1:
                return EMPTY, items
            victim = max(j for j in pool.running if pool.decoding(j))
            pool.preempt(victim)
            retracted = True
            if victim == i:
                ok = False
                break
        if ok:
            items.append((i, 1))
    if retracted:  # schedule_batch.py retract_decode: the ratio re-estimated from the requests that stay
        ra = pool.running_array()
        decoded = int(pool.gen[ra].sum()) if len(ra) else 0
        wanted = int(pool.out[ra].sum()) if len(ra) else 0
        pool.new_token_ratio = min(1.0, (decoded + SGLANG_RETRACT_DECODE_STEPS * len(ra)) / (wanted + 1))
    return EMPTY, items


# ------------------------------------------------------------------------------------------------ TensorRT-LLM

def schedule_trtllm(pool: Pool, max_tokens: int, max_seqs: int, chunked: bool):
    dec, split = _split(pool)
    budget = max_tokens
    items: list[tuple[int, int]] = []
    fast = EMPTY
    if pool.grow_decoders(dec):  # never fails: admission reserved every block
        fast, budget = dec, budget - len(dec)
    else:
        for i in dec:
            if pool.grow(int(i), 1):
                items.append((int(i), 1))
                budget -= 1
    for i in split:
        i = int(i)
        tokens = min(pool.remaining(i), budget)
        if tokens > 0 and pool.grow(i, tokens):
            items.append((i, tokens))
            budget -= tokens
    ra = pool.running_array()
    committed = int((pool.blocks_for(pool.prompt[ra] + pool.out[ra]) - pool.blocks[ra]).sum()) if len(ra) else 0
    while pool.waiting and budget > 0 and len(pool.running) < max_seqs:
        i = pool.waiting[0]
        need = int(pool.blocks_for(int(pool.prompt[i] + pool.out[i])))
        if pool.free - committed < need:
            break
        tokens = _admit_head(pool, budget, chunked)
        if tokens is None:
            break
        committed += need - int(pool.blocks[i])
        items.append((i, tokens))
        budget -= tokens
    return fast, items


def _admit_head(pool, budget: int, chunked: bool) -> int | None:
    """Admit the waiting queue's head with the prompt tokens it gets this step (its whole remainder, or a chunk of
    the budget when prefill is chunked); None, and nothing changed, when it does not fit the budget or the pool."""
    i = pool.waiting[0]
    tokens = pool.remaining(i)
    if not chunked and tokens > budget:
        return None
    tokens = min(tokens, budget)
    if not pool.grow(i, tokens):
        return None
    pool.waiting.popleft()
    pool.admit(i)
    return tokens
