"""Properties of the plan (hypothesis): totals are sums, the KV cache is linear in batch and seq_len,
GQA divides the cache by the group size, memory never shrinks as seq_len or batch grow."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from estimator.model.budget import budget
from estimator.model.inputs import PlanInputs
from estimator.model.specs import ModelSpec


@st.composite
def plans(draw):
    kv_heads = draw(st.sampled_from([1, 2, 4, 8]))
    q_heads = kv_heads * draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([64, 128]))
    model = ModelSpec(name="h", layers=draw(st.integers(1, 8)), hidden=q_heads * head_dim, q_heads=q_heads,
                      kv_heads=kv_heads, head_dim=head_dim, ffn=draw(st.integers(64, 4096)),
                      vocab=draw(st.integers(100, 50000)), gated_ffn=draw(st.booleans()))
    return PlanInputs(model=model, seq_len=draw(st.integers(1, 8192)), batch=draw(st.integers(1, 16)),
                      mode=draw(st.sampled_from(["inference", "training"])),
                      backend=draw(st.sampled_from(["auto", "math", "eager"])), gpu="h200",
                      kv_dtype=draw(st.sampled_from(["bfloat16", "int8", "int4"])))


@settings(max_examples=40, deadline=None)
@given(plans())
def test_total_is_sum_and_fits_is_consistent(inputs):
    plan = budget(inputs)
    assert plan.total_bytes == sum(c.bytes for c in plan.components)
    # fits keeps the step's largest single block free on top of the peak (the allocator reserve)
    assert plan.fits == (plan.supported and plan.total_bytes + plan.allocator_reserve_bytes <= plan.capacity_bytes)
    assert plan.allocator_reserve_bytes >= 0


@settings(max_examples=40, deadline=None)
@given(plans(), st.integers(2, 5))
def test_kv_cache_linear_in_batch_and_seq_len(inputs, k):
    inputs = replace(inputs, mode="inference")
    base = budget(inputs).kv_cache_bytes
    assert budget(replace(inputs, batch=inputs.batch * k)).kv_cache_bytes == k * base
    assert budget(replace(inputs, seq_len=inputs.seq_len * k)).kv_cache_bytes == k * base


@settings(max_examples=30, deadline=None)
@given(plans())
def test_gqa_divides_the_cache_by_the_group(inputs):
    inputs = replace(inputs, mode="inference")
    m = inputs.model
    mha = replace(inputs, model=replace(m, kv_heads=m.q_heads))
    group = m.q_heads // m.kv_heads
    assert budget(mha).kv_cache_bytes == group * budget(inputs).kv_cache_bytes


@settings(max_examples=30, deadline=None)
@given(plans(), st.integers(1, 4096), st.integers(1, 8))
def test_memory_grows_with_seq_len_and_batch(inputs, extra_len, extra_batch):
    plan = budget(inputs)
    longer = budget(replace(inputs, seq_len=inputs.seq_len + extra_len))
    bigger = budget(replace(inputs, batch=inputs.batch + extra_batch))
    # auto may switch kernels with the shape (e.g. flash at q_len 1, cuDNN above), and kernels differ in
    # workspace: the property holds for one kernel
    assume(plan.selected_backend == longer.selected_backend == bigger.selected_backend)
    assert longer.total_bytes >= plan.total_bytes
    assert bigger.total_bytes >= plan.total_bytes
    assert longer.weights_bytes == plan.weights_bytes
