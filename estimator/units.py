"""Byte units, the one bytes -> GiB text formatter (GiB = 2**30, MiB = 2**20) and integer rounding (`cdiv`,
`round_up`, elementwise on numpy columns too), beneath every other module."""

from __future__ import annotations

MIB = 2**20
GIB = 2**30


def gib(n_bytes: int | float | None, *, missing: str = "n/a", mib_below_1gib: bool = True,
        grouping: bool = True) -> str:
    """Bytes as '1,234.56 GiB' text ('1234.56 GiB' with grouping=False); '512.0 MiB' below 1 GiB (unless
    mib_below_1gib=False); `missing` for None."""
    if n_bytes is None:
        return missing
    comma = "," if grouping else ""
    if mib_below_1gib and abs(n_bytes) < GIB:
        return f"{n_bytes / MIB:{comma}.1f} MiB"
    return f"{n_bytes / GIB:{comma}.2f} GiB"


def round_up(x, multiple):
    """Smallest multiple of `multiple` that is >= x (elementwise)."""
    return (x + multiple - 1) // multiple * multiple


def cdiv(a, b):
    """ceil(a / b) for positive integers (elementwise)."""
    return (a + b - 1) // b
