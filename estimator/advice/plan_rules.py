"""The advisor: walks the decision tree (`estimator/advice/tree.py`) for one plan and explains each step with
numbers from our own estimator.

Every `expected_effect` is computed by re-running the estimator with the change applied
(`dataclasses.replace` on `PlanInputs`, then `make_plan`; or on the layer's `AttentionCall`, then
`estimate_call`), never by a rule of thumb. Each `Advice` keeps the exact figures: `bytes_before/after`
(what `bytes_metric` names) and `time_ms_before/after` (what `time_metric` names). Text shows GiB = 2**30.

Sources: common long-context attention practice (profile first, the 40% rule, checkpointing +20–30%, P99
decode as the serving SLA), SDPA backend choice and the eager attention's masked_fill_, each checked against
PyTorch 2.11 (docs/sdpa-internals.md); where the usual advice is out of date the advice says so.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from estimator.advice.core import (
    ATTENTION_BOTTLENECK_SHARE,
    EXPERTS_DOMINATE_SHARE,
    TP_STATE_SHARE,
    Advice,
    _Context,
    _plan_advice,
    ms,
)
from estimator.advice.finetune_rules import RULES as FINETUNE_RULES
from estimator.advice.kernel_rules import eager_forward_peak_bytes, rule_eager, rule_fused
from estimator.advice.kv_rules import _kv_rules
from estimator.advice.linear_rules import RULES as LINEAR_RULES
from estimator.advice.recipe_rules import RULES as RECIPE_RULES
from estimator.advice.tree import ADVICE_ORDER
from estimator.advice.window_rules import RULES as WINDOW_RULES
from estimator.call.backends import DEFAULT_TORCH
from estimator.units import gib

__all__ = ["Advice", "advise", "eager_forward_peak_bytes", "ms"]

if TYPE_CHECKING:
    from estimator.model.budget import Plan

# --- plan rules (the whole model on one GPU) ---------------------------------------------------------------------


def rule_fits(ctx: _Context) -> list[Advice]:
    base = ctx.base
    if not base.fits:
        return []
    fit = base.fit  # the one verdict: headroom after the allocator reserve, as the page and the CLI show it
    headroom = fit.headroom_bytes
    limits = []
    if base.max_batch:
        limits.append(f"up to batch {base.max_batch:,}")
    if base.max_seq_len:
        limits.append(f"up to seq_len {base.max_seq_len:,}")
    why = (f"Total per GPU {gib(base.total_bytes)} of {gib(base.capacity_bytes)} "
           f"({base.total_bytes / base.capacity_bytes:.0%}), {gib(fit.allocator_reserve_bytes)} kept free for the "
           f"largest block; attention runs {base.selected_backend}.")
    return [Advice(id="fits", title=f"It fits, with {gib(headroom)} of headroom", why=why,
                   expected_effect=f"No change needed. Headroom {gib(headroom)}"
                                   + (f"; the estimator fits {' and '.join(limits)}." if limits else "."),
                   bytes_before=base.total_bytes, bytes_after=base.total_bytes, time_metric=ctx.time_metric,
                   time_ms_before=ctx.time_ms(base), time_ms_after=ctx.time_ms(base))]


def _shares(base: Plan) -> str:
    """The plan's time shares (plan_time.py `plan_times`: attention = q/k/v/o projections + core)."""
    whole = "training step" if base.inputs.mode == "training" else "forward"
    return (f"attention {base.attention_share:.1%} (projections and core), FFN {base.ffn_share:.1%}, "
            f"embedding {base.embedding_share:.1%} of the {whole} time")


# need no profile first
PASSIVE = ("fits", "attention-not-bottleneck", "split-prefill-decode", "decode-graph-warmup", "log-backend")


def profile_first(ctx: _Context) -> Advice:
    """Added whenever any other advice changes the kernel, the architecture or the parallelism (profile first)."""
    base = ctx.base
    return Advice(
        id="profile-first", title="Profile first: measure where the forward time and memory go",
        why=f"Estimated {_shares(base)}; "
            + ("it fits" if base.fits else "it does not fit" if base.supported
               else f"backend {ctx.inputs.backend} cannot run it")
            + f" and attention runs {ctx.selected()}. Profile before choosing a kernel, an architecture "
              "or a parallelism.",
        expected_effect="Confirms which advice below applies: torch.profiler (ProfilerActivity.CUDA) sorted by "
                        "cuda_time_total; at seq_len × 2, attention time should grow about 4× on the math path.",
        bytes_before=base.total_bytes, bytes_after=base.total_bytes, time_metric=ctx.time_metric,
        time_ms_before=ctx.time_ms(base), time_ms_after=ctx.time_ms(base))


