"""The caching-allocator replay (estimator/call/allocator.py): c10's split, segment and release rules, and the
measured H200 boundary it exists for."""

from __future__ import annotations

import pytest

from estimator import AttentionCall, estimate_call, get_gpu
from estimator.call.allocator import CachingAllocator, OutOfMemory, replay_fits

MiB = 2**20


def test_large_request_takes_whole_segment_when_little_would_remain():
    a = CachingAllocator(1 << 40)
    a.malloc(15 * MiB + 1)  # segment rounded to 16 MiB; 1 MiB - 1 B would remain: not split
    assert a.reserved_bytes == 16 * MiB and a._free[False] == []
    a.malloc(11 * MiB)  # 12-MiB segment, exactly 1 MiB would remain: still not split (needs > 1 MiB)
    assert a._free[False] == []


def test_mid_sized_requests_share_a_20_mib_segment_and_reuse_freed_blocks():
    a = CachingAllocator(1 << 40)
    x = a.malloc(3 * MiB)
    a.malloc(4 * MiB)
    assert a.reserved_bytes == 20 * MiB
    a.free(x)
    a.malloc(2 * MiB)  # best fit: the freed 3-MiB block (split would leave 1 MiB: not split)
    assert a.reserved_bytes == 20 * MiB


def test_out_of_memory_releases_free_segments_then_fails():
    a = CachingAllocator(64 * MiB)
    x = a.malloc(40 * MiB)
    a.free(x)  # cached, not returned
    a.malloc(50 * MiB)  # does not fit beside the cached 40 MiB: release it, then it fits
    assert a.reserved_bytes == 50 * MiB
    with pytest.raises(OutOfMemory):
        a.malloc(20 * MiB)


def test_fragmentation_makes_a_replay_fail_below_capacity():
    # a live small block inside a freed big segment pins it: the next big request needs a new segment
    events = [("alloc", "a", 40 * MiB), ("free", "a", True), ("alloc", "pin", 30 * MiB), ("alloc", "b", 40 * MiB)]
    assert replay_fits([], events, 100 * MiB, [], runs=1)
    assert not replay_fits([], events, 75 * MiB, [], runs=1)  # peak is 70 MiB, yet it runs out


@pytest.mark.parametrize("batch, q_heads, kv_heads, head_dim, dtype, dropout, ran", [
    (8, 1, 1, 32, "bfloat16", 0.1, False),  # validation/data/h200_heldout2.csv random11-0379: oom at 92.1%
    (1, 8, 1, 96, "float16", 0.0, True),    # validation/data/h200_heldout3.csv random13-0095: ran at 92.3%
])
def test_measured_h200_boundary(batch, q_heads, kv_heads, head_dim, dtype, dropout, ran):
    call = AttentionCall(batch=batch, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim, q_len=32768,
                         kv_len=32768, dtype=dtype, dropout=dropout, mode="forward_backward", backend="math")
    assert estimate_call(call, get_gpu("h200")).fits is ran



def test_mask_temporary_changes_placement():
    # validation/data/h200_heldout4.csv random17-0250 ran at 93.8% of the H200: the fp32 `rand` temporary
    # behind its bool mask leaves a 4-GiB cached segment that takes the small blocks, so the 8-GiB isneginf
    # segment stays free and is released when a 32-GiB block needs room (seen in an address trace)
    call = AttentionCall(batch=4, q_heads=8, kv_heads=8, head_dim=100, q_len=16384, kv_len=16384, dtype="float32",
                         mask="bool", mode="forward_backward", backend="math")
    assert estimate_call(call, get_gpu("h200")).fits is True
