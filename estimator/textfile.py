"""Reading the files the command lines are given, with limits checked before anything is parsed: a size cap
(a config, a trace or a run's output can be `/dev/zero` or a multi-GB typo) and, for JSON, a nesting-depth cap
(Python's parser recurses per level). Errors are ValueError with one line that names the file."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from contextlib import contextmanager
from pathlib import Path

from estimator.units import MIB

MAX_CONFIG_BYTES = 4 * MIB  # Hugging Face config.json files are a few kB
MAX_META_BYTES = 1 * MIB  # a validation run's .meta.json
MAX_TRACE_BYTES = 256 * MIB  # ~30 M requests of one length per line
MAX_TABLE_BYTES = 256 * MIB  # a validation run's CSV (read whole by the report)
MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def read_bytes_limited(path, max_bytes: int, source: str) -> bytes:
    """The file's bytes; ValueError when it is missing, unreadable, a folder, not a regular file, or larger than
    max_bytes (opened as open_regular does; at most max_bytes + 1 bytes are read)."""
    with open_regular(path, source) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{source}: {Path(path)} is larger than {max_bytes:,} bytes; not a {source} file")
    return data


@contextmanager
def open_regular(path, source: str):
    """The file opened for binary reading, once it is known to be a regular file: ValueError (one line naming
    `source` and the file) when it is missing, unreadable, a folder or not a regular file (a named pipe would
    block the reader for good, a device such as /dev/zero never ends). It is opened without blocking and checked
    with fstat before a byte is read; an OSError while reading becomes the same one-line ValueError."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ValueError(f"{source}: file not found: {path}") from None
    except IsADirectoryError:
        raise ValueError(f"{source}: {path} is a folder, not a file") from None
    except OSError as exc:
        raise ValueError(f"{source}: cannot read {path}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ValueError(f"{source}: {path} is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise ValueError(f"{source}: {path} is not a regular file (a pipe, device or socket); give a file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        with open(fd, "rb", closefd=False) as fh:
            yield fh
    except OSError as exc:
        raise ValueError(f"{source}: cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_text_limited(path, max_bytes: int, source: str, encoding: str = "utf-8-sig") -> str:
    data = read_bytes_limited(path, max_bytes, source)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{source}: {Path(path)} is not UTF-8 text (byte {exc.start})") from None


def json_depth(text: str) -> int:
    """Deepest nesting of [ and { outside strings (a scan, no recursion)."""
    depth = deepest = 0
    for ch in _JSON_STRING.sub("", text):
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_json_limited(text: str, source: str, max_depth: int = MAX_JSON_DEPTH):
    """json.loads after a depth check; ValueError (one line) for invalid or too deeply nested JSON."""
    if json_depth(text) > max_depth:
        raise ValueError(f"{source}: JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError:  # an integer past Python's int_max_str_digits (4,300 digits by default)
        raise ValueError(f"{source}: holds an integer too long to be a number ({sys.get_int_max_str_digits():,} "
                         "digits at most)") from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise ValueError(f"{source}: JSON nested too deeply") from None


def read_json_limited(path, max_bytes: int, source: str, max_depth: int = MAX_JSON_DEPTH):
    return parse_json_limited(read_text_limited(path, max_bytes, source), f"{source} {Path(path)}", max_depth)