def rule_not_bottleneck(ctx: _Context) -> list[Advice]:
    base, out = ctx.base, []
    share = base.attention_share
    if share < ATTENTION_BOTTLENECK_SHARE and base.supported:
        time_ms = ctx.time_ms(base)
        out.append(Advice(
            id="attention-not-bottleneck", title="Attention is not the bottleneck: look at the FFN and embedding",
            why=f"Estimated {_shares(base)}: attention is under {ATTENTION_BOTTLENECK_SHARE:.0%} (below "
                "that a faster kernel is not worth the effort; reduce FFN width, use fewer FFN/embedding bytes).",
            expected_effect=f"Even an attention kernel taking no time at all would save at most {share:.1%}: "
                            f"{ctx.time_metric} {ms(time_ms)} → {ms(time_ms * (1 - share))} (upper bound).",
            bytes_before=base.total_bytes, bytes_after=base.total_bytes, time_metric=ctx.time_metric,
            time_ms_before=time_ms, time_ms_after=time_ms * (1 - share)))
    return out


def _solved(ctx: _Context, field: str, solved_key: str, low: int, high: int) -> tuple[int | None, Plan | None]:
    """Largest value in [low, high] of an integer input (batch, seq_len) whose plan fits: the plan's own solver
    result (`max_batch`, `max_seq_len`) when it has one, else a bisection over re-run plans."""
    solved = getattr(ctx.base, solved_key)
    if solved is not None:
        if not low <= solved <= high:
            return None, None
        after = ctx.plan(**{field: solved})
        return (solved, after) if after is not None and after.fits else (None, None)
    best = (None, None)
    while low <= high:
        mid = (low + high) // 2
        plan = ctx.plan(**{field: mid})
        if plan is not None and plan.fits:
            best, low = (mid, plan), mid + 1
        else:
            high = mid - 1
    return best


def rule_over_budget(ctx: _Context) -> list[Advice]:
    base, inputs = ctx.base, ctx.inputs
    out: list[Advice] = []
    capacity = base.capacity_bytes
    state = ctx.model_state_bytes(base)
    dp = inputs.dp
    if not base.supported:
        return []  # the forced backend cannot run: the kernel rules explain it, the totals mean nothing yet
    if base.fits:
        return _kv_rules(ctx)
    fit = base.fit  # the one verdict: short by = total + allocator reserve - capacity, as every surface says
    if base.total_bytes > capacity:
        why_over = (f"Total per GPU {gib(base.total_bytes)} (+ {gib(fit.allocator_reserve_bytes)} kept free for the "
                    f"largest block) exceeds {gib(capacity)}: short by {gib(fit.short_by_bytes)}")
    else:
        why_over = (f"Total per GPU {gib(base.total_bytes)} is under {gib(capacity)}, but with "
                    f"{gib(fit.allocator_reserve_bytes)} kept free for the largest block it is short by "
                    f"{gib(fit.short_by_bytes)}")
    best = ctx.plan(batch=dp, **({"checkpointing": "full"} if ctx.training else {}),
                    **({"backend": "auto"} if inputs.backend in ("math", "eager") else {}))
    batch_one_over = best is not None and not best.fits
    if state > capacity or (batch_one_over and state > TP_STATE_SHARE * capacity):
        tp, gpus, after = _parallel_degree(ctx, "tp")
        if tp is not None:
            parts = (f"weights {gib(base.weights_bytes)}, gradients {gib(base.gradient_bytes)}, optimizer "
                     f"{gib(base.optimizer_bytes)}" if ctx.training else f"weights {gib(base.weights_bytes)}")
            reason = ("more than one GPU: no kernel or sequence change can fix that" if state > capacity else
                      f"{state / capacity:.0%} of the GPU, and even at batch 1 it does not fit: sharding the "
                      "weights frees the most")
            out.append(_plan_advice(
                ctx, "tensor-parallel", f"Tensor parallel over {tp} GPUs",
                f"{why_over}; the model state alone ({parts}) is {gib(state)}, {reason}."
                + (" (Sharding only the optimizer and gradients, ZeRO/FSDP, is the data-parallel alternative.)"
                   if ctx.training else ""),
                f"Heads, FFN and vocabulary split {tp} ways (tp={tp} on {gpus} GPUs){_comm_note(after, 'tp')}.",
                after, tp=tp, gpus=gpus))
            ctx.sharded = {"tp": tp, "gpus": gpus}
    out.extend(_expert_parallel(ctx, why_over, state))
    if inputs.batch_per_gpu > 1 and state <= capacity:
        batch, after = _solved(ctx, "batch", "max_batch", dp, inputs.batch - 1)
        if batch is not None:
            out.append(_plan_advice(
                ctx, "reduce-batch", f"Reduce the batch to {batch:,}",
                f"{why_over} at batch {inputs.batch:,}, but it fits at batch {batch:,}: over budget only at the "
                "larger batch, so reduce the batch first and "
                + ("accumulate gradients." if ctx.training else "queue the other requests."),
                f"Batch {inputs.batch:,} → {batch:,}.", after, batch=batch))
    if ctx.training and inputs.checkpointing != "full":
        out.extend(_checkpointing(ctx, why_over))
    if batch_one_over and state <= capacity:
        out.extend(_sequence_rules(ctx, why_over, best))
    return out + _kv_rules(ctx)


