"""The engine's step loop, simulated: at each step the engine's scheduler (estimator/serve/schedulers.py, one per
engine, each following its source) picks what runs (admission by token budget and free blocks, chunked prefill,
the decode batch, preemption with recompute when blocks run out), the step's time comes from `StepPricer`
(estimator/serve/step_cost.py), and every request's first-token and finish times fall out. The request state
lives in numpy arrays (estimator/serve/pool.py), so a step of hundreds of decoding requests is a few array
operations.

API (stable): `simulate(workload, memory, pricer, config, progress=None)` -> `Simulation` (per-request times in
seconds, the timeline of KV occupancy and queue length, step count, preemptions).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from estimator.serve.engines import ResolvedConfig
from estimator.serve.memory import EngineMemory
from estimator.serve.pool import Pool
from estimator.serve.schedulers import EMPTY, schedule_hf, schedule_sglang, schedule_trtllm, schedule_vllm
from estimator.serve.step_cost import StepPricer
from estimator.serve.workload import Workload

MAX_STEPS = 20_000_000  # a bound on the loop whatever the input (a browser can start a simulation)
TIMELINE_POINTS = 2000


@dataclass(frozen=True, kw_only=True)
class Simulation:
    """Per request (workload order): arrival, first token and finish times (s), lengths, preemptions; the timeline
    (one point per step, thinned to at most `TIMELINE_POINTS`): time s, running and waiting requests, KV blocks in
    use."""

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
    max_kv_read_window_tokens: int = 0  # the same for the sliding-window layers (0 without them)
    max_running: int = 0
    generated_tokens: tuple[int, ...] = ()  # per request at the end: its output_tokens, preemptions or not


def simulate(workload: Workload, memory: EngineMemory, pricer: StepPricer, config: ResolvedConfig,
             progress=None, time_budget_s: float | None = None) -> Simulation:
    """Run the engine's step loop over the workload (see the module docstring). `progress(fraction)` is called
    now and then with the share of requests finished. `time_budget_s` bounds the wall time (a ValueError naming
    `requests` past it); the step count is bounded by MAX_STEPS and the timeline's memory by thinning it as it
    grows."""
    reqs = workload.requests
    n = len(reqs)
    arrival = [r.arrival_s for r in reqs]
    prompt = np.array([r.prompt_tokens for r in reqs], dtype=np.int64)
    output = np.array([r.output_tokens for r in reqs], dtype=np.int64)
    engine = config.engine.name
    pool = Pool(memory, prompt, output, hf_allocation=engine == "hf-cb")
    need = pool.blocks_for(prompt + output)
    worst = int(np.argmax(need))
    if int(need[worst]) > memory.num_blocks:
        raise ValueError(f"num_blocks: request {worst} ({int(prompt[worst]):,} + {int(output[worst]):,} tokens) "
                         f"needs {int(need[worst]):,} KV blocks; the {engine} pool holds {memory.num_blocks:,}")
    M, max_seqs = memory.max_batch_tokens, memory.max_seqs
    if engine == "trtllm" and not config.chunked_prefill and int(prompt.max()) > M:
        raise ValueError(f"max_batch_tokens: a {int(prompt.max()):,}-token prompt needs chunked prefill "
                         f"(TensorRT-LLM enable_chunked_prefill) or max_num_tokens >= {int(prompt.max()):,}")
    margin = config.safety_margin * memory.num_blocks
    prefill_first = config.scheduler == "prefill_first"
    first = np.full(n, -1.0)
    finish = np.full(n, -1.0)
    t = busy = 0.0
    nxt = done = steps = 0
    tl_t, tl_run, tl_wait, tl_blocks = [], [], [], []
    max_q = max_k = max_kw = max_run = 0
    report_every = max(1, n // 100)
    started = time.monotonic()
    keep_every = 1  # the timeline keeps one step in keep_every (doubled whenever it grows past 4x its size)
    comp, targ, gen = pool.comp, pool.targ, pool.gen
    window = pricer.window if pricer.sliding_layers else 0
    graphs: set = set()  # the cuDNN graphs the engine's process has built (hf-cb: step_cost.StepPricer.graph_keys)
    while done < n:
        if time_budget_s is not None and steps % 256 == 0 and time.monotonic() - started > time_budget_s:
            raise ValueError(f"requests: simulating {n:,} requests took more than {time_budget_s:g} s "
                             f"({done:,} finished); shorten the workload")
        if steps >= MAX_STEPS:
            raise ValueError(f"requests: the simulation passed {MAX_STEPS:,} engine steps; shorten the workload")
        while nxt < n and arrival[nxt] <= t:
            pool.waiting.append(nxt)
            nxt += 1
        if not pool.running and not pool.waiting:
            t = max(t, arrival[nxt])
            continue
        if engine == "hf-cb":
            dec, items = schedule_hf(pool, M, max_seqs, margin, prefill_first)
        elif engine == "vllm":
            dec, items = schedule_vllm(pool, M, max_seqs, config.chunked_prefill)
        elif engine == "sglang":
            dec, items = schedule_sglang(pool, M, max_seqs)
        else:
            dec, items = schedule_trtllm(pool, M, max_seqs, config.chunked_prefill)
        if not len(dec) and not items:
            raise ValueError("num_blocks: the KV pool cannot hold even one waiting request's next step "
                             f"({pool.free:,} of {memory.num_blocks:,} blocks free); give the engine more memory")
        # the step's shape
        if items:
            ids = np.fromiter((i for i, _ in items), dtype=np.int64, count=len(items))
            toks = np.fromiter((k for _, k in items), dtype=np.int64, count=len(items))
            c_items = comp[ids]
            is_dec = c_items >= targ[ids]
            if is_dec.any():
                dec = np.concatenate([dec, ids[is_dec]])
            pre, pre_toks, pre_comp = ids[~is_dec], toks[~is_dec], c_items[~is_dec]
        else:
            pre = pre_toks = pre_comp = EMPTY
        dec_comp = comp[dec] if len(dec) else EMPTY
        decode_kv = int(dec_comp.sum())
        completes = (pre_comp + pre_toks) >= targ[pre]
        q = len(dec) + int(pre_toks.sum())
        rows = len(dec) + int(completes.sum())
        chunks = list(zip(pre_toks.tolist(), pre_comp.tolist(), strict=True))
        masked_kv = decode_kv + int(pre_comp.sum()) + q
        win_dec = win_masked = None
        if window:  # sliding layers read at most window - 1 cached tokens a request
            win_dec = int(np.minimum(dec_comp, window - 1).sum())
            win_masked = win_dec + int(np.minimum(pre_comp, window - 1).sum()) + q
        new_graphs = 0
        if pricer.graph_builds:
            keys = pricer.graph_keys(q, masked_kv, win_masked)
            new_graphs = sum(1 for k in keys if k not in graphs)
            graphs.update(keys)
        dt = pricer.step_ms(q, rows, decode_kv, chunks, masked_kv, win_dec, win_masked,
                            requests=len(dec) + len(pre), new_graphs=new_graphs) / 1e3
        t += dt
        busy += dt
        steps += 1
        max_q = max(max_q, q)
        max_k = max(max_k, masked_kv)
        if win_masked is not None:
            max_kw = max(max_kw, win_masked)
        # the step's outcome: decoders one more token; prefill chunks cached, a completed one yields a token
        if len(dec):
            comp[dec] += 1
            targ[dec] += 1
            gen[dec] += 1
        if len(pre):
            comp[pre] += pre_toks
            done_pre = pre[completes]
            if len(done_pre):
                gen[done_pre] += 1
                targ[done_pre] = comp[done_pre]
                first[done_pre] = np.where(first[done_pre] < 0, t, first[done_pre])
        touched = np.concatenate([dec, pre]) if len(pre) else dec
        finished = touched[gen[touched] >= output[touched]] if len(touched) else EMPTY
        if len(finished):
            pool.block_new = False  # continuous_api.py update_batch: a finished request unblocks new ones
            finish[finished] = t
            pool.release(finished)
            pool.drop(finished.tolist())
            before = done
            done += len(finished)
            if progress is not None and done // report_every != before // report_every:
                progress(done / n)
        max_run = max(max_run, len(pool.running))
        if steps % keep_every == 0 or done == n:
            tl_t.append(t)
            tl_run.append(len(pool.running))
            tl_wait.append(len(pool.waiting))
            tl_blocks.append(memory.num_blocks - pool.free)
            if len(tl_t) > 4 * TIMELINE_POINTS:
                tl_t, tl_run, tl_wait, tl_blocks = tl_t[::2], tl_run[::2], tl_wait[::2], tl_blocks[::2]
                keep_every *= 2
    stride = max(1, -(-len(tl_t) // TIMELINE_POINTS))
    keep = list(range(0, len(tl_t), stride))
    if keep[-1] != len(tl_t) - 1:
        keep.append(len(tl_t) - 1)  # the last step (the pool empty again) is always shown
    timeline = {"time_s": [tl_t[k] for k in keep], "running": [tl_run[k] for k in keep],
                "waiting": [tl_wait[k] for k in keep], "kv_blocks_used": [tl_blocks[k] for k in keep],
                "num_blocks": memory.num_blocks}
    return Simulation(
        arrival_s=tuple(arrival), first_token_s=tuple(first.tolist()), finish_s=tuple(finish.tolist()),
        prompt_tokens=tuple(prompt.tolist()), output_tokens=tuple(output.tolist()),
        preemptions=tuple(pool.preempted.tolist()), steps=steps, busy_s=busy, timeline=timeline,
        max_batch_tokens_used=max_q, max_kv_read_tokens=max_k, max_kv_read_window_tokens=max_kw,
        max_running=max_run, generated_tokens=tuple(gen.tolist()))
