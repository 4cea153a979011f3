"""Imports run one way, read from the source (AST, nothing executed): no import circle between the modules of
estimator/, validation/ and ui/, and no import that runs upward.

Packages: pages -> ui -> validation -> estimator. Inside estimator: cli -> advice -> model -> call -> hardware ->
units (each room may import the rooms below it, never one above). Imports inside functions count too: a lazy
import still ties the two modules together."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("estimator", "validation", "ui")
PACKAGE_RANK = {"estimator": 0, "validation": 1, "ui": 2, "pages": 3}
ESTIMATOR_RANK = {"units": 0, "hardware": 1, "call": 2, "model": 3, "advice": 4, "cli": 5}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The project modules `path` imports (`from a import b` is a.b when that is a module, else a)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] in PACKAGE_RANK:
                found.add(target)
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    modules = all_modules()
    known = set(modules) | {module_name(p) for p in (ROOT / "pages").rglob("*.py")}
    return {name: imports_of(path, known) for name, path in modules.items()}


def estimator_room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "estimator" or len(parts) < 2 or parts[1] in ("__main__",):
        return None
    return parts[1]


def test_no_import_runs_upward():
    upward = []
    for module, targets in graph().items():
        for target in targets:
            if PACKAGE_RANK[target.split(".")[0]] > PACKAGE_RANK[module.split(".")[0]]:
                upward.append(f"{module} -> {target}")
                continue
            mine, theirs = estimator_room(module), estimator_room(target)
            if mine in ESTIMATOR_RANK and theirs in ESTIMATOR_RANK and ESTIMATOR_RANK[theirs] > ESTIMATOR_RANK[mine]:
                upward.append(f"{module} -> {target}")
    assert not upward, "imports that run upward:\n" + "\n".join(sorted(upward))


def test_no_import_circle():
    edges = {m: {t for t in ts if t.split(".")[0] in PACKAGES} for m, ts in graph().items()}
    # package __init__ modules that only re-export their rooms are the top of their package, not a node in it
    edges = {m: {t for t in ts if t in edges and not _reexports(t)} for m, ts in edges.items() if not _reexports(m)}
    index, low, on_stack, stack, circles, counter = {}, {}, set(), [], [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def _reexports(module: str) -> bool:
    return module in PACKAGES or module == "estimator.__main__"


def test_the_walker_sees_lazy_and_relative_imports(tmp_path):
    mod = ROOT / "validation" / "cli.py"
    assert "validation.call.case_lists" in imports_of(mod, set(all_modules()))  # imported inside a function
