"""The one-attention-call config and the element sizes it uses.

Element sizes are kept in bits so that 4-bit KV caches stay exact (style rule 3).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from estimator.call.registry import BACKENDS

DTYPE_BITS: dict[str, int] = {"float16": 16, "bfloat16": 16, "float32": 32}
# KV-cache storage types for plans (a superset: 8- and 4-bit quantised caches).
KV_DTYPE_BITS: dict[str, int] = {**DTYPE_BITS, "float8": 8, "int8": 8, "int4": 4}
DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "float": "float32"}

MASKS = ("none", "bool", "float")  # dense masks; structured masks are spelled window:W and document:K
STRUCTURED_MASKS = ("window", "document")
MODES = ("forward", "forward_backward")

# Sizes past these are not attention calls anyone can run on one device; they are typos.
MAX_SEQ_LEN = 1 << 24  # 16.7 M tokens
MAX_DIM = 1 << 16
# Largest value each integer field takes (anything larger is a typo, not a workload).
SIZE_LIMITS = {"batch": 1 << 20, "q_heads": 1 << 16, "kv_heads": 1 << 16, "head_dim": MAX_DIM,
               "q_len": MAX_SEQ_LEN, "kv_len": MAX_SEQ_LEN}
MAX_ELEMENTS = 1 << 56  # one tensor of more elements is no workload (and would overflow int64 byte counts)


def normalize_dtype(value: str, *, field: str = "dtype", allowed: dict[str, int] = DTYPE_BITS) -> str:
    """Canonical dtype name, accepting `torch.bfloat16`, `bf16` and the like; ValueError otherwise."""
    name = str(value).strip().lower().removeprefix("torch.")
    name = DTYPE_ALIASES.get(name, name)
    if name not in allowed:
        raise ValueError(f"{field}: unknown dtype {value!r}; expected one of {', '.join(allowed)}")
    return name


def parse_mask(value) -> tuple[str, int, int]:
    """A mask cell -> (kind, window, documents). `none`, `bool`, `float`: a dense (batch, 1, q_len, kv_len) mask
    tensor (or none). `window:W`: a sliding window of W keys (with causal=1, query i sees keys i-W+1..i);
    `document:K`: K packed documents of equal length, attention only inside each (with causal=1, causal within
    it). SDPA and eager get these as the dense bool mask they imply; flex builds a BlockMask and computes only
    the blocks it keeps."""
    text = str(value).strip().lower()
    if text in MASKS:
        return text, 0, 1
    kind, sep, number = text.partition(":")
    if sep and kind in STRUCTURED_MASKS:
        try:
            count = int(number)
        except ValueError:
            count = 0
        if 1 <= count <= MAX_SEQ_LEN:
            return kind, (count if kind == "window" else 0), (count if kind == "document" else 1)
    raise ValueError(f"mask: unknown value {value!r}; expected none, bool, float, window:W or document:K "
                     "(W, K positive integers)")


def element_bytes(dtype: str) -> int:
    """Bytes per element of a float dtype (float16/bfloat16 2, float32 4)."""
    return DTYPE_BITS[dtype] // 8


def optional_float(field: str, value, expected: str = "a number") -> float | None:
    """None stays None; anything else must read as a float (ValueError naming the field otherwise)."""
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{field}: expected {expected}, got {value!r}") from None


def check_positive_int(field: str, value, maximum: int) -> int:
    """Return value as int if it is a whole number in [1, maximum]; ValueError naming the field otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected a positive integer, got {value!r}")
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{field}: expected a positive integer, got {value!r}") from None
    if as_float != as_float or not as_float.is_integer():
        raise ValueError(f"{field}: expected a positive integer, got {value!r}")
    number = int(as_float)
    if number < 1:
        raise ValueError(f"{field}: must be at least 1, got {number}")
    if number > maximum:
        raise ValueError(f"{field}: {number} is absurdly large (limit {maximum:,})")
    return number


def parse_bool(field: str, value) -> bool:
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "y", "t"):
        return True
    if text in ("0", "false", "no", "n", "f", ""):
        return False
    raise ValueError(f"{field}: expected 0 or 1, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class AttentionCall:
    """One `scaled_dot_product_attention` call: q (batch, q_heads, q_len, head_dim),
    k and v (batch, kv_heads, kv_len, head_dim), as docs/contract.md §1 lays them out. `v_head_dim` is v's (and
    the output's) width where it differs from q's and k's (DeepSeek's latent attention: q/k 192, v 128); None: the
    same as head_dim. It is no CSV column (contract §2): the model layer sets it."""

    batch: int
    q_heads: int
    kv_heads: int
    head_dim: int
    q_len: int
    kv_len: int
    dtype: str = "bfloat16"
    causal: bool = False
    mask: str = "none"  # none | bool | float (a dense (batch, 1, q_len, kv_len) mask) | window:W | document:K
    dropout: float = 0.0
    mode: str = "forward"  # forward (no grad) | forward_backward (the call, then out.backward)
    backend: str = "auto"
    v_head_dim: int | None = None

    def __post_init__(self) -> None:
        for field, limit in SIZE_LIMITS.items():
            object.__setattr__(self, field, check_positive_int(field, getattr(self, field), limit))
        if self.v_head_dim is not None:
            object.__setattr__(self, "v_head_dim", check_positive_int("v_head_dim", self.v_head_dim, MAX_DIM))
        if self.batch * self.q_heads * self.q_len * self.kv_len > MAX_ELEMENTS:
            raise ValueError("q_len: batch·q_heads·q_len·kv_len is absurdly large (over 2**56 score elements)")
        if self.batch * self.q_heads * max(self.q_len, self.kv_len) * self.head_dim > MAX_ELEMENTS:
            raise ValueError("head_dim: batch·q_heads·seq·head_dim is absurdly large (over 2**56 elements)")
        if self.q_heads % self.kv_heads:
            raise ValueError(f"kv_heads: q_heads ({self.q_heads}) must be divisible by kv_heads ({self.kv_heads})")
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        if not isinstance(self.causal, bool):
            object.__setattr__(self, "causal", parse_bool("causal", self.causal))
        kind, window, documents = parse_mask(self.mask)
        object.__setattr__(self, "mask", kind if kind in MASKS else f"{kind}:{max(window, documents)}")
        for field, allowed in (("mode", MODES), ("backend", BACKENDS)):
            value = str(getattr(self, field)).strip().lower()
            if value not in allowed:
                raise ValueError(f"{field}: unknown value {getattr(self, field)!r}; "
                                 f"expected one of {', '.join(allowed)}")
            object.__setattr__(self, field, value)
        try:
            dropout = float(self.dropout)
        except (TypeError, ValueError):
            raise ValueError(f"dropout: expected a probability in [0, 1), got {self.dropout!r}") from None
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {self.dropout!r}")
        object.__setattr__(self, "dropout", dropout)

    @property
    def value_dim(self) -> int:
        """v's width: v_head_dim, or head_dim when not given."""
        return self.v_head_dim or self.head_dim

    @property
    def element_bits(self) -> int:
        return DTYPE_BITS[self.dtype]

    @property
    def training(self) -> bool:
        return self.mode == "forward_backward"


# A call's columns in contract §2 order (backend, dtype, then the fields as AttentionCall declares them): the CSV
# columns of predict, of validation and of the app's exports, derived here so that they cannot drift apart.
# v_head_dim is set by the model layer and is no column (contract §2 keeps its column set).
CALL_COLUMNS = ("backend", "dtype", *(f.name for f in fields(AttentionCall)
                                      if f.name not in ("backend", "dtype", "v_head_dim")))
