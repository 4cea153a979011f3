"""The simulated step loop: every request runs to its length, latencies are consistent, one request alone takes
exactly the priced prefill and decode steps, preemption and recompute when the pool is small, and properties
(more rate -> no lower latency; fewer blocks -> no fewer preemptions)."""

from __future__ import annotations

import pytest

from estimator.model.inputs import PlanInputs
from estimator.model.presets import get_preset
from estimator.serve import hf_host
from estimator.serve.capacity import ServeInputs, prepare, serve
from estimator.serve.engines import EngineConfig
from estimator.serve.result import Targets
from estimator.serve.workload import Request, Workload, synthetic_workload

ENGINES = ("hf-cb", "vllm", "sglang", "trtllm")


def inputs(engine="vllm", model="llama-3-8b", gpu="h200", tp=1, workload=None, **knobs):
    wl = workload or synthetic_workload(rate_per_s=8, requests=120, prompt_tokens="uniform:64:1500",
                                        output_tokens="uniform:2:96", seed=3)
    return ServeInputs(plan=PlanInputs(model=get_preset(model), seq_len=2048, gpu=gpu, tp=tp, gpus=tp),
                       engine=EngineConfig(engine=engine, **knobs), workload=wl)


@pytest.mark.parametrize("engine", ENGINES)
def test_every_request_finishes_with_consistent_times(engine):
    r = serve(inputs(engine))
    sim = r.simulation
    for a, f, z in zip(sim.arrival_s, sim.first_token_s, sim.finish_s, strict=True):
        assert a <= f <= z
    assert sim.timeline["kv_blocks_used"][-1] == 0  # the last step's finisher freed the pool
    assert r.ttft_ms["p50"] <= r.ttft_ms["p90"] <= r.ttft_ms["p99"]
    assert r.throughput_tokens_per_s > r.throughput_output_tokens_per_s > 0
    d = r.to_dict()
    for key in ("kv_cache_bytes", "kv_cache_tokens", "num_blocks", "block_size", "max_batch_tokens", "peak_bytes",
                "throughput_output_tokens_per_s", "throughput_tokens_per_s", "ttft_ms", "tpot_ms", "e2e_ms"):
        assert key in d
    assert d["peak_bytes"] <= d["capacity_bytes"]


@pytest.mark.parametrize("engine", ENGINES)
def test_one_request_alone_takes_the_priced_steps(engine):
    wl = Workload(requests=(Request(request_id=0, arrival_s=0.0, prompt_tokens=700, output_tokens=5),))
    si = inputs(engine, workload=wl)
    config, memory, pricer = prepare(si)
    r = serve(si)
    # every step of a lone request is a shape its engine has not run: hf-cb builds its cuDNN graphs each step
    prefill = pricer.step_ms(700, 1, 0, [(700, 0)], 700, requests=1,
                             new_graphs=len(pricer.graph_keys(700, 700))) if memory.max_batch_tokens >= 700 else None
    assert prefill is not None
    decode = [pricer.step_ms(1, 1, 700 + k, [], 700 + k + 1, requests=1,
                             new_graphs=len(pricer.graph_keys(1, 700 + k + 1))) for k in range(4)]
    assert pricer.graph_builds == (engine == "hf-cb")
    assert r.ttft_ms["p50"] == pytest.approx(prefill, abs=1e-3)
    assert r.e2e_ms["p50"] == pytest.approx(prefill + sum(decode), abs=1e-3)
    assert r.tpot_ms["p50"] == pytest.approx(sum(decode) / 4, abs=1e-3)


def test_hf_cb_pays_a_cudnn_graph_build_only_for_shapes_its_process_has_not_run():
    # two waves of identical requests: the second wave's steps repeat the first's (Q, K) exactly, so they build no
    # graph and run faster than the first wave's
    wl = synthetic_workload(rate_per_s="inf", requests=8, prompt_tokens=256, output_tokens=6, seed=0)
    r = serve(inputs("hf-cb", workload=wl, num_blocks=8, block_size=256, max_seqs=4))
    sim = r.simulation
    first_wave = sorted(sim.finish_s)[:4]
    second_wave = sorted(sim.finish_s)[4:]
    assert len(set(first_wave)) == 1 and len(set(second_wave)) == 1
    first_t = first_wave[0]
    second_t = second_wave[0] - first_t
    config, memory, pricer = prepare(inputs("hf-cb", workload=wl, num_blocks=8, block_size=256, max_seqs=4))
    assert pricer.graph_builds
    build_s = hf_host.HF_CB_GRAPH_BUILD_MS / 1e3
    assert first_t - second_t == pytest.approx(sim.steps / 2 * build_s, rel=1e-6)


def test_a_long_prompt_is_chunked_by_the_token_budget():
    wl = Workload(requests=(Request(request_id=0, arrival_s=0.0, prompt_tokens=5000, output_tokens=2),))
    r = serve(inputs("vllm", workload=wl, max_batch_tokens=2048))
    assert r.simulation.steps == 3 + 1  # 2048 + 2048 + 904 prompt tokens, then one decode step
    assert r.simulation.max_batch_tokens_used == 2048


