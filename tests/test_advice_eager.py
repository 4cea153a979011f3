"""The advisor's in-place masked_fill_ replay against the estimator's eager timeline (estimator/call/memory.py)."""

import itertools

from estimator.advice.plan_rules import eager_forward_peak_bytes
from estimator.call.config import AttentionCall
from estimator.call.memory import eager_timeline
from estimator.call.shapes import Calls


def calls():
    for dtype, causal, mask, dropout, kv_heads, (q_len, kv_len) in itertools.product(
            ("bfloat16", "float16", "float32"), (False, True), ("none", "bool", "float"), (0.0, 0.1), (8, 2),
            ((1024, 1024), (1000, 1000), (256, 2048))):
        if causal and mask != "none":
            continue
        yield AttentionCall(batch=2, q_heads=8, kv_heads=kv_heads, head_dim=64, q_len=q_len, kv_len=kv_len,
                            dtype=dtype, causal=causal, mask=mask, dropout=dropout, backend="eager")


def test_out_of_place_replay_equals_the_estimators_eager_forward():
    for call in calls():
        assert eager_forward_peak_bytes(call, inplace_fill=False) == int(eager_timeline(Calls.from_call(call)).peak)


def test_in_place_fill_never_raises_the_peak_and_changes_nothing_without_a_fill():
    for call in calls():
        before = eager_forward_peak_bytes(call, inplace_fill=False)
        after = eager_forward_peak_bytes(call, inplace_fill=True)
        assert after <= before
        if not (call.causal or call.mask == "bool"):
            assert after == before


def test_bf16_causal_peak_is_the_softmax_not_the_copy():
    call = AttentionCall(batch=1, q_heads=32, kv_heads=32, head_dim=128, q_len=4096, kv_len=4096,
                         causal=True, backend="eager")
    P, LS = 32 * 4096 * 4096, 4096 * 4096
    # scores in bf16 (2P) + fp32 upcast (4P) + fp32 softmax (4P) + the triu mask (L·S): with or without the copy
    for inplace in (False, True):
        assert eager_forward_peak_bytes(call, inplace_fill=inplace) == 10 * P + LS
