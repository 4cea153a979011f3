"""Heavy work of one upload off the other sessions' path: run in a spawned worker process (its own interpreter, so
its CPU time does not hold the server's GIL that every other session's script needs; and at a lower priority),
one at a time per server, killed at a wall-clock limit, its address space capped.

Python threads share one GIL (https://docs.python.org/3/glossary.html#term-global-interpreter-lock): a page that
predicts thousands of rows in the server process slows every other session's re-run for as long as it runs.
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from ui.text import one_line

WORKER_TIMEOUT_S = 90.0  # wall clock of one worker, start-up (imports) included
WORKER_MEMORY_BYTES = 2 << 30  # RLIMIT_AS of the worker: pandas and the estimator need a few hundred MiB
QUEUE_WAIT_S = 60.0  # a second large file waits this long for the worker slot, then is refused
_SLOT = threading.BoundedSemaphore(1)
_ROOT = Path(__file__).resolve().parents[1]


def _worker_main() -> None:
    """`python -m ui.offload`: read (module, name, args, memory) pickled on stdin, write (ok, value) on stdout."""
    import resource

    module, name, args, memory_bytes = pickle.load(sys.stdin.buffer)
    try:
        os.nice(10)
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (OSError, ValueError):  # pragma: no cover - a platform without them still runs, unbounded
        pass
    try:
        answer = (True, getattr(importlib.import_module(module), name)(*args))
    except MemoryError:
        answer = (False, f"the file needs more than {memory_bytes / 2**30:,.0f} GiB of memory to compare")
    except Exception as exc:  # noqa: BLE001 - every failure comes back as one line for the page
        answer = (False, one_line(exc))
    pickle.dump(answer, sys.stdout.buffer)
    sys.stdout.buffer.flush()


def run(func: Callable, *args, timeout_s: float = WORKER_TIMEOUT_S, memory_bytes: int = WORKER_MEMORY_BYTES,
        wait_s: float = QUEUE_WAIT_S):
    """func(*args) in a worker process (`python -m ui.offload`, its own interpreter: the server's other threads and
    the streamlit module are not copied into it); ValueError (one line) when it fails, runs past timeout_s (it is
    killed), or another worker holds the slot for more than wait_s. `func` must be a module-level function; its
    arguments and answer travel pickled between this process and its own child."""
    if not _SLOT.acquire(timeout=wait_s):
        raise ValueError("the server is comparing another large file; try again in a minute")
    try:
        payload = pickle.dumps((func.__module__, func.__qualname__, args, memory_bytes))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))}
        proc = subprocess.Popen([sys.executable, "-m", "ui.offload"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, cwd=_ROOT, env=env)
        try:
            out, _ = proc.communicate(payload, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise ValueError(f"comparing this file took more than {timeout_s:,.0f} s and was stopped") from None
        try:
            ok, value = pickle.loads(out)
        except (pickle.UnpicklingError, EOFError, ValueError):
            raise ValueError(f"the worker comparing this file stopped (exit code {proc.returncode})") from None
        if not ok:
            raise ValueError(value)
        return value
    finally:
        _SLOT.release()


if __name__ == "__main__":
    _worker_main()
