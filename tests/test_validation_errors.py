"""validation/errors.py: the one out-of-memory rule and the one-line reason, as every runner uses them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from validation.errors import first_line, is_oom, typed_line

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("exc", [
    torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    MemoryError(),
    RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.11 GiB total capacity)"),
    RuntimeError("[enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: can't allocate memory: you tried "
                 "to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)"),
])
def test_allocation_failures_are_oom(exc):
    assert is_oom(exc)


@pytest.mark.parametrize("exc", [RuntimeError("No available kernel. Aborting execution."), ValueError("bad dtype"),
                                 RuntimeError("")])
def test_other_errors_are_not_oom(exc):
    assert not is_oom(exc)


def test_first_line_is_the_first_line_or_the_type_and_respects_the_limit():
    assert first_line(RuntimeError("\n  first\nsecond")) == "first"
    assert first_line(KeyError()) == "KeyError"
    assert first_line(ValueError("x" * 500), 200) == "x" * 200
    assert first_line(ValueError("x" * 500)) == "x" * 500
    assert first_line("plain text\nmore") == "plain text"


def test_typed_line_prefixes_the_type_and_cuts_the_whole_line():
    assert typed_line(ValueError("bad\nrest")) == "ValueError: bad"
    assert typed_line(RuntimeError()) == "RuntimeError: RuntimeError"
    assert len(typed_line(ValueError("y" * 999))) == 300
    assert typed_line(ValueError("y" * 999), 200) == ("ValueError: " + "y" * 999)[:200]


def _defines_a_copy(path: Path) -> list[str]:
    """Functions outside errors.py that re-derive an error's first line or an OOM rule."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef):
            body = ast.unparse(node)
            if "splitlines()" in body and "str(e" in body or "'out of memory' in" in body:  # unparse quotes with '
                found.append(f"{path.relative_to(ROOT)}: {node.name}")
    return found


def test_no_other_module_keeps_its_own_copy():
    copies = [c for pkg in ("validation", "ui") for p in sorted((ROOT / pkg).rglob("*.py"))
              if p.name != "errors.py" for c in _defines_a_copy(p)]
    assert not copies, copies
