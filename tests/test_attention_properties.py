"""Properties of the attention estimator (hypothesis): quadratic scores on the materialising paths,
linear in batch, GQA ratio, fused paths free of the n² term, and exact input bytes."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from estimator import AttentionCall, estimate_call, get_gpu

H200 = get_gpu("h200")

shapes = st.fixed_dictionaries({
    "batch": st.integers(1, 4), "q_heads": st.sampled_from([4, 8, 16]), "head_dim": st.sampled_from([64, 128]),
    "q_len": st.sampled_from([1024, 2048, 4096]), "dtype": st.sampled_from(["float16", "bfloat16", "float32"]),
    "mode": st.sampled_from(["forward", "forward_backward"]),
})


def call(d, **kw) -> AttentionCall:
    base = {**d, "kv_heads": d["q_heads"], "kv_len": d["q_len"]}
    return AttentionCall(**{**base, **kw})


def peak(c: AttentionCall) -> int:
    return estimate_call(c, H200).peak_extra_bytes


@given(shapes, st.sampled_from(["math", "eager"]))
def test_materialised_scores_are_quadratic(d, backend):
    one = call(d, backend=backend)
    two = dataclasses.replace(one, q_len=2 * one.q_len, kv_len=2 * one.kv_len)
    ratio = peak(two) / peak(one)
    assert 3.0 < ratio <= 4.0  # n² dominates; the linear terms keep it just under 4


@given(shapes, st.sampled_from(["flash", "cudnn", "efficient"]))
def test_fused_paths_are_linear_in_n(d, backend):
    one = call(d, backend=backend, dtype="bfloat16")
    two = dataclasses.replace(one, q_len=2 * one.q_len, kv_len=2 * one.kv_len)
    assert peak(two) <= 2.2 * peak(one)


@given(shapes, st.sampled_from(["math", "eager", "cudnn", "efficient"]), st.integers(2, 4))
def test_linear_in_batch(d, backend, k):
    one = call(d, backend=backend, dtype="bfloat16" if backend == "cudnn" else d["dtype"])
    many = dataclasses.replace(one, batch=one.batch * k)
    # up to 1 MiB per large block (whole 2-MiB-rounded segments) and 512 B per small one
    assert abs(peak(many) - k * peak(one)) <= 0.02 * k * peak(one) + k * 4 * 2**20
    assert estimate_call(many, H200).flops == k * estimate_call(one, H200).flops


@given(shapes, st.sampled_from([2, 4]))
def test_gqa_expansion_costs_on_math_only(d, group):
    full = call(d, backend="math")
    gqa = dataclasses.replace(full, kv_heads=full.q_heads // group)
    # math repeats K and V to all query heads in fp32: GQA saves nothing at the peak, often costs more
    assert peak(gqa) >= peak(full) - 4 * full.batch * full.q_heads * full.kv_len * full.head_dim * 4
    fwd = call(d, backend="cudnn", dtype="bfloat16", mode="forward")
    assert peak(dataclasses.replace(fwd, kv_heads=fwd.q_heads // group)) == peak(fwd)  # output only


@given(shapes)
def test_input_bytes_are_exact(d):
    c = call(d, mask="float")
    es = 4 if c.dtype == "float32" else 2
    q = c.batch * c.q_heads * c.q_len * c.head_dim * es
    kv = c.batch * c.kv_heads * c.kv_len * c.head_dim * es
    mask = c.batch * c.q_len * c.kv_len * es
    assert estimate_call(c, H200).input_bytes == q + 2 * kv + mask + (q if c.training else 0)
