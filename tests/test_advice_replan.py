"""Every advice effect is the estimator's own re-plan of the change: for a seeded grid of scenarios, each advice
that states a whole-plan effect carries it (`plan_bytes_after`, `plan_time_ms_after`), and re-planning its
`change` by hand gives exactly those numbers and the ones its text quotes."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest

from estimator.advice.core import replan_changes
from estimator.advice.plan_rules import advise
from estimator.hardware import CATALOG
from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.presets import get_preset
from estimator.model.specs import ModelSpec
from estimator.units import gib

PRESETS = ("llama-3-8b", "llama-2-7b", "mistral-7b", "gemma-2-9b", "phi-3-mini", "vit-l-16", "qwen1.5-moe-a2.7b")
HEAD_DIM_80 = ModelSpec(name="custom", kind="decoder", layers=32, hidden=2560, q_heads=32, kv_heads=32,
                        head_dim=80, ffn=10240, vocab=51200, source="architecture flags")


def scenarios(count: int = 24, seed: int = 25) -> list[PlanInputs]:
    rng = random.Random(seed)
    out = [PlanInputs(model=HEAD_DIM_80, seq_len=4096, batch=4, gpu="t4", mode="training", dtype="bfloat16"),
           PlanInputs(model=get_preset("llama-2-7b"), seq_len=32768, batch=4, gpu="h200")]
    while len(out) < count:
        preset = rng.choice(PRESETS)
        model = get_preset(preset)
        try:
            out.append(PlanInputs(
                model=model, seq_len=197 if model.kind == "encoder" else int(2 ** rng.uniform(9, 16)),
                batch=rng.randint(1, 8), gpu=rng.choice(list(CATALOG)),
                dtype=rng.choice(("bfloat16", "float16", "float32")),
                mode=rng.choice(("inference", "training")), backend=rng.choice(("auto", "auto", "math", "eager"))))
        except ValueError:
            continue
    return out


def time_of(plan, inputs) -> float:
    return plan.step_time_ms if inputs.mode == "training" else plan.prefill_time_ms


@pytest.mark.parametrize("inputs", scenarios(), ids=lambda i: f"{i.model.name}-{i.mode}-{i.dtype}-{i.gpu}-{i.backend}")
def test_every_advice_effect_is_the_replan_of_its_change(inputs):
    base = make_plan(inputs, solve=False)
    for item in advise(inputs):
        whole_plan = item.bytes_metric == "total_bytes per GPU" and item.bytes_after is not None
        if whole_plan and (item.bytes_after != item.bytes_before or item.change):
            assert item.plan_bytes_after == item.bytes_after, item.id  # a whole-plan effect is a re-plan
        if item.plan_bytes_after is None:
            assert "Whole plan with" not in item.expected_effect, item.id
            continue
        change = dict(item.change)
        assert change, item.id
        plan_fields = {f.name for f in dataclasses.fields(PlanInputs)}
        replanned = make_plan(dataclasses.replace(inputs, **{k: v for k, v in change.items() if k in plan_fields}),
                              solve=False)
        assert replanned.total_bytes == item.plan_bytes_after, (item.id, change)
        assert replanned.step_time_ms == pytest.approx(item.plan_time_ms_after) if inputs.mode == "training" else \
            replanned.prefill_time_ms == pytest.approx(item.plan_time_ms_after), (item.id, change)
        quoted = re.search(r"[Tt]otal per GPU ([\d,.]+ [MG]iB) → ([\d,.]+ [MG]iB)", item.expected_effect)
        assert quoted, (item.id, item.expected_effect)
        assert quoted.groups() == (gib(base.total_bytes), gib(replanned.total_bytes)), item.id


def test_fused_kernel_dtype_change_replans_like_the_cli():
    """T4, head_dim 80, bf16 training: the float16 fix is the plan `plan --dtype float16` gives (its precision
    follows the dtype, 16-mixed), not the unchanged bf16-mixed plan."""
    inputs = scenarios()[0]
    item = next(a for a in advise(inputs) if a.id == "use-fused-kernel")
    change = dict(item.change)
    assert change["dtype"] == "float16" and change["precision"] == "16-mixed"
    cli = make_plan(PlanInputs(model=HEAD_DIM_80, seq_len=4096, batch=4, gpu="t4", mode="training",
                               dtype="float16"), solve=False)
    assert item.plan_bytes_after == cli.total_bytes != make_plan(inputs, solve=False).total_bytes
    assert "`change`" not in item.expected_effect and "With dtype float16:" in item.expected_effect


def test_replan_changes_follow_the_dtype():
    train = PlanInputs(model=HEAD_DIM_80, seq_len=512, gpu="a100-80gb", mode="training", precision="bf16-true")
    assert replan_changes(train, {"dtype": "float16"})["precision"] == "16-true"
    infer = PlanInputs(model=HEAD_DIM_80, seq_len=512, gpu="a100-80gb", dtype="float32")
    assert replan_changes(infer, {"dtype": "bfloat16"})["kv_dtype"] == "bfloat16"
    kept = PlanInputs(model=HEAD_DIM_80, seq_len=512, gpu="a100-80gb", dtype="float32", kv_dtype="int8")
    assert "kv_dtype" not in replan_changes(kept, {"dtype": "bfloat16"})


def test_int8_kv_decode_says_why_decode_time_does_not_move():
    item = next(a for a in advise(scenarios()[1]) if a.id == "kv-cache-quantization")
    decode = re.search(r"Decode ([\d.,]+ ms) → ([\d.,]+ ms)", item.expected_effect)
    assert decode and decode.group(1) == decode.group(2)
    assert "dequantizes" in item.expected_effect  # the unchanged number is explained, not left as a contradiction
