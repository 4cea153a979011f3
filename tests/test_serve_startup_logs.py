"""Engine pools against the startup figures users published (validation/data/engine_startup_logs.csv): every row
re-planned with estimator/serve/memory.py under the row's settings (on the total memory the log printed, where it
printed one). A row marked `agrees` must come within AGREEMENT of the logged pool; a row marked `disagrees` must
stay outside it, so that the documented reason (docs/serving.md, the row's `why`) stays true. Logged weights must
match the planned weights within 1%. A row's `model_overrides` (JSON) sets ModelSpec fields of its preset, for a
model of the same architecture at other sizes."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from estimator.model.inputs import PlanInputs
from estimator.model.presets import get_preset
from estimator.serve.engines import EngineConfig, resolve_config
from estimator.serve.memory import engine_memory

DATA = Path(__file__).resolve().parents[1] / "validation" / "data" / "engine_startup_logs.csv"
AGREEMENT = 0.08  # relative error of the KV pool (bytes, or blocks where only blocks were logged)
GIB = 1 << 30


def rows() -> list[dict]:
    lines = [line for line in DATA.read_text().splitlines() if line and not line.startswith("#")]
    return list(csv.DictReader(lines))


def replan(row: dict):
    tp = int(row["tp"])
    model = get_preset(row["model"])
    if row.get("model_overrides"):  # a model of a preset's architecture at other sizes (its config.json)
        model = replace(model, **json.loads(row["model_overrides"]))
    plan = PlanInputs(model=model, seq_len=int(row["max_model_len"]), dtype=row["dtype"],
                      gpu=row["gpu"], tp=tp, gpus=tp)
    config = resolve_config(EngineConfig(engine=row["engine"], memory_fraction=row["memory_fraction"],
                                         block_size=row["block_size"], max_batch_tokens=row["max_batch_tokens"],
                                         max_seqs=row["max_seqs"], max_model_len=row["max_model_len"]),
                            int(row["max_model_len"]), tp=tp)
    if row["logged_total_gib"]:
        config = replace(config, capacity_bytes=int(float(row["logged_total_gib"]) * GIB))
    return engine_memory(plan, config)


def relative_error(row: dict, mem) -> float:
    if row["logged_kv_gib"]:
        return mem.kv_cache_bytes / (float(row["logged_kv_gib"]) * GIB) - 1
    return mem.num_blocks / float(row["logged_kv_blocks"]) - 1


def test_the_set_has_rows_of_every_kind():
    data = rows()
    assert len(data) >= 8
    assert {r["status"] for r in data} == {"agrees", "disagrees"}
    for r in data:
        assert r["source_url"].startswith("https://github.com/") and r["why"]


@pytest.mark.parametrize("row", rows(), ids=lambda r: f"{r['engine']}-{r['model']}-{r['gpu']}-tp{r['tp']}")
def test_replanned_pool_against_the_log(row):
    mem = replan(row)
    err = relative_error(row, mem)
    print(f"{row['engine']} {row['engine_version']} {row['model']} {row['gpu']} tp{row['tp']}: planned "
          f"{mem.kv_cache_bytes / GIB:.2f} GiB / {mem.num_blocks:,} blocks, logged "
          f"{row['logged_kv_gib'] or '-'} GiB / {row['logged_kv_blocks'] or '-'} blocks: {err:+.1%} ({row['status']})")
    if row["status"] == "agrees":
        assert abs(err) <= AGREEMENT, row["why"]
    else:
        assert abs(err) > AGREEMENT, "now agrees: update the row and docs/serving.md"
    if row["logged_weights_gib"]:
        assert mem.weights_bytes / GIB == pytest.approx(float(row["logged_weights_gib"]), rel=0.01)
