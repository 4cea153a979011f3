"""Writing the files the command lines are asked for: every output goes to a temporary file in the same folder
and is renamed over the target only when it is complete (`atomic_output`), so a failed write - a full disk, a
bad row, an interrupt - leaves the earlier file as it was and no partial one; and an output that is one of the
command's own inputs (the same file, also through a link) is refused before anything is opened
(`refuse_same_file`). Errors are ValueError with one line naming the flag and the file.

The rename is `os.replace`, atomic on POSIX within one file system (the temporary sits in the target's folder
for that reason: https://docs.python.org/3/library/os.html#os.replace). A target that exists and is not a
regular file (`/dev/null`, `/dev/full`, a named pipe) cannot be replaced by a rename and is written in place.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path


def refuse_same_file(output, inputs, out_flag: str) -> None:
    """ValueError when `output` is the same file as one of `inputs` (os.path.samefile: a hard or symbolic link
    to it counts); inputs that do not exist are skipped, and so is an output that is no regular file (a terminal
    or /dev/null may well be an input's device too)."""
    if output is None or not os.path.isfile(output):
        return
    for item in inputs:
        if item is None:
            continue
        try:
            same = os.path.samefile(output, item)
        except OSError:
            continue
        if same:
            raise ValueError(f"{out_flag} {output}: is the input file {item}; writing it would destroy the input "
                             "(give another output name)")


def write_error(out_flag: str, path, exc: OSError) -> ValueError:
    """The one-line error of a failed write, naming the flag, the file and the cause."""
    why = exc.strerror or (str(exc).splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, IsADirectoryError) or (exc.errno == errno.EISDIR):
        why = "is a folder; give a file name"
    elif isinstance(exc, FileNotFoundError):
        why = "the folder does not exist"
    return ValueError(f"{out_flag} {path}: cannot write ({why})")


def _special(path: str) -> bool:
    """The path exists and is not a regular file (a device or a pipe): it is written in place."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _umask() -> int:
    """The process's umask: from /proc on Linux (reading it with os.umask means setting it, which races with
    other threads), else by os.umask."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def _new_file_mode(target: str) -> int:
    try:
        return stat.S_IMODE(os.stat(target).st_mode)  # keep an existing file's permissions
    except OSError:
        return 0o666 & ~_umask()  # what open() would have created


@contextlib.contextmanager
def atomic_output(path, out_flag: str, mode: str = "w", *, encoding: str | None = "utf-8",
                  newline: str | None = None) -> Iterator:
    """A file object for `path` ("w" text or "wb" bytes) that writes a temporary file beside it and renames it
    over `path` when the block ends without an exception; on any exception the temporary is removed, `path` is
    untouched and the exception goes on (OSError as ValueError(write_error)). A symbolic link is followed (its
    target is replaced, the link stays)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_output: mode {mode!r} is not w or wb")  # pragma: no cover - programming error
    text_args = {} if mode == "wb" else {"encoding": encoding, "newline": newline}
    target = os.path.realpath(os.fspath(path))
    if os.path.isdir(target):
        raise ValueError(f"{out_flag} {path}: cannot write (is a folder; give a file name)")
    if os.path.exists(target) and not os.access(target, os.W_OK):  # a rename would bypass the file's mode
        raise ValueError(f"{out_flag} {path}: cannot write (Permission denied)")
    if _special(target):
        try:
            with open(target, mode, **text_args) as fh:
                yield fh
        except OSError as exc:
            raise write_error(out_flag, path, exc) from None
        return
    folder = os.path.dirname(target)
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    except OSError as exc:
        raise write_error(out_flag, path, exc) from None
    try:
        with os.fdopen(fd, mode, **text_args) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _new_file_mode(target))
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        raise write_error(out_flag, path, exc) from None
    except BaseException:
        _remove(tmp)
        raise


def write_atomic(path, data: bytes | str, out_flag: str) -> None:
    """The whole of `data` to `path` through atomic_output."""
    with atomic_output(path, out_flag, "wb" if isinstance(data, bytes) else "w") as fh:
        fh.write(data)


def _remove(tmp: str) -> None:
    with contextlib.suppress(OSError):
        Path(tmp).unlink()


def strict_json(obj, where: str, **dumps_kwargs) -> str:
    """json.dumps with allow_nan=False, so the text is always valid JSON (RFC 8259 has no NaN or Infinity);
    ValueError naming the first non-finite field otherwise."""
    try:
        return json.dumps(obj, allow_nan=False, **dumps_kwargs)
    except ValueError:
        bad = _non_finite(obj, "")
        raise ValueError(f"{where}: {bad or 'a value'} is not a finite number; no JSON written") from None


def _non_finite(obj, at: str) -> str | None:
    if isinstance(obj, float) and not math.isfinite(obj):
        return f"{at or 'the value'} ({obj!r})"
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for key, value in items:
        found = _non_finite(value, f"{at}.{key}" if isinstance(key, str) else f"{at}[{key}]")
        if found:
            return found.lstrip(".")
    return None
