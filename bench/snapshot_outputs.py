"""Write every user-visible output of the estimator into one folder, so two commits can be compared with `diff -r`.

    python bench/snapshot_outputs.py OUT_DIR [--quick]

What it writes (one file per output):
- `predict/<set>.csv`: `python -m estimator predict` on every committed `validation/data/h200_*.csv` call set;
- `plan/<model>-<mode>-<gpu>[-variant].json`: `plan --json` for every preset and every `tests/data/*.config.json`
  in inference and training on an H200 and an RTX 4090, plus tensor/context-parallel and ZeRO variants;
- `advise/<model>-<scenario>.json`: `advise --json` in three scenarios per preset;
- `report/<set>.txt`: `python -m validation.model_report` over every whole-model set.

A refactor that changes no behaviour leaves the folder byte-identical (`diff -r BEFORE AFTER` prints nothing).
`--quick` keeps one predict set and the first four presets (a smoke check for the development loop).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _run(argv: list[str]) -> str:
    """One estimator command in this process; its stdout (and its exit status, when not 0)."""
    from estimator.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code
    text = out.getvalue()
    if code:
        text += f"\n[exit {code}] {err.getvalue()}"
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parts", default="predict,plan,advise,report", help="comma-separated subset to write")
    args = ap.parse_args(argv)
    from estimator.model.presets import PRESETS

    out: Path = args.out.resolve()
    os.chdir(ROOT)  # every path below is relative to the checkout, so two checkouts write the same bytes
    for sub in ("predict", "plan", "advise", "report"):
        (out / sub).mkdir(parents=True, exist_ok=True)

    call_sets = sorted(p for p in (ROOT / "validation/data").glob("h200_*.csv") if "_hf_" not in p.name)
    call_sets = [p for p in call_sets if "q_len" in p.read_text().split("\n", 1)[0].split(",")]
    parts = set(args.parts.split(","))
    if args.quick:
        call_sets = call_sets[:1]
    if "predict" not in parts:
        call_sets = []
    for path in call_sets:
        dest = out / "predict" / path.name
        text = _run(["predict", str(path.relative_to(ROOT)), "-o", str(dest), "--gpu", "h200"])
        if text:
            (out / "predict" / f"{path.stem}.stdout").write_text(text)

    presets = list(PRESETS)[:4] if args.quick else list(PRESETS)
    if not parts & {"plan", "advise"}:
        presets = []
    models = [("preset", p) for p in presets]
    if not args.quick and parts & {"plan", "advise"}:
        models += [("config", str(p.relative_to(ROOT))) for p in sorted((ROOT / "tests/data").glob("*.config.json"))]
    for kind, name in models:
        label = name if kind == "preset" else Path(name).name.removesuffix(".config.json") + "-cfg"
        model = ["--preset", name] if kind == "preset" else ["--config", name]
        for mode in ("inference", "training"):
            for gpu in ("h200", "rtx-4090"):
                text = _run(["plan", *model, "--mode", mode, "--gpu", gpu, "--seq-len", "8192", "--json"])
                (out / "plan" / f"{label}-{mode}-{gpu}.json").write_text(text)
        if kind == "preset":
            for variant, extra in (("tp2", ["--gpus", "2", "--tp", "2"]), ("cp2", ["--gpus", "2", "--cp", "2"]),
                                   ("zero3", ["--gpus", "8", "--zero", "3"])):
                text = _run(["plan", *model, "--mode", "training", "--gpu", "h100-sxm", "--seq-len", "16384",
                             *extra, "--json"])
                (out / "plan" / f"{label}-training-{variant}.json").write_text(text)
            for scenario, extra in (("infer-long", ["--mode", "inference", "--seq-len", "131072", "--gpu", "l4"]),
                                    ("train", ["--mode", "training", "--seq-len", "8192", "--gpu", "h100-sxm"]),
                                    ("math", ["--mode", "inference", "--seq-len", "32768", "--backend", "math",
                                              "--gpu", "a100-40gb"])):
                text = _run(["advise", *model, *extra, "--json"])
                (out / "advise" / f"{label}-{scenario}.json").write_text(text)

    if not args.quick and "report" in parts:
        for path in sorted((ROOT / "validation/data").glob("h200_hf_*.csv")):
            cmd = [sys.executable, "-m", "validation.model_report", str(path.relative_to(ROOT))]
            res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
            (out / "report" / f"{path.stem}.txt").write_text(res.stdout + (f"\n[exit {res.returncode}]"
                                                                           if res.returncode else ""))
    print(f"wrote {sum(1 for _ in out.rglob('*') if _.is_file())} files under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
