"""The fast paths give the answers of the slow ones: predict's pyarrow-read plain chunks and the line-by-line reader,
the timing model run per kernel name and over every row, the solvers' memory verdict and the budget's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from estimator.call import attention, timing
from estimator.call.table import calls_from_frame
from estimator.cli import predict
from estimator.hardware import get_gpu
from estimator.model.budget import budget, memory_fits
from estimator.model.inputs import PlanInputs
from estimator.model.presets import get_preset
from validation.call.grid import random_sample, write_csv


def _predict(src, dst, monkeypatch, plain: bool, chunk_rows: int = 70) -> bytes:
    with monkeypatch.context() as m:
        if not plain:
            m.setattr(predict, "_plain_frame", lambda batch, header: None)  # every chunk line by line
        predict.predict_file(src, dst, "h200", chunk_rows=chunk_rows)
    return dst.read_bytes()


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_plain_chunks_read_like_the_line_reader(tmp_path, monkeypatch, newline):
    src = tmp_path / "in.csv"
    write_csv(random_sample(300, seed=5), src)
    lines = src.read_text().splitlines()
    lines[150] = lines[150].replace("forward", "sideways", 1)  # a row error inside a plain chunk
    src.write_bytes(newline.join(lines).encode() + newline.encode())
    fast = _predict(src, tmp_path / "fast.csv", monkeypatch, plain=True)
    assert fast == _predict(src, tmp_path / "slow.csv", monkeypatch, plain=False)
    assert b"mode: unknown" in fast


def test_chunks_that_need_the_line_reader_keep_row_and_line_numbers(tmp_path, monkeypatch):
    src = tmp_path / "in.csv"
    write_csv(random_sample(300, seed=6), src)
    lines = src.read_text().splitlines()
    lines[100] = ""  # a blank line: skipped, still counted
    lines[120] = lines[120].replace(",", ',"', 1)  # a stray quote
    lines[250] = lines[250] + ",extra"  # a field too many
    src.write_text("\n".join(lines) + "\n")
    fast = _predict(src, tmp_path / "fast.csv", monkeypatch, plain=True)
    assert fast == _predict(src, tmp_path / "slow.csv", monkeypatch, plain=False)
    text = fast.decode()
    assert "(line 121): unbalanced quote" in text and "expected 13 fields, got 14" in text


def test_plain_frame_refuses_what_it_cannot_read_alike():
    header = ["a", "b"]
    assert predict._plain_frame(["1,2\n", "3,4\n"], header).to_dict("list") == {"a": ["1", "3"], "b": ["2", "4"]}
    for batch in (['1,"2"\n'], ["1,2\r", "3,4\n"], ["1,2\n", "\n"], ["1\n"], ["1,2,3\n"], ["1,\x002\n"],
                  ["1,\udcff\n"], []):
        assert predict._plain_frame(batch, header) is None, batch


def test_time_per_kernel_equals_one_run_over_every_row():
    import pandas as pd

    rows = random_sample(2000, seed=7)
    c, backend, _ = calls_from_frame(pd.DataFrame(rows).astype(str))
    gpu = get_gpu("h200")
    cols = attention.estimate_columns(c, backend, gpu)
    kernel = np.asarray(cols["selected_backend"], dtype=object)
    whole = timing.time_ms(c, kernel, cols["executed_flops"], gpu)
    assert np.array_equal(attention._time_by_kernel(c, kernel, cols["executed_flops"], gpu), whole)
    assert len(set(kernel.tolist())) >= 4


@pytest.mark.parametrize("preset,mode", [("llama-3-8b", "inference"), ("llama-2-7b", "training"),
                                         ("mistral-7b", "inference")])
def test_memory_fits_is_the_budget_verdict(preset, mode):
    base = PlanInputs(model=get_preset(preset), seq_len=8192, batch=1, dtype="bfloat16", kv_dtype="bfloat16",
                      mode=mode, backend="auto", gpu="h200", gpus=1)
    verdicts = set()
    for n, b in ((256, 1), (4096, 1), (32768, 4), (131072, 16), (524288, 2), (8192, 512)):
        inputs = dataclasses.replace(base, seq_len=n, batch=b)
        assert memory_fits(inputs) == budget(inputs).fits
        verdicts.add(memory_fits(inputs))
    assert verdicts == {True, False}


def test_workbook_progress_counts_its_budgets():
    from ui.export import counting_plan_fn

    inputs = PlanInputs(model=get_preset("llama-3-8b"), seq_len=8192, batch=1, gpu="h200")
    seen = []
    fn = counting_plan_fn(inputs, lambda inp: inp.seq_len, lambda fraction, text: seen.append((fraction, text)),
                          every=5)
    assert [fn(dataclasses.replace(inputs, seq_len=n)) for n in range(1, 11)] == list(range(1, 11))
    assert [f for f, _ in seen] == sorted(f for f, _ in seen) and len(seen) == 2 and "10 of" in seen[-1][1]
