"""Properties of the step loop on random small workloads and pools, every engine: every request runs to its
length, no step holds more blocks than the pool, times never go backwards, a request recomputed after a
preemption still ends with its own output length, and the pool is empty at the end."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from estimator.model.inputs import PlanInputs
from estimator.model.specs import ModelSpec
from estimator.serve.capacity import ServeInputs, prepare
from estimator.serve.engines import EngineConfig
from estimator.serve.simulate import simulate
from estimator.serve.workload import Request, Workload

TINY = ModelSpec(name="tiny", layers=2, hidden=256, q_heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=1000)
TINY_SLIDING = ModelSpec(name="tiny-sliding", layers=2, hidden=256, q_heads=4, kv_heads=2, head_dim=64, ffn=512,
                         vocab=1000, window_per_layer=(None, 64))
BLOCK = {"hf-cb": 16, "vllm": 16, "sglang": 1, "trtllm": 32}

requests = st.lists(st.tuples(st.floats(0, 0.05), st.integers(1, 300), st.integers(1, 60)), min_size=1, max_size=25)


@pytest.mark.parametrize("engine", ["hf-cb", "vllm", "sglang", "trtllm"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=requests, pool_blocks=st.integers(0, 6), budget=st.sampled_from([32, 128, 4096]),
       sliding=st.booleans(), scheduler=st.sampled_from(["fifo", "prefill_first"]))
def test_the_loop_keeps_its_invariants(engine, rows, pool_blocks, budget, sliding, scheduler):
    t = 0.0
    reqs = []
    for i, (gap, prompt, output) in enumerate(rows):
        t += gap
        reqs.append(Request(request_id=i, arrival_s=t, prompt_tokens=prompt, output_tokens=output))
    wl = Workload(requests=tuple(reqs))
    longest = max(r.total_tokens for r in reqs)
    block = BLOCK[engine]
    # from just enough for the longest request (many preemptions) to ample
    num_blocks = (-(-longest // block) + 2) * 2 * (1 + pool_blocks * 3)
    model = TINY_SLIDING if sliding and engine in ("hf-cb", "vllm") else TINY
    knobs = dict(num_blocks=num_blocks, block_size=block, max_batch_tokens=budget,
                 scheduler=scheduler if engine == "hf-cb" else None,
                 chunked_prefill=True if engine == "trtllm" else None)
    si = ServeInputs(plan=PlanInputs(model=model, seq_len=longest, gpu="h200"),
                     engine=EngineConfig(engine=engine, **knobs), workload=wl)
    config, memory, pricer = prepare(si)
    sim = simulate(wl, memory, pricer, config)
    arrival, first, finish = map(np.array, (sim.arrival_s, sim.first_token_s, sim.finish_s))
    assert (first >= arrival).all() and (finish >= first).all()
    assert max(sim.timeline["kv_blocks_used"]) <= memory.num_blocks
    assert sim.timeline["kv_blocks_used"][-1] == 0
    assert np.all(np.diff(sim.timeline["time_s"]) >= 0)
    assert sim.generated_tokens == tuple(r.output_tokens for r in reqs)
    assert (finish > 0).all()
    if engine == "trtllm":
        assert sum(sim.preemptions) == 0
