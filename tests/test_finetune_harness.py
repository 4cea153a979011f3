"""CPU tests of the fine-tuning cases of validation.hf_models (validation/model/hf_finetune.py): the case columns,
the model key, and a library that is not importable making the row `unsupported` (peft, bitsandbytes and torchao
travel as wheels to the GPU machine; the CPU suite does not install them)."""

from __future__ import annotations

import csv
import sys

import pytest

pytest.importorskip("transformers")

from validation.model import hf_finetune, hf_models  # noqa: E402


def _case(**kw):
    base = {"family": "llama-3.1-8b", "layers": 2, "attn_implementation": "sdpa", "mode": "train",
            "precision": "bf16-true", "optimizer": "adamw", "checkpointing": "none", "seq_len": 16, "batch": 1}
    return hf_models.normalize_case({**base, **kw})


def test_fine_tuning_columns_default_to_full_training():
    c = _case()
    assert (c["finetune"], c["lora_rank"], c["lora_targets"]) == ("full", 16, "all")
    c = _case(finetune="qlora", lora_rank="8", lora_targets="mlp", precision="bf16-true")
    assert (c["finetune"], c["lora_rank"], c["lora_targets"]) == ("qlora", 8, "mlp")
    assert hf_models.load_dtype(_case(precision="fp8")) == hf_models.torch.bfloat16


def test_each_recipe_builds_its_own_model():
    slot = hf_models.ModelSlot(hf_models.Dev("cpu"), tiny=True)
    keys = {slot.key_of(_case(**kw)) for kw in ({}, {"finetune": "lora"}, {"finetune": "lora", "lora_rank": 4},
                                                {"finetune": "lora", "lora_targets": "mlp"}, {"precision": "fp8"})}
    assert len(keys) == 5


def test_targets_name_the_hf_projections():
    assert hf_finetune.LORA_TARGETS["all"] == ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                               "down_proj")
    with pytest.raises(ValueError, match="unknown finetune"):
        hf_finetune.apply_finetune(object(), _case(finetune="dora"), "cpu")


@pytest.mark.parametrize("kw, library", [({"finetune": "lora"}, "peft"), ({"finetune": "qlora"}, "bitsandbytes"),
                                         ({"precision": "fp8"}, "torchao")])
def test_a_missing_library_makes_the_row_unsupported(tmp_path, monkeypatch, kw, library):
    monkeypatch.setitem(sys.modules, library, None)  # import raises ImportError
    cases = tmp_path / "cases.csv"
    with open(cases, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=hf_models.CASE_COLUMNS)
        w.writeheader()
        w.writerow({k: v for k, v in _case(**kw).items() if k in hf_models.CASE_COLUMNS})
    out = tmp_path / "out.csv"
    assert hf_models.main(["--cases", str(cases), "--out", str(out), "--tiny", "--device", "cpu"]) == 0
    with open(out, newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["status"] == "unsupported" and row["reason"] == f"{library} not installed", row["reason"]
