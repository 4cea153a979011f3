"""Every repository path that the docs (`*.md`) and the code's docstrings and comments name exists.

A path is a token such as `estimator/call/memory.py` or `validation/data/h200_heldout.csv`: one of the project's
top folders, then a file ending in .py, .md, .csv or .json. Docstrings are read with `ast`, comments with
`tokenize`: nothing is imported or run.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a file that a documented command writes (`--out validation/data/NEW.csv`) need not exist yet
OUTPUT_FLAG = re.compile(r"(?:--out|--md|--csv|-o|>)\s*$")
PATH = re.compile(r"(?<![\w/.-])((?:estimator|validation|ui|pages|tests|bench|docs)/[\w/.-]+\.(?:py|md|csv|json))\b")


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines() if line and (ROOT / line).is_file()]


def python_texts(source: str) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment of a Python source."""
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found.append((first.lineno, first.value.value))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            found.append((tok.start[0], tok.string))
    return found


def named_paths(path: Path) -> list[tuple[int, str]]:
    """(line, repository path) for each path token that `path` names in its docs, docstrings or comments."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".md":
        chunks = [(1, text)]
    else:
        chunks = python_texts(text)
    found = []
    for start, chunk in chunks:
        for match in PATH.finditer(chunk):
            if OUTPUT_FLAG.search(chunk, 0, match.start()):
                continue
            token = match.group(1).rstrip(".")
            found.append((start + chunk.count("\n", 0, match.start()), token))
    return found


def stale_paths(files: list[Path], root: Path = ROOT) -> list[str]:
    """`file:line: path` for every named path that does not exist under `root`."""
    bad = []
    for path in files:
        if path.suffix not in (".py", ".md"):
            continue
        for line, token in named_paths(path):
            if not (root / token).exists():
                bad.append(f"{path.relative_to(root)}:{line}: {token}")
    return bad


def test_every_named_repository_path_exists():
    bad = stale_paths(tracked_files())
    assert not bad, f"{len(bad)} named paths do not exist:\n" + "\n".join(bad)


def test_the_scan_finds_a_stale_path_in_a_docstring_a_comment_and_a_doc(tmp_path):
    (tmp_path / "estimator").mkdir()
    (tmp_path / "estimator" / "real.py").write_text('"""See estimator/real.py and estimator/gone.py."""\n'
                                                    "x = 'estimator/also_gone.py'  # not a comment path\n"
                                                    "# but this is: validation/none.csv\n")
    (tmp_path / "a.md").write_text("one\ntwo docs/missing.md and estimator/real.py\n"
                                   "`run --out validation/new.csv` writes a file that need not exist yet\n")
    found = stale_paths([tmp_path / "estimator" / "real.py", tmp_path / "a.md"], tmp_path)
    assert found == ["estimator/real.py:1: estimator/gone.py", "estimator/real.py:3: validation/none.csv",
                     "a.md:2: docs/missing.md"]
