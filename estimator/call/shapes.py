"""Column view of attention calls: the same formulas serve one call (numpy scalars) or a whole CSV
(numpy arrays, one element a row), so `predict` on 100k rows costs a few array passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from estimator.call import registry
from estimator.call.allocator import block_bytes
from estimator.call.config import DTYPE_BITS, STRUCTURED_MASKS, AttentionCall, parse_mask
from estimator.units import cdiv


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
    # v's width where it differs from q/k's (MLA); 0: the same as D. Read through `Dv`.
    Dv0: np.ndarray = np.int64(0)

    def take(self, index) -> Calls:
        """The calls at `index` (a bool mask or integer positions), as a new column set."""
        shape = np.shape(np.atleast_1d(self.B))
        return Calls(**{f: np.broadcast_to(np.atleast_1d(getattr(self, f)), shape)[index]
                        for f in self.__dataclass_fields__})

    @property
    def Dv(self):
        """Width of v, the output, dO and dV: Dv0, or D where that is 0."""
        return np.where(self.Dv0 > 0, self.Dv0, self.D)

    @property
    def value_differs(self):
        return self.Dv != self.D

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
        mask is the dense (batch, 1, q_len, kv_len) tensor, except where the backend's `mask_input` says otherwise
        (estimator/call/registry.py): flex gets a BlockMask: kv and q block counts and indices, partial and full
        (4 int32 (batch, q_blocks, kv_blocks) index tensors); flash-attn no tensor."""
        q = self.B * self.Hq * self.L * self.D * self.es
        kv = self.B * self.Hk * self.S * self.D * self.es
        v = self.B * self.Hk * self.S * self.Dv * self.es
        grad_out = self.B * self.Hq * self.L * self.Dv * self.es
        mask_elems = self.B * self.L * self.S
        mask = np.where(self.mask_bool, mask_elems, np.where(self.mask_float, mask_elems * self.es, 0))
        if backend is not None:
            blocks = self.B * cdiv(self.L, 128) * cdiv(self.S, 128)
            kind = registry.column(backend, lambda b: b.mask_input, "dense")
            mask = np.where(kind == "block_mask", 4 * 4 * blocks, mask)
            mask = np.where(kind == "none", 0, mask)  # flash-attn: window_size / cu_seqlens, no tensor
        return [q, kv, v, mask, np.where(self.grad, grad_out, 0)]

    def input_events(self, row: int = 0) -> list[tuple[str, str, int]]:
        """How validation/call/protocol.py's make_inputs allocates one call's inputs, in order: q, k, v, the mask
        (a bool mask is `rand(...) > p`, so an fp32 temporary of the mask's shape comes and goes first),
        grad_out. Near the limit, where that temporary's segment sits matters (estimator/call/allocator.py)."""
        q, k, v, mask, grad_out = (int(np.atleast_1d(n)[row]) for n in self.input_sizes())
        return self._input_events(q, k, v, mask, grad_out, bool(np.atleast_1d(self.mask_bool)[row]))

    def input_events_by_row(self, n: int) -> list[list[tuple[str, str, int]]]:
        """input_events(row) of rows 0..n-1 of a column set at once (the sizes computed once)."""
        sizes = [np.broadcast_to(np.asarray(s, dtype=np.int64), (n,)).tolist() for s in self.input_sizes()]
        bool_mask = np.broadcast_to(np.asarray(self.mask_bool, dtype=bool), (n,)).tolist()
        return [self._input_events(*row) for row in zip(*sizes, bool_mask, strict=True)]

    @staticmethod
    def _input_events(q: int, k: int, v: int, mask: int, grad_out: int, bool_mask: bool) -> list:
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
                   scausal=np.bool_(call.causal and structured),
                   Dv0=i(call.v_head_dim or 0))