def _checkpointing(ctx: _Context, why_over: str) -> list[Advice]:
    """Where the activations are, from the plan re-run with each checkpointing level: selective recomputes the
    attention core (Korthikanti et al. 2022 §4.2), full recomputes the whole layer, FFN included. The cheapest
    level that fits is advised, else full."""
    base, current = ctx.base, ctx.inputs.checkpointing
    levels = {level: ctx.plan(checkpointing=level) for level in ("selective", "full") if level != current}
    levels = {k: v for k, v in levels.items() if v is not None}
    if not levels:
        return []
    level = next((k for k, v in levels.items() if v.fits), list(levels)[-1])
    saved = "; ".join(f"{k} (recompute the {'attention core' if k == 'selective' else 'whole layer, FFN too'}) "
                      f"saves {gib(base.total_bytes - v.total_bytes)}" for k, v in levels.items())
    return [_plan_advice(
        ctx, "activation-checkpointing", f"Activation checkpointing ({level})",
        f"{why_over}; training activations are {gib(base.activation_bytes)} per GPU. Checkpoint where the "
        f"activations are: {saved}. The usual rule of thumb is 20–30% more step time; the estimate below "
        "counts the recomputation.",
        f"checkpointing {current} → {level}.", levels[level], checkpointing=level)]


def _comm_note(plan: Plan | None, kind: str) -> str:
    """The communication the re-run plan priced (estimator/model/comm.py): its exposed ms and the link it runs
    over, so that the time after is never quoted without it."""
    if not plan or not plan.communication:
        return ""
    comm = plan.communication
    link = comm.get("links", {}).get(kind)
    if link is None:
        return ""
    where = {"network": "the inter-node network (the group spans nodes)", "nvlink": "NVLink", "pcie": "PCIe"}[link]
    return f"; the time after includes {ms(comm.get(kind + '_ms', 0.0))} of {kind} communication over {where}"


def _parallel_degree(ctx: _Context, field: str) -> tuple[int | None, int | None, Plan | None]:
    """Smallest tp (or cp) of 2, 4, 8, 16, 32, 64 × the current one whose plan fits, else the largest valid one:
    (degree, gpus, plan). The job's GPUs are reused when they divide (fewer data-parallel replicas), else
    more GPUs keep the replicas."""
    inputs = ctx.inputs
    last = (None, None, None)
    for degree in (d * getattr(inputs, field) for d in (2, 4, 8, 16, 32, 64)):
        group = degree * (inputs.cp if field == "tp" else inputs.tp)
        gpus = inputs.gpus if inputs.gpus % group == 0 else group * inputs.dp
        plan = ctx.plan(**{field: degree}, gpus=gpus)
        if plan is None:
            continue
        last = (degree, gpus, plan)
        if plan.fits:
            break
    return last


