"""Advice for a state-space / hybrid plan (estimator/model/hybrid_plan.py: mamba2, falcon_h1, bamba on
transformers' torch fallback), each effect a re-plan of the same model:
  fits                 the headroom;
  mamba-fast-kernels   install mamba-ssm and causal-conv1d: the fused kernels keep none of the chunked scan's
                       6-D products; their memory is not modelled here, so no number is given for them;
  mamba-chunk-size     a smaller `chunk_size` (config): the chunked scan computes the same result in smaller
                       blocks, and its largest products, (b, L, l, heads, state or head_dim), shrink with l, while
                       the inter-chunk term (L / l)² grows; the best of the halvings down to 32 is re-planned;
  reduce-batch         the largest batch that fits (bisection, at most 8 re-plans);
  reduce-seq-len       the longest sequence that fits (bisection, at most 8 re-plans).
"""

from __future__ import annotations

from dataclasses import replace

from estimator.advice.core import Advice
from estimator.advice.tree import ADVICE_ORDER
from estimator.model.hybrid_plan import hybrid_plan
from estimator.units import gib

MAX_REPLANS = 8  # each bisection re-plans at most this many times (a bound on the work a request triggers)
MIN_CHUNK = 32


def hybrid_advice(spec, *, mode: str, seq_len: int, batch: int, dtype: str, gpu: str,
                  optimizer: str = "adamw") -> list[Advice]:
    """Advice for the hybrid plan of these inputs ("prefill" or "training"), most important first."""
    def plan(s=spec, L=seq_len, b=batch):
        return hybrid_plan(s, mode=mode, seq_len=L, batch=b, dtype=dtype, gpu=gpu, optimizer=optimizer)

    base = plan()
    what = "training step" if mode == "training" else "prefill"
    if base.fits:
        head = base.verdict.capacity_bytes - base.total_bytes - base.verdict.allocator_reserve_bytes
        return [Advice(id="fits", title=f"It fits, with {gib(head)} of headroom",
                       why=f"The {what} needs {gib(base.total_bytes)} of {gib(base.verdict.capacity_bytes)}, "
                           f"{gib(base.verdict.allocator_reserve_bytes)} kept free by the caching allocator.",
                       expected_effect=f"No change needed. Headroom {gib(head)}.",
                       bytes_before=base.total_bytes, bytes_after=base.total_bytes)]
    why = (f"The {what} needs {gib(base.total_bytes)} (+ {gib(base.verdict.allocator_reserve_bytes)} for the "
           f"allocator) of {gib(base.verdict.capacity_bytes)}; on the torch fallback the chunked scan's fp32 "
           f"products hold {gib(base.activation_bytes)} of it.")
    out = [Advice(id="mamba-fast-kernels", title="Install mamba-ssm and causal-conv1d (the fused kernels)",
                  why=why + " transformers logs that it falls back to its reference PyTorch implementation.",
                  expected_effect="Not priced: the fused kernels' memory is not modelled by this planner (they "
                                  "keep none of the chunked scan's products, so far less). Re-plan after measuring.",
                  bytes_before=base.total_bytes)]
    chunk = _best_chunk(spec, plan, base)
    if chunk is not None:
        c, p = chunk
        out.append(Advice(id="mamba-chunk-size", title=f"Set chunk_size to {c} (from {spec.mixer.chunk})",
                          why=why, expected_effect=f"{gib(p.total_bytes)} ({p.verdict.status}); the scan's result "
                          "is the same, computed in smaller blocks.", change=(("chunk_size", c),),
                          bytes_before=base.total_bytes, bytes_after=p.total_bytes))
    if batch > 1:
        b = _largest(lambda v: plan(b=v), batch - 1)
        if b:
            p = plan(b=b)
            out.append(Advice(id="reduce-batch", title=f"Reduce the batch to {b:,}", why=why,
                              expected_effect=f"{gib(p.total_bytes)} per GPU ({p.verdict.status})",
                              change=(("batch", b),), bytes_before=base.total_bytes, bytes_after=p.total_bytes))
    L = _largest(lambda v: plan(L=v), seq_len - 1)
    if L:
        p = plan(L=L)
        out.append(Advice(id="reduce-seq-len", title=f"Reduce the sequence to {L:,} tokens", why=why,
                          expected_effect=f"{gib(p.total_bytes)} per GPU ({p.verdict.status})",
                          change=(("seq_len", L),), bytes_before=base.total_bytes, bytes_after=p.total_bytes))
    return sorted(out, key=lambda a: ADVICE_ORDER.index(a.id))


def _best_chunk(spec, plan, base):
    """(chunk, plan) of the halving of chunk_size that needs the least, if it needs less than now."""
    best = None
    c = spec.mixer.chunk // 2
    while c >= MIN_CHUNK and spec.mamba_layers:
        s = replace(spec, mixer=replace(spec.mixer, chunk=c))
        p = plan(s=s)
        if p.total_bytes < (best[1].total_bytes if best else base.total_bytes):
            best = (c, p)
        c //= 2
    return best


def _largest(fits_at, hi: int) -> int:
    """The largest v in 1..hi whose plan fits (0 if none), by bisection within MAX_REPLANS plans."""
    lo, n = 0, 0
    while lo < hi and n < MAX_REPLANS:
        mid = (lo + hi + 1) // 2
        n += 1
        if fits_at(mid).fits:
            lo = mid
        else:
            hi = mid - 1
    return lo  # 0, or a value whose plan was seen to fit
