"""One serving question and its answer: `ServeInputs` (model and GPU as a `PlanInputs`, the engine knobs, the
workload, the targets) -> `serve()` -> `ServeResult` (estimator/serve/result.py).

API (stable):
- `ServeInputs(plan=, engine=, workload=, targets=, price_per_gpu_hour=)`.
- `serve(inputs, progress=None, time_budget_s=None)` -> ServeResult for one replica (tp GPUs) taking the whole
  workload.
- `prepare(inputs)` -> (ResolvedConfig, EngineMemory, StepPricer): the engine as it starts, for the sizing and the
  app (no simulation).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from estimator.hardware import get_gpu
from estimator.model.inputs import PlanInputs
from estimator.serve.engines import EngineConfig, ResolvedConfig, resolve_config
from estimator.serve.memory import EngineMemory, engine_memory, forward_activation_bytes
from estimator.serve.result import ServeResult, Targets, percentiles, request_latencies
from estimator.serve.simulate import simulate
from estimator.serve.step_cost import StepPricer
from estimator.serve.workload import Workload

ASSUMPTIONS = (
    "every request produces exactly its output_tokens (no early EOS); the first comes out of the prefill step",
    "no prefix-cache hits, no speculative decoding, no disaggregated prefill (docs/serving.md)",
    "one replica takes the whole workload; sizing splits the rate evenly over replicas",
    "step time from the project's kernel time model (H200-measured constants scaled to the GPU); engine host "
    "overhead beyond kernel dispatch (scheduling, sampling, detokenisation) is not modelled",
)


@dataclass(frozen=True, kw_only=True)
class ServeInputs:
    """A serving question. `plan` carries model, dtype, attention backend, GPU and tp (its seq_len is set to the
    engine's max_model_len here). `price_per_gpu_hour` is the user's, never invented."""

    plan: PlanInputs
    engine: EngineConfig
    workload: Workload
    targets: Targets = Targets()
    price_per_gpu_hour: float | None = None

    def __post_init__(self) -> None:
        for name, kind in (("plan", PlanInputs), ("engine", EngineConfig), ("workload", Workload),
                           ("targets", Targets)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name}: expected a {kind.__name__}")
        if self.plan.model.kind != "decoder":
            raise ValueError("preset: serving needs a decoder model (an encoder has no KV cache)")
        if self.plan.cp != 1:
            raise ValueError("cp: serving engines here run tensor parallel only (give --cp 1)")
        if self.price_per_gpu_hour is not None:
            try:
                price = float(self.price_per_gpu_hour)
            except (TypeError, ValueError):
                raise ValueError(f"price_per_gpu_hour: expected a price, got {self.price_per_gpu_hour!r}") from None
            if not 0 < price < 1e6:
                raise ValueError(f"price_per_gpu_hour: expected a positive price, got {self.price_per_gpu_hour!r}")
            object.__setattr__(self, "price_per_gpu_hour", price)


def prepare(inputs: ServeInputs) -> tuple[ResolvedConfig, EngineMemory, StepPricer]:
    wl = inputs.workload
    gpu = get_gpu(inputs.plan.gpu)
    config = resolve_config(inputs.engine, wl.max_sequence_tokens, num_requests=len(wl),
                            hint_tokens=max(r.prompt_tokens for r in wl.requests)
                            + max(r.output_tokens for r in wl.requests),
                            gpu_memory_bytes=gpu.memory_bytes, gpu_name=gpu.name, tp=inputs.plan.tp)
    plan = replace(inputs.plan, seq_len=config.max_model_len, batch=1, mode="inference", gpus=inputs.plan.tp)
    memory = engine_memory(plan, config)
    pricer = StepPricer(plan, memory, cuda_graphs=config.cuda_graphs)
    return config, memory, pricer


def serve(inputs: ServeInputs, progress=None, time_budget_s: float | None = None) -> ServeResult:
    """Simulate one replica serving the workload (see the module docstring). `time_budget_s` bounds the
    simulation's wall time (estimator/serve/simulate.py)."""
    config, memory, pricer = prepare(inputs)
    sim = simulate(inputs.workload, memory, pricer, config, progress=progress, time_budget_s=time_budget_s)
    ttft, tpot, e2e = request_latencies(sim)
    span_s = max(sim.finish_s) - min(sim.arrival_s)
    out_tokens = sum(sim.output_tokens)
    all_tokens = out_tokens + sum(sim.prompt_tokens)
    t_ttft, t_tpot = percentiles(ttft), percentiles(tpot)
    # the packed call's largest K: over the full-attention layers, or the sliding ones where every layer slides
    max_k = sim.max_kv_read_tokens if pricer.full_layers else sim.max_kv_read_window_tokens
    peak = _peak_bytes(pricer.inputs, memory, sim.max_batch_tokens_used, max_k, sim.max_running)
    settings = {"memory_fraction": config.memory_fraction, "fraction_knob": config.engine.fraction_knob,
                "block_size": config.block_size, "max_batch_tokens": memory.max_batch_tokens,
                "num_blocks": memory.num_blocks, "max_seqs": memory.max_seqs, "max_model_len": config.max_model_len,
                "kv_dtype": config.kv_dtype or inputs.plan.dtype, "cuda_graphs": config.cuda_graphs,
                "scheduler": config.scheduler, "chunked_prefill": config.chunked_prefill,
                "attention": pricer.attn_backend if not pricer.masked else f"paged|{inputs.plan.backend} (masked)",
                "source": config.engine.source}
    wl = inputs.workload
    return ServeResult(
        engine=config.engine.name, gpu=inputs.plan.gpu, tp=inputs.plan.tp, memory=memory, simulation=sim,
        ttft_ms=t_ttft, tpot_ms=t_tpot, e2e_ms=percentiles(e2e),
        throughput_output_tokens_per_s=out_tokens / span_s if span_s > 0 else 0.0,
        throughput_tokens_per_s=all_tokens / span_s if span_s > 0 else 0.0, peak_bytes=peak,
        targets=inputs.targets, meets_targets=inputs.targets.met(t_ttft, t_tpot) if inputs.targets.given else None,
        settings=settings,
        workload={"source": wl.source, "requests": len(wl), "prompt_tokens": wl.total_prompt_tokens,
                  "output_tokens": wl.total_output_tokens, "duration_s": wl.duration_s,
                  "rate_per_s": (len(wl) - 1) / wl.duration_s if wl.duration_s > 0 else None},
        assumptions=ASSUMPTIONS)


def _peak_bytes(plan: PlanInputs, memory: EngineMemory, max_q: int, max_k: int, max_running: int) -> int:
    """Peak per GPU over the run: what the engine allocated at start (weights, pool, static tensors, mask,
    workspace, CUDA context) + the largest step's transient, the larger of its forward activations (the project's,
    at the step's token count: the FFN or logits phase) and, for hf-cb's masked path, one layer's attention phase
    at the largest K (transformers 5.17 integrations/sdpa_paged.py): the layer input and the normed input, q, the
    k and v gathered from the cache, their repeat to every query head and the masked call's own peak (the
    attention estimator's), or, where sliding layers exist, their cache update's masked_scatter_ (the mask and
    its int64 prefix sum over the gathered k). The largest q and the largest K may come from different steps: an
    upper-side figure."""
    from estimator.call.attention import estimate_call
    from estimator.call.config import AttentionCall, element_bytes
    from estimator.hardware import get_gpu

    fixed = sum(b for name, b in memory.components if not name.startswith("forward activations"))
    backend = plan.backend if memory.engine == "hf-cb" else "flash-attn"
    transient = forward_activation_bytes(plan, max(1, max_q), backend, max(1, min(max_running, max_q)))
    if memory.engine == "hf-cb" and plan.backend != "flash-attn" and max_k > 0:
        hq, hk, d = plan.q_heads_per_gpu, plan.kv_heads_per_gpu, plan.model.head_dim
        es = element_bytes(plan.dtype)
        gathered = max_k * memory.kv_read_bytes_per_token
        phase = 2 * max_q * plan.model.hidden * es + max_q * hq * d * es + gathered
        phase += gathered * hq // hk if hq > hk else 0
        call = AttentionCall(batch=1, q_heads=hq, kv_heads=hq, head_dim=d, q_len=max(1, max_q), kv_len=max_k,
                             dtype=plan.dtype, mask="bool", mode="forward", backend=plan.backend)
        try:
            est = estimate_call(call, get_gpu(plan.gpu), plan.torch_version)
            phase += est.peak_extra_bytes or 0
        except ValueError:
            pass
        transient = max(transient, phase)
        if memory.sliding_groups:
            # a sliding layer's cache update (cache.py PagedAttentionCache.update): with the gathered k and v
            # resident, each masked_scatter_ allocates the contiguous broadcast mask (1 byte) and its int64 prefix
            # sum (8 bytes) per element of k (or v) (aten/src/ATen/native/cuda/IndexKernel.cu, torch 2.11)
            scatter = 2 * max_q * plan.model.hidden * es + gathered + gathered // 2 // es * (1 + 8)
            transient = max(transient, scatter)
    return fixed + transient
