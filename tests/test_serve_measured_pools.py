"""hf-cb's pool against what transformers continuous batching chose on the H200, run by run: the HELD-OUT runs of
validation/serving/cases/h200_heldout.txt (validation/data/h200_serve_heldout_summary.csv, each run in a fresh
process) re-planned with the same model config, knobs and workload. The engine sizes its cache from the device's
free memory after loading, which the plan takes as capacity - CUDA context - what the caching allocator reserves
for the weights (estimator/serve/memory.py weights_allocator_bytes): num_blocks must come out exact, and
max_batch_tokens exact or, where it is solved from fixed blocks, within 0.01%; the peak allocated memory (the
planned peak without the CUDA context) within 3% of torch.cuda.max_memory_allocated."""

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
CASES = ROOT / "validation" / "serving" / "cases" / "h200_heldout.txt"
SUMMARY = ROOT / "validation" / "data" / "h200_serve_heldout_summary.csv"

pytestmark = pytest.mark.skipif(not (CASES.exists() and SUMMARY.exists()), reason="no H200 held-out serving runs")


def cases() -> list[tuple[str, str]]:
    from validation.serving.cli import read_case_lines

    lines = read_case_lines(str(CASES))
    return [(shlex.split(line)[shlex.split(line).index("--run-id") + 1], line) for line in lines]


def measured(run_id: str) -> dict:
    rows = [r for r in csv.DictReader(SUMMARY.open()) if r["run"] == run_id and r["status"] == "ok"]
    assert rows, run_id
    return rows[-1]


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


@pytest.mark.parametrize("run_id, line", cases() if CASES.exists() else [], ids=lambda x: x if " " not in x else "")
def test_hf_cb_pool_as_the_engine_chose_it(run_id, line, tmp_path):
    _, memory, _ = prepare(serve_inputs(line, tmp_path))
    row = measured(run_id)
    assert memory.num_blocks == int(row["num_blocks"])
    assert memory.max_batch_tokens == pytest.approx(int(row["max_batch_tokens"]), rel=1e-4)


@pytest.mark.parametrize("run_id, line", cases() if CASES.exists() else [], ids=lambda x: x if " " not in x else "")
def test_hf_cb_peak_allocated_within_3_percent(run_id, line, tmp_path):
    """The run's planned peak without the CUDA context against torch.cuda.max_memory_allocated of the run."""
    from estimator.serve.capacity import serve

    planned = serve(serve_inputs(line, tmp_path)).to_dict()["peak_allocated_bytes"]
    assert planned / int(measured(run_id)["peak_allocated_bytes"]) - 1 == pytest.approx(0, abs=0.03)
