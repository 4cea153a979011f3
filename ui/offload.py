"""Heavy work of one upload off the other sessions' path: run in a spawned worker process (its own interpreter, so
its CPU time does not hold the server's GIL that every other session's script needs; and at a lower priority),
one at a time per server, killed at a wall-clock limit, its address space capped.

Python threads share one GIL (https://docs.python.org/3/glossary.html#term-global-interpreter-lock): a page that
predicts thousands of rows in the server process slows every other session's re-run for as long as it runs.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable

from ui.text import one_line

WORKER_TIMEOUT_S = 90.0  # wall clock of one worker, start-up (imports) included
WORKER_MEMORY_BYTES = 2 << 30  # RLIMIT_AS of the worker: pandas and the estimator need a few hundred MiB
QUEUE_WAIT_S = 60.0  # a second large file waits this long for the worker slot, then is refused
_SLOT = threading.BoundedSemaphore(1)


def _child(conn, func: Callable, args: tuple, memory_bytes: int) -> None:
    import os
    import resource

    try:
        os.nice(10)
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (OSError, ValueError):  # pragma: no cover - a platform without them still runs, unbounded
        pass
    try:
        conn.send((True, func(*args)))
    except MemoryError:
        conn.send((False, f"the file needs more than {memory_bytes / 2**30:,.0f} GiB of memory to compare"))
    except Exception as exc:  # noqa: BLE001 - every failure comes back as one line for the page
        conn.send((False, one_line(exc)))
    finally:
        conn.close()


def run(func: Callable, *args, timeout_s: float = WORKER_TIMEOUT_S, memory_bytes: int = WORKER_MEMORY_BYTES,
        wait_s: float = QUEUE_WAIT_S):
    """func(*args) in a worker process; ValueError (one line) when it fails, runs past timeout_s (it is killed),
    or another worker holds the slot for more than wait_s. `func` must be importable (a module-level function)."""
    if not _SLOT.acquire(timeout=wait_s):
        raise ValueError("the server is comparing another large file; try again in a minute")
    proc = None
    try:
        ctx = multiprocessing.get_context("spawn")
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(send, func, args, memory_bytes), daemon=True)
        proc.start()
        send.close()
        if not receive.poll(timeout_s):
            raise ValueError(f"comparing this file took more than {timeout_s:,.0f} s and was stopped")
        try:
            ok, value = receive.recv()
        except EOFError:
            raise ValueError(f"the worker comparing this file stopped (exit code {proc.exitcode})") from None
        if not ok:
            raise ValueError(value)
        return value
    finally:
        if proc is not None:
            if proc.is_alive():
                proc.join(2)
            if proc.is_alive():
                proc.kill()
            proc.join()
        _SLOT.release()
