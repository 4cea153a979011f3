"""PyTorch's profiler backend (Kineto, in libtorch_cpu of PyTorch 2.13) writes `USDT: ... profiler_start` /
`profiler_stop` and `STAGE: ...` lines straight to file descriptor 2 each time a profile starts or stops
(SyncActivityProfilerHandler.cpp); KINETO_LOG_LEVEL does not silence them. The CPU path of `validation run`
profiles every repetition, so they would flood the run's own messages. `filtered_stderr()` sends descriptor 2
through a pipe and passes every other line on at once."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

KINETO_PREFIXES = (b"USDT:", b"STAGE:")


def keep(line: bytes) -> bool:
    """False for Kineto's start/stop and stage lines, True for everything else."""
    return not line.lstrip().startswith(KINETO_PREFIXES)


@contextmanager
def filtered_stderr() -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump() -> None:
        with os.fdopen(read_end, "rb") as source:
            for line in source:
                if keep(line):
                    os.write(saved, line)

    thread = threading.Thread(target=pump, name="filtered-stderr", daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last write end closes: the pump drains it and stops
        thread.join(timeout=5)
        os.close(saved)