@pytest.mark.parametrize("engine", ["hf-cb", "vllm", "sglang"])
def test_a_small_pool_preempts_and_recomputes(engine):
    wl = synthetic_workload(rate_per_s="inf", requests=40, prompt_tokens=300, output_tokens=200, seed=1)
    block = {"hf-cb": 32, "vllm": 16, "sglang": 1}[engine]
    blocks = 2200 // block  # holds ~4 requests' final length, admits more than that by their prompts
    small = serve(inputs(engine, workload=wl, num_blocks=blocks, block_size=block))
    big = serve(inputs(engine, workload=wl, num_blocks=blocks * 8, block_size=block))
    assert sum(small.simulation.preemptions) > 0
    if engine != "sglang":  # SGLang admits optimistically (0.7 of the remaining output reserved): a bigger pool
        # admits more requests at once, and can retract more of them
        assert sum(big.simulation.preemptions) <= sum(small.simulation.preemptions)
    assert all(z > 0 for z in small.simulation.finish_s)
    assert max(small.simulation.timeline["kv_blocks_used"]) <= blocks


def test_trtllm_never_evicts():
    wl = synthetic_workload(rate_per_s="inf", requests=40, prompt_tokens=300, output_tokens=200, seed=1)
    r = serve(inputs("trtllm", workload=wl, num_blocks=2200 // 32))
    assert sum(r.simulation.preemptions) == 0
    assert r.simulation.max_running <= 2200 // 500 + 1


@pytest.mark.parametrize("engine", ENGINES)
def test_more_rate_never_lowers_latency(engine):
    base = inputs(engine)
    previous = None
    for factor in (0.25, 1.0, 4.0):
        r = serve(ServeInputs(plan=base.plan, engine=base.engine, workload=base.workload.scaled(factor)))
        now = (r.ttft_ms["p99"], r.e2e_ms["p99"])
        if previous is not None:
            assert now[0] >= previous[0] * 0.999 and now[1] >= previous[1] * 0.999
        previous = now


def test_sliding_window_layers_hold_fewer_blocks():
    wl = synthetic_workload(rate_per_s="inf", requests=8, prompt_tokens=12000, output_tokens=4, seed=2)
    gemma = serve(inputs("vllm", model="gemma-2-9b", workload=wl))
    used = max(gemma.simulation.timeline["kv_blocks_used"])
    mem = gemma.memory
    full_only = 8 * (mem.full_groups + mem.sliding_groups) * -(-12004 // mem.block_size)
    assert used < full_only


def test_prefill_first_trades_tpot_for_ttft():
    """A long prompt split over steps while 20 requests decode, token budget 64: FIFO serves the 20 decoders first
    and gives the split prefill the 44 tokens left; prefill_first gives the split prefill the whole budget and the
    decoders wait (transformers 5.17 scheduler.py). So the long prompt's TTFT is lower under prefill_first and the
    decoders' P99 TPOT higher."""
    short = [Request(request_id=i, arrival_s=0.0, prompt_tokens=100, output_tokens=200) for i in range(20)]
    long = Request(request_id=20, arrival_s=0.5, prompt_tokens=3000, output_tokens=2)
    wl = Workload(requests=(*short, long))
    a = serve(inputs("hf-cb", workload=wl, scheduler="fifo", max_batch_tokens=64))
    b = serve(inputs("hf-cb", workload=wl, scheduler="prefill_first", max_batch_tokens=64))
    ttft = lambda r: r.simulation.first_token_s[20] - r.simulation.arrival_s[20]  # noqa: E731
    assert ttft(b) < ttft(a)
    assert b.tpot_ms["p99"] > a.tpot_ms["p99"]


def test_targets_below_the_floor_are_missed_honestly():
    si = inputs("vllm")
    r = serve(ServeInputs(plan=si.plan, engine=si.engine, workload=si.workload,
                          targets=Targets(ttft_p99_ms=0.001)))
    assert r.meets_targets is False
    from estimator.serve.sizing import max_rate

    found = max_rate(ServeInputs(plan=si.plan, engine=si.engine, workload=si.workload,
                                 targets=Targets(ttft_p99_ms=0.001)))
    assert found["rate_per_s"] is None and "misses the targets" in found["reason"]


def test_a_request_longer_than_the_pool_is_one_line():
    wl = Workload(requests=(Request(request_id=0, arrival_s=0.0, prompt_tokens=50_000, output_tokens=10),))
    with pytest.raises(ValueError, match="^num_blocks: request 0 "):
        serve(inputs("vllm", workload=wl, num_blocks=100))


@pytest.mark.parametrize("engine", ["hf-cb", "vllm"])
def test_sliding_layers_read_only_their_window(engine):
    """Gemma-2 (every other layer a 4096 window): a decode step over a 20,000-token cache costs less when the
    sliding layers read their window only, and a full-attention model's step does not change."""
    wl = Workload(requests=(Request(request_id=0, arrival_s=0.0, prompt_tokens=20_000, output_tokens=2),))
    _, _, pricer = prepare(inputs(engine, model="gemma-2-9b", workload=wl))
    whole = pricer.step_ms(1, 1, 20_000, [], 20_001)
    windowed = pricer.step_ms(1, 1, 20_000, [], 20_001, decode_window_kv_tokens=4095, masked_window_kv_tokens=4096)
    assert windowed < whole
    _, _, llama = prepare(inputs(engine, workload=wl))
    assert llama.sliding_layers == 0
    assert llama.step_ms(1, 1, 20_000, [], 20_001, 4095, 4096) == llama.step_ms(1, 1, 20_000, [], 20_001)
