"""Column view of attention calls: the same formulas serve one call (numpy scalars) or a whole CSV
(numpy arrays, one element a row), so `predict` on 100k rows costs a few array passes.

Also the allocation timeline that every backend's memory model is written in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from estimator.call.config import DTYPE_BITS, STRUCTURED_MASKS, AttentionCall, parse_mask

ALLOC_GRANULE_BYTES = 512  # CUDA caching allocator: every block rounded up to 512 B (c10 kMinBlockSize)
# c10/cuda/CUDACachingAllocator.cpp: a request of at least kMinLargeAlloc (10 MiB) gets a segment rounded up
# to kRoundLarge (2 MiB), and a block is split only if more than kSmallSize (1 MiB) would remain; so such a
# request whose 2-MiB round-up leaves at most 1 MiB holds (and is counted as) the whole segment.
MIN_LARGE_ALLOC_BYTES = 10 * 2**20
ROUND_LARGE_BYTES = 2 * 2**20
SPLIT_REMAINDER_BYTES = 2**20


def block_bytes(nbytes):
    """Bytes the caching allocator counts for one request of `nbytes` (elementwise)."""
    block = round_up(nbytes, ALLOC_GRANULE_BYTES)
    segment = round_up(nbytes, ROUND_LARGE_BYTES)
    whole = (nbytes >= MIN_LARGE_ALLOC_BYTES) & (segment - block <= SPLIT_REMAINDER_BYTES)
    return np.where(whole, segment, block)


def round_up(x, multiple):
    """Smallest multiple of `multiple` that is >= x (elementwise)."""
    return (x + multiple - 1) // multiple * multiple


def cdiv(a, b):
    return (a + b - 1) // b


@dataclass
class Calls:
    """Attention calls as columns. Integer fields are int64 arrays (or numpy scalars)."""

    B: np.ndarray
    Hq: np.ndarray
    Hk: np.ndarray
    D: np.ndarray
    L: np.ndarray
    S: np.ndarray
    bits: np.ndarray
    bf16: np.ndarray
    causal: np.ndarray
    mask_bool: np.ndarray
    mask_float: np.ndarray
    dropout: np.ndarray
    grad: np.ndarray
    # structured masks (parse_mask): a sliding window of W keys (0: none), `docs` packed documents, and whether the
    # structure is causal. Such a call also has mask_bool set and causal cleared: the dense bool mask SDPA and
    # eager receive (causality folded into it); flex reads W, docs and scausal instead.
    W: np.ndarray = np.int64(0)
    docs: np.ndarray = np.int64(1)
    scausal: np.ndarray = np.bool_(False)

    def take(self, index) -> Calls:
        """The calls at `index` (a bool mask or integer positions), as a new column set."""
        shape = np.shape(np.atleast_1d(self.B))
        return Calls(**{f: np.broadcast_to(np.atleast_1d(getattr(self, f)), shape)[index]
                        for f in self.__dataclass_fields__})

    @property
    def structured(self):
        """A window or document mask (rather than a dense mask tensor or none)."""
        return (self.W > 0) | (self.docs > 1)

    @property
    def es(self):
        """Element size of the inputs in bytes."""
        return self.bits // 8

    @property
    def fp32(self):
        return self.bits == 32

    @property
    def gqa(self):
        return self.Hq != self.Hk

    @property
    def has_mask(self):
        return self.mask_bool | self.mask_float

    @property
    def has_dropout(self):
        return self.dropout > 0

    def input_sizes(self, backend=None) -> list:
        """Requested bytes of q, k, v, the mask and grad_out (0 where absent), as contract §1 allocates them. The
        mask is the dense (batch, 1, q_len, kv_len) tensor, except for flex, which gets a BlockMask: kv and q
        block counts and indices, partial and full (4 int32 (batch, q_blocks, kv_blocks) index tensors)."""
        q = self.B * self.Hq * self.L * self.D * self.es
        kv = self.B * self.Hk * self.S * self.D * self.es
        mask_elems = self.B * self.L * self.S
        mask = np.where(self.mask_bool, mask_elems, np.where(self.mask_float, mask_elems * self.es, 0))
        if backend is not None:
            blocks = self.B * cdiv(self.L, 128) * cdiv(self.S, 128)
            mask = np.where(np.asarray(backend) == "flex", 4 * 4 * blocks, mask)
            mask = np.where(np.asarray(backend) == "flash-attn", 0, mask)  # window_size / cu_seqlens, no tensor
        return [q, kv, kv, mask, np.where(self.grad, q, 0)]

    def input_events(self, row: int = 0) -> list[tuple[str, str, int]]:
        """How validation/call/protocol.py's make_inputs allocates one call's inputs, in order: q, k, v, the mask
        (a bool mask is `rand(...) > p`, so an fp32 temporary of the mask's shape comes and goes first),
        grad_out. Near the limit, where that temporary's segment sits matters (estimator/call/allocator.py)."""
        q, k, v, mask, grad_out = (int(np.atleast_1d(n)[row]) for n in self.input_sizes())
        bool_mask = bool(np.atleast_1d(self.mask_bool)[row])
        return [("alloc", "q", q), ("alloc", "k", k), ("alloc", "v", v),
                ("alloc", "rand", mask * 4 if bool_mask else 0), ("alloc", "mask", mask),
                ("free", "rand", True), ("alloc", "grad_out", grad_out)]

    def input_bytes(self, backend=None):
        """What the inputs occupy in the caching allocator's blocks."""
        return sum(block_bytes(np.asarray(n, dtype=np.int64)) for n in self.input_sizes(backend))

    @classmethod
    def from_call(cls, call: AttentionCall) -> Calls:
        i = np.int64
        kind, window, documents = parse_mask(call.mask)
        structured = kind in STRUCTURED_MASKS
        return cls(B=i(call.batch), Hq=i(call.q_heads), Hk=i(call.kv_heads), D=i(call.head_dim), L=i(call.q_len),
                   S=i(call.kv_len), bits=i(DTYPE_BITS[call.dtype]),
                   bf16=np.bool_(call.dtype == "bfloat16"), causal=np.bool_(call.causal and not structured),
                   mask_bool=np.bool_(kind == "bool" or structured), mask_float=np.bool_(kind == "float"),
                   dropout=np.float64(call.dropout), grad=np.bool_(call.training), W=i(window), docs=i(documents),
                   scausal=np.bool_(call.causal and structured))


class Timeline:
    """Replays a backend's allocations and frees in order and keeps the running peak.

    Sizes are what the caching allocator counts (`block_bytes`); a size of 0 (a condition that does not
    hold for that row) allocates nothing. Works elementwise on arrays.
    """

    def __init__(self) -> None:
        self.live = np.int64(0)
        self.peak = np.int64(0)
        self.blocks: dict[str, np.ndarray] = {}
        self.marks: dict[str, np.ndarray] = {}
        self.events: list[tuple[str, str, np.ndarray]] = []  # (alloc, name, bytes) / (free, name, where)

    def mark(self, name: str) -> None:
        """Remember the live bytes now (e.g. what stays allocated after the forward)."""
        self.marks[name] = self.live

    def alloc(self, name: str, nbytes, when=True) -> None:
        requested = np.where(when, np.asarray(nbytes, dtype=np.int64), 0)
        size = block_bytes(requested)
        if name in self.blocks:
            raise KeyError(f"block {name!r} allocated twice")
        self.events.append(("alloc", name, requested))
        self.blocks[name] = size
        self.live = self.live + size
        self.peak = np.maximum(self.peak, self.live)

    def free(self, *names: str) -> None:
        for name in names:
            self.live = self.live - self.blocks.pop(name)
            self.events.append(("free", name, np.bool_(True)))

    def free_if(self, when, *names: str) -> None:
        """Free where `when` holds; elsewhere the block stays live (kept for backward, say)."""
        for name in names:
            size = self.blocks[name]
            self.live = self.live - np.where(when, size, 0)
            self.blocks[name] = np.where(when, 0, size)
            self.events.append(("free", name, np.asarray(when, dtype=bool)))

    def transient(self, name: str, nbytes, when=True) -> None:
        """Allocate and free at once: a workspace that lives only inside one kernel call."""
        self.alloc(name, nbytes, when)
        self.free(name)

    def events_for(self, row: int | None) -> list[tuple[str, str, int]]:
        """The alloc/free sequence of one call (`row` in a column set; None for a single call)."""
        def pick(value):
            value = np.asarray(value)
            return value.item() if value.ndim == 0 else value[row or 0].item()
        return [(op, name, int(pick(v)) if op == "alloc" else bool(pick(v))) for op, name, v in self.events]
