"""Workbooks recalculated by LibreOffice (headless), as a user's spreadsheet would show them: one profile
directory that recalculates every formula on load, and one `soffice --convert-to` run over any number of
workbooks. Used by tests/test_one_truth.py (via tests/agreement.py) and tests/test_ui_export.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import openpyxl

# LibreOffice's default for .xlsx is to trust the cached values; OOXMLRecalcMode 0 ("always") recalculates every
# formula on load (registry key org.openoffice.Office.Calc/Formula/Load, officecfg/registry/schema/org/openoffice/
# Office/Calc.xcs in the LibreOffice sources).
RECALC_ON_LOAD_XCU = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
    'xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
    '<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="OOXMLRecalcMode" oor:op="fuse">'
    '<value>0</value></prop></item></oor:items>')


def soffice() -> str | None:
    """The LibreOffice executable, or None where it is not installed."""
    return shutil.which("soffice") or shutil.which("libreoffice")


def profile_dir(root: Path) -> Path:
    """A fresh LibreOffice user profile under `root` that recalculates formulas on load."""
    profile = Path(root) / "profile"
    (profile / "user").mkdir(parents=True, exist_ok=True)
    (profile / "user" / "registrymodifications.xcu").write_text(RECALC_ON_LOAD_XCU)
    return profile


def recalculate(paths: list[Path], work_dir: Path, *, timeout_s: float | None = None) -> list:
    """Every workbook in `paths` recalculated by one headless LibreOffice run (one process, one profile under
    `work_dir`), read back as values (openpyxl, data_only), in the order given. The file names must differ."""
    paths = [Path(p) for p in paths]
    if len({p.name for p in paths}) != len(paths):
        raise ValueError("recalculate: the workbooks' file names must differ (they share one output folder)")
    work_dir = Path(work_dir)
    profile = profile_dir(work_dir)
    out_dir = work_dir / "recalculated"
    subprocess.run([soffice(), f"-env:UserInstallation=file://{profile}", "--headless", "--calc", "--convert-to",
                    "xlsx", "--outdir", str(out_dir), *map(str, paths)],
                   check=True, capture_output=True, timeout=timeout_s or 60 + 10 * len(paths))
    return [openpyxl.load_workbook(out_dir / p.name, data_only=True) for p in paths]
