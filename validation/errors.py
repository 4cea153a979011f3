"""How validation reads a failure: whether it is an out-of-memory (a result, `oom`, never a crash: docs/contract.md
§1) and the one line of it that a row's `error`/`reason` column or a message shows.

Stdlib only at import time (the app's ui/ reads `first_line` without loading torch); `is_oom` imports torch when
it is asked, since only a process that ran torch can hold a torch error.
"""

from __future__ import annotations

# How an allocation failure reads: CUDA's caching allocator ("CUDA out of memory. Tried to allocate ..."), and the
# CPU's DefaultCPUAllocator ("can't allocate memory: you tried to allocate N bytes. Error code 12 (Cannot allocate
# memory)"): c10/cuda/CUDACachingAllocator.cpp and c10/core/impl/alloc_cpu.cpp in torch 2.11.
OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_oom(exc: BaseException) -> bool:
    """True for torch.cuda.OutOfMemoryError, MemoryError, or any error whose text reads as an allocation failure."""
    if isinstance(exc, MemoryError):
        return True
    import torch  # noqa: PLC0415 - see the module docstring

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return any(marker in text for marker in OOM_MARKERS)


def first_line(exc: BaseException | str, limit: int | None = None) -> str:
    """An error's first line (surrounding blank space dropped), or its type's name when it has no message; at most
    `limit` characters (None: all of it)."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if limit is None else text[:limit]


def typed_line(exc: BaseException, limit: int = 300) -> str:
    """`TypeName: first line`, at most `limit` characters: the reason column of a row whose run raised."""
    return f"{type(exc).__name__}: {first_line(exc, None)}"[:limit]
