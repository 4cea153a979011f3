"""Fine-tuning plans (LoRA, QLoRA, fp8, 8-bit AdamW): the mechanism's counts, the flags, the ladder advice, and the
H200 rows (validation/data/h200_hf_finetune*.csv, `python -m validation.hf_models --cases ...`) re-planned."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest

from estimator.cli.plan import main as plan_main
from estimator.model.finetune import nf4_linear_bytes, trainable_params
from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.presets import get_preset
from validation.model.model_report import compare

FIT, HELDOUT = "h200_hf_finetune.csv", "h200_hf_finetune_heldout.csv"


def _inputs(**kw) -> PlanInputs:
    base = dict(model=get_preset("llama-3-8b"), seq_len=4096, mode="training", gpu="h200", precision="bf16-true")
    return PlanInputs(**{**base, **kw})


def test_lora_trainable_params_are_peft_s_count():
    # peft's print_trainable_parameters for Llama-3-8B, r=16 on every projection: 41,943,040
    assert trainable_params(_inputs(finetune="lora", lora_rank=16, lora_targets="all")) == 41_943_040
    attention = trainable_params(_inputs(finetune="lora", lora_rank=8, lora_targets="attention"))
    assert attention == 32 * 8 * (2 * (4096 + 4096) + 2 * (4096 + 1024))


def test_lora_freezes_the_base_and_keeps_fp32_adapter_state():
    full, lora = (make_plan(_inputs(finetune=f), solve=False) for f in ("full", "lora"))
    assert lora.trainable_params == 41_943_040 and full.trainable_params == full.params
    assert lora.weights_bytes == full.weights_bytes + 4 * lora.trainable_params
    assert lora.optimizer_bytes == 2 * 4 * lora.trainable_params  # AdamW: two fp32 moments of the adapters
    assert lora.total_bytes < full.total_bytes


def test_nf4_base_is_about_half_a_byte_per_weight():
    n = 4096 * 14336
    # codes (n/2), uint8 absmax (n/64), fp32 absmax of the absmax (n/64/256 x 4), offset and code table
    assert n // 2 + n // 64 < nf4_linear_bytes(n) <= n // 2 + n // 64 + n // 4096 + 2048
    qlora = make_plan(_inputs(finetune="qlora"), solve=False)
    lora = make_plan(_inputs(finetune="lora"), solve=False)
    assert qlora.weights_bytes < 0.4 * lora.weights_bytes


@pytest.mark.parametrize("kw, field", [
    (dict(finetune="lora", mode="inference", precision=None), "finetune"),
    (dict(finetune="qlora", precision="bf16-mixed"), "precision"),
    (dict(finetune="lora", model=get_preset("mixtral-8x7b")), "finetune"),
    (dict(finetune="lora", lora_rank=0), "lora_rank"),
    (dict(finetune="lora", lora_targets="embeddings"), "lora_targets"),
    (dict(precision="fp8", gpu="a100-80gb"), "precision"),
])
def test_bad_fine_tuning_input_names_the_field(kw, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        _inputs(**kw)


def test_qlora_defaults_to_bf16_true():
    assert _inputs(finetune="qlora", precision=None).precision == "bf16-true"


def test_plan_json_carries_the_flags_and_trainable_params(capsys):
    rc = plan_main(["--preset", "llama-3-8b", "--seq-len", "2048", "--mode", "training", "--finetune", "lora",
                    "--lora-rank", "8", "--lora-targets", "attention", "--gpu", "h200", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["trainable_params"] == 32 * 8 * (2 * 8192 + 2 * 5120)
    assert out["inputs"]["finetune"] == "lora" and out["inputs"]["lora_rank"] == 8


def test_a_bad_flag_is_one_line(capsys):
    assert plan_main(["--preset", "llama-3-8b", "--seq-len", "2048", "--mode", "training", "--finetune",
                      "dora", "--gpu", "h200"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --finetune:") and err.count("\n") == 1


def test_the_ladder_climbs_until_a_rung_fits():
    from estimator.advice.plan_rules import advise

    inputs = _inputs(precision=None, gpu="rtx-4090")
    ladder = [a for a in advise(inputs) if a.id == "finetune-ladder"]
    assert len(ladder) == 1
    change = dict(ladder[0].change)
    assert change["finetune"] in ("lora", "qlora")
    after = make_plan(replace(inputs, **change), solve=False)
    assert after.fits and ladder[0].bytes_after == after.total_bytes
    assert "LoRA" in ladder[0].why and "step_time_ms" in ladder[0].why


@pytest.mark.parametrize("name", [FIT, HELDOUT])
def test_h200_rows_within_tolerance_and_every_oom_does_not_fit(name):
    path = f"validation/data/{name}"
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        pytest.fail(f"{path} is not committed")
    result = compare(df)
    ok, oom = result[result["status"] == "ok"], result[result["status"] == "oom"]
    assert len(ok) >= 18 and len(oom) >= 1
    assert ok["within_tolerance"].astype(bool).mean() >= 0.95, ok[~ok["within_tolerance"].astype(bool)]
    assert not oom["plan_fits"].astype(bool).any()


def test_measured_trainable_params_equal_the_plan():
    df = pd.read_csv(f"validation/data/{FIT}", dtype=str, keep_default_na=False)
    from validation.model.model_report import plan_row

    for row in df[(df["status"] == "ok") & (df["finetune"] != "full")].to_dict("records"):
        assert plan_row(row).trainable_params == int(row["trainable_params"]), row