def _sequence_rules(ctx: _Context, why_over: str, best: Plan) -> list[Advice]:
    """Still over budget at batch 1 (with a fused kernel and full checkpointing where they apply)."""
    inputs, out = ctx.inputs, []
    why = (f"{why_over}, and even at batch 1{' with full checkpointing' if ctx.training else ''} and a fused "
           f"kernel it needs {gib(best.total_bytes)}: the sequence itself is the problem (out of memory at "
           "batch 1 is a kernel or architecture problem).")
    windows = inputs.windows
    span = inputs.seq_len if None in windows else min(inputs.seq_len, max(windows))  # widest attention now
    window = min(4096, 1 << max(6, (inputs.seq_len // 4).bit_length() - 1))
    # a window saves memory and FLOPs only through a kernel that skips masked blocks: through SDPA or eager it is a
    # dense mask (see window_rules.py), so the effect is priced through flex
    after = ctx.plan(window=window, backend="flex") if window < span else None
    if after is not None:
        now = "global attention" if span == inputs.seq_len else f"a widest window of {span:,}"
        out.append(_plan_advice(
            ctx, "window-attention", f"Window attention ({window:,} tokens) through FlexAttention",
            why + " A window of w tokens makes attention O(n·w) instead of O(n²) (Swin, Mistral) and, once decoding, "
                  "bounds the KV cache; it changes the model (fine-tune). It pays off only through a kernel that "
                  "skips masked blocks (flex_attention with a BlockMask, or flash-attn's window_size): through "
                  "SDPA or eager a window is a dense mask and saves nothing.",
            f"{now} → a window of {window:,} on every layer, run through flex.", after, window=window,
            backend="flex"))
    seq, after = _solved(ctx, "seq_len", "max_seq_len", inputs.cp, inputs.seq_len - 1)
    if seq is not None:
        shorter = ("fewer patches (patch merging, a larger patch, a lower resolution)"
                   if inputs.model.kind == "encoder" else "a shorter context (truncate, chunk, retrieve)")
        out.append(_plan_advice(ctx, "reduce-seq-len", f"Reduce the sequence to {seq:,} tokens", why +
                                f" The longest sequence that fits is {seq:,}: {shorter}.",
                                f"seq_len {inputs.seq_len:,} → {seq:,}.", after, seq_len=seq))
    cp, gpus, after = _parallel_degree(ctx, "cp")
    if cp is not None:
        out.append(_plan_advice(
            ctx, "context-parallel", f"Context parallel over {cp} GPUs",
            why + " Context parallel (ring attention) splits the sequence, its activations and KV cache across "
                  "GPUs; it composes with flash/cuDNN.",
            f"cp {inputs.cp} → {cp} on {gpus} GPUs{_comm_note(after, 'cp')}.", after, cp=cp, gpus=gpus))
    return out


def _expert_parallel(ctx: _Context, why_over: str, state: int) -> list[Advice]:
    """Mixture of experts whose routed experts are most of the model state: expert parallelism, each GPU holding
    experts/ep of every MoE layer (ModelSpec.params_per_gpu(tp, ep)); the effect is the plan re-run with the experts
    split. The smallest ep of 2, 4, ... that divides the experts and fits, else the largest tried."""
    inputs, m = ctx.inputs, ctx.inputs.model
    if not m.experts or inputs.ep > 1 or m.expert_params < EXPERTS_DOMINATE_SHARE * m.params:
        return []
    choice = None
    for ep in (2, 4, 8, 16, 32, 64):
        if m.experts % ep:
            break
        gpus = math.lcm(inputs.gpus, ep)  # the same replicas, each expert set spread over ep GPUs
        after = ctx.plan(solve=True, ep=ep, gpus=gpus)
        if after is None:
            continue
        choice = (ep, gpus, after)
        if after.fits:
            break
    if choice is None:
        return []
    ep, gpus, after = choice
    share = m.expert_params / m.params
    return [_plan_advice(
        ctx, "moe-expert-parallel", f"Expert parallel over {ep} GPUs",
        f"{why_over}; the routed experts are {share:.0%} of the {m.params:,} parameters (model state "
        f"{gib(state)}), and each token runs only {m.experts_per_token} of {m.experts}: split the experts, not "
        "every matrix (tokens are dispatched to the GPU holding their expert; all-to-all not modelled).",
        f"Each GPU holds {m.experts // ep} of {m.experts} experts per MoE layer (ep={ep} on {gpus} GPUs).",
        after, ep=ep, gpus=gpus)]


def rule_operate(ctx: _Context) -> list[Advice]:
    base, inputs, out = ctx.base, ctx.inputs, []
    same = dict(bytes_before=base.total_bytes, bytes_after=base.total_bytes, time_metric=ctx.time_metric,
                time_ms_before=ctx.time_ms(base), time_ms_after=ctx.time_ms(base))
    if not ctx.training and inputs.model.kind == "decoder" and base.decode_time_ms_per_token is not None:
        out.append(Advice(
            id="split-prefill-decode", title="Measure prefill and decode separately; hold the SLA on P99 decode",
            why="Prefill is compute-bound and O(n²) in attention; decode is bandwidth-bound and reads the weights "
                "and the whole KV cache per token (the serving SLA is P99 decode latency, not a prefill "
                "benchmark; a training step time is neither).",
            expected_effect=f"Estimated prefill {ms(base.prefill_time_ms)} for {inputs.batch:,} × "
                            f"{inputs.seq_len:,} tokens; decode {ms(base.decode_time_ms_per_token)} per token "
                            "at the end of the context (the slowest step, the one P99 sees). Report both, measured "
                            "on production sequence lengths.", **same))
    first = base.decode_time_ms_per_token  # as generate runs it: a new cache length every step
    steady = base.decode_steady_ms_per_token
    if not ctx.training and first is not None and steady is not None and first > 1.5 * steady:
        flash = base.decode_forced_flash_ms_per_token
        best = min(v for v in (flash, base.decode_static_cache_ms_per_token, steady) if v is not None)
        out.append(Advice(
            id="decode-graph-warmup", title="Decode off cuDNN's per-length graphs (flash, or a static cache)",
            why=f"Through SDPA on this GPU each decode step is a new cuDNN graph (the KV length grows by one; PyTorch "
                f"{inputs.torch_version} caches graphs per shape, aten/src/ATen/native/cudnn/MHA.cpp): generate "
                f"decodes at {ms(first)} per token, against {ms(steady)} once every length has been seen (measured "
                "on the H200: 40.9 ms a build, validation/data/h200_decode_probe.csv).",
            expected_effect="Run the single-token calls on flash (torch.nn.attention.sdpa_kernel"
                            "(SDPBackend.FLASH_ATTENTION) around generate"
                            + (f": {ms(flash)} per token" if flash is not None else "") + "), use a static cache "
                            f"(one length, one graph: {ms(base.decode_static_cache_ms_per_token)}), or warm a "
                            "serving process up over the lengths it will serve.",
            bytes_before=base.total_bytes, bytes_after=base.total_bytes, time_metric="decode ms per token",
            time_ms_before=first, time_ms_after=best))
    backend = base.selected_backend
    hopper = ctx.gpu.sm >= 90 and inputs.dtype != "float32"
    out.append(Advice(
        id="log-backend", title="Log the attention backend at step 0",
        why=f"The estimator expects {backend} here. A silent fallback to math is a common cause of slow "
            "long-context runs; "
            + ("on Hopper with torch 2.11 PyTorch prefers cuDNN over flash for fp16/bf16 (aten/src/ATen/native/"
               "transformers/cuda/sdp_utils.cpp, check_prefer_cudnn_attention). " if hopper else "")
            + "Log torch._fused_sdp_choice(q, k, v, ...) or the profiler's kernel name "
              "(flash_fwd, fmha_cutlassF, cudnn ... sdpa, or aten::bmm for math) at the first step.",
        expected_effect="No memory or time change: it catches a fallback before it costs a run.", **same))
    return out


# advice whose purpose is to bring the total under the GPU's memory: dropped when its re-run frees nothing
MEMORY_FIXES = ("tensor-parallel", "moe-expert-parallel", "reduce-batch", "activation-checkpointing",
                "window-attention", "reduce-seq-len", "context-parallel", "precision", "optimizer", "linear-attention",
                "hybrid-architecture", "finetune-ladder")
RULES = (rule_fits, rule_not_bottleneck, rule_eager, rule_fused, *WINDOW_RULES, rule_over_budget, *LINEAR_RULES,
         *RECIPE_RULES, *FINETUNE_RULES, rule_operate)


def advise(inputs, *, mask: str = "none", cached_len: int = 0, make_plan=None, estimate_call=None,
           torch_version: str | None = None) -> list[Advice]:
    """Advice for one plan, most important first (the decision tree's pre-order).

    Two properties of the attention call that the plan does not price can be given: `mask` (a dense
    (batch, 1, q_len, kv_len) bool or float mask passed to SDPA) and `cached_len` (tokens already in the KV
    cache, as in chunked prefill: the call is causal with q_len = seq_len - cached_len < kv_len). The kernel
    rules use them; the plan's totals do not include them. `make_plan` / `estimate_call` default to the
    estimator's own; tests may pass others."""
    if make_plan is None:
        from estimator.model.plan import make_plan
    if estimate_call is None:
        from estimator.call.attention import estimate_call
    ctx = _Context(inputs, make_plan, estimate_call, torch_version or getattr(inputs, "torch_version", DEFAULT_TORCH),
                   mask, int(cached_len))
    found: dict[str, Advice] = {}
    for rule in RULES:
        for advice in rule(ctx):
            if advice.id in MEMORY_FIXES and advice.bytes_after is not None and \
                    advice.bytes_after >= advice.bytes_before:
                continue  # offered to free memory, frees none here (e.g. the peak is the optimizer step)
            found.setdefault(advice.id, advice)
    if any(advice_id not in PASSIVE for advice_id in found):
        found["profile-first"] = profile_first(ctx)
    return sorted(found.values(), key=lambda a: ADVICE_ORDER.index(a.id))
