"""hf-cb's pool against what transformers continuous batching chose on the H200, run by run: the runs of the
HELD-OUT sets measured each in a fresh process (validation/serving/cases/h200_heldout.txt, h200_heldout2.txt,
h200_heldout4.txt; validation/data/h200_serve_<set>_summary.csv) re-planned with the same model config, knobs and
workload. The engine sizes its cache from the device's free memory after loading, which the plan takes as capacity
- the memory outside PyTorch at that point (estimator/serve/memory.py HF_CB_CONTEXT_AT_SIZING_BYTES) - what the
caching allocator reserves for the weights (serve/weights.py): num_blocks and max_batch_tokens must come out
exact; the peak allocated memory (the planned peak without the CUDA context) within 3% of
torch.cuda.max_memory_allocated."""

from __future__ import annotations

import argparse
import csv
import json
import shlex
from pathlib import Path

import pytest

from estimator.cli.serve import build_parser, inputs_from_serve_args
from estimator.serve.capacity import prepare

ROOT = Path(__file__).resolve().parents[1]
SETS = ("heldout", "heldout2", "heldout4")  # the sets whose every run had a fresh process


def _case(name: str) -> Path:
    return ROOT / "validation" / "serving" / "cases" / f"h200_{name}.txt"


def _summary(name: str) -> Path:
    return ROOT / "validation" / "data" / f"h200_serve_{name}_summary.csv"


def _measured_rows() -> dict:
    rows = {}
    for name in SETS:
        if _summary(name).exists():
            rows.update({r["run"]: r for r in csv.DictReader(_summary(name).open()) if r["status"] == "ok"})
    return rows


MEASURED = _measured_rows()

pytestmark = pytest.mark.skipif(not MEASURED, reason="no H200 held-out serving runs")


def cases() -> list[tuple[str, str]]:
    """(run id, case line) of every measured run of SETS."""
    from validation.serving.cli import read_case_lines

    out = []
    for name in SETS:
        if not _case(name).exists():
            continue
        for line in read_case_lines(str(_case(name))):
            words = shlex.split(line)
            run_id = words[words.index("--run-id") + 1]
            if run_id in MEASURED:
                out.append((run_id, line))
    return out


def measured(run_id: str) -> dict:
    assert run_id in MEASURED, run_id
    return MEASURED[run_id]


def test_every_fresh_process_set_is_read():
    assert len(cases()) == 17  # 7 + 4 + 6 measured runs


def serve_inputs(line: str, tmp_path):
    from validation.model.hf_configs import family_config
    from validation.serving.cli import add_arguments
    from validation.serving.predict import serve_flags

    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    args = parser.parse_args(shlex.split(line) + ["--out", str(tmp_path / "out.csv")])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(family_config(args.family, args.layers, args.overrides, args.tiny)))
    return inputs_from_serve_args(build_parser().parse_args(serve_flags(args, str(path), "h200")))


@pytest.mark.parametrize("run_id, line", cases(), ids=lambda x: x if " " not in x else "")
def test_hf_cb_pool_as_the_engine_chose_it(run_id, line, tmp_path):
    _, memory, _ = prepare(serve_inputs(line, tmp_path))
    row = measured(run_id)
    assert (memory.num_blocks, memory.max_batch_tokens) == (int(row["num_blocks"]), int(row["max_batch_tokens"]))


@pytest.mark.parametrize("run_id, line", cases(), ids=lambda x: x if " " not in x else "")
def test_hf_cb_peak_allocated_within_3_percent(run_id, line, tmp_path):
    """The run's planned peak without the CUDA context against torch.cuda.max_memory_allocated of the run."""
    from estimator.serve.capacity import serve

    planned = serve(serve_inputs(line, tmp_path)).to_dict()["peak_allocated_bytes"]
    assert planned / int(measured(run_id)["peak_allocated_bytes"]) - 1 == pytest.approx(0, abs=0.03)
