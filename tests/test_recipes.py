"""Training recipes: bytes per parameter of each precision and optimizer (golden, from PyTorch's and
bitsandbytes' sources as estimator/model/recipes.py cites them), and how a plan uses them."""

from __future__ import annotations

import pytest

from estimator.model.budget import budget
from estimator.model.inputs import PlanInputs
from estimator.model.presets import get_preset
from estimator.model.recipes import (
    PRECISIONS,
    optimizer_state_bytes,
    optimizer_step_transient_bytes,
)
from estimator.model.state import model_state, optimizer_step_bytes

# (weights, gradients, optimizer state incl. master copy, step temporaries) in bytes per parameter, AdamW foreach
PER_PARAM = {
    "bf16-mixed": (4, 4, 8, 4),
    "16-mixed": (4, 4, 8, 4),
    "bf16-true": (2, 2, 4, 2),
    "16-true": (2, 2, 4, 2),
    "32-true": (4, 4, 8, 4),
    "bf16-master": (2, 2, 12, 4),
    "fp8": (2, 2, 4, 2),  # torchao float8 training keeps bf16-true's weights and state
}


def training(precision=None, optimizer="adamw", **kw):
    kw.setdefault("seq_len", 2048)
    kw.setdefault("gpu", "h200")
    return PlanInputs(model=get_preset(kw.pop("preset", "llama-3-8b")), mode="training", precision=precision,
                      optimizer=optimizer, **kw)


@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_bytes_per_parameter_of_each_precision(precision):
    inputs = training(precision)
    p = inputs.model.params
    w, g, o, t = PER_PARAM[precision]
    assert model_state(inputs) == (w * p, g * p, o * p)
    step_grads, transient = optimizer_step_bytes(inputs)
    assert transient == t * p
    # bf16-master: the 16-bit gradients become fp32 before the step
    assert step_grads == (4 * p if precision == "bf16-master" else g * p)


def test_optimizers_state_and_step_temporaries():
    p = 1_000_000
    assert optimizer_state_bytes("adamw", p, 4) == optimizer_state_bytes("adamw-fused", p, 4) == 8 * p
    assert optimizer_state_bytes("sgd", p, 2) == 2 * p
    assert optimizer_step_transient_bytes("adamw", p, 4) == 4 * p
    assert optimizer_step_transient_bytes("adamw-fused", p, 4) == 0
    assert optimizer_step_transient_bytes("sgd", p, 4) == 0
    # 8-bit AdamW: two uint8 states + an fp32 absmax per 256 elements per state; small tensors keep fp32 states
    assert optimizer_state_bytes("adamw-8bit", 4096, 4, (4096,)) == 2 * (4096 + 4 * 16)
    assert optimizer_state_bytes("adamw-8bit", 4096 + 100, 4, (4096, 100)) == 2 * (4096 + 4 * 16) + 8 * 100
    with pytest.raises(ValueError, match="optimizer"):
        optimizer_state_bytes("lion", p, 4)


def test_precision_defaults_from_dtype_and_sets_the_compute_dtype():
    assert training().precision == "bf16-mixed"
    assert training(dtype="float16").precision == "16-mixed"
    assert training(dtype="float32").precision == "32-true"
    assert training("16-true").dtype == "float16"
    assert PlanInputs(model=get_preset("llama-3-8b"), seq_len=2048).precision is None  # inference
    with pytest.raises(ValueError, match="precision"):
        training("fp8-mixed")
    with pytest.raises(ValueError, match="optimizer"):
        training(optimizer="adafactor")


def test_autocast_keeps_16_bit_weight_copies_and_fp32_residuals():
    mixed, true = budget(training("bf16-mixed")), budget(training("bf16-true"))
    m = get_preset("llama-3-8b")
    casts = mixed.activation_detail["weight_casts_bytes"]
    assert casts == 2 * (m.matmul_params_per_layer * m.layers + m.vocab * m.hidden)
    assert true.activation_detail["weight_casts_bytes"] == 0
    # fp32 residual stream, norms and an own input cast per linear: more stored activations than bf16-true
    assert mixed.activation_detail["stored_layers_bytes"] > true.activation_detail["stored_layers_bytes"]


def test_peak_is_the_optimizer_step_when_activations_are_small():
    plan = budget(training("bf16-mixed", seq_len=256))
    parts = {c.label: c.bytes for c in plan.components}
    assert "peak_phase_optimizer_step" in plan.activation_detail
    assert parts["optimizer step temporaries"] == plan.component_bytes("optimizer_step") == 4 * plan.params
    assert parts["activations (freed before the optimizer step)"] == plan.component_bytes("activations") == 0
    assert plan.total_bytes == sum(parts.values())
    fused = budget(training("bf16-mixed", "adamw-fused", seq_len=256))
    # fused AdamW has no temporaries: the peak moves to the backward, at most 4 bytes per parameter lower
    assert 0 < plan.total_bytes - fused.total_bytes <= 4 * plan.params


def test_json_echoes_the_recipe():
    from estimator.model.plan import make_plan

    out = make_plan(training("16-true", "sgd"), solve=False).to_dict()
    assert out["inputs"]["precision"] == "16-true" and out["inputs"]["optimizer"] == "sgd"


def test_recipe_advice_computes_its_effect_and_names_the_trade():
    from estimator.advice.plan_rules import advise

    inputs = training(seq_len=4096)  # llama-3-8b bf16-mixed, foreach AdamW: 150 GiB on a 141 GB H200
    found = {a.id: a for a in advise(inputs)}
    precision, optimizer = found["precision"], found["optimizer"]
    assert dict(precision.change) == {"precision": "bf16-true"}
    assert precision.bytes_after == budget(training("bf16-true", seq_len=4096)).total_bytes
    assert "fp32 weights" in precision.why  # the trade is said
    assert dict(optimizer.change) == {"optimizer": "adamw-fused"}
    assert optimizer.bytes_after < optimizer.bytes_before
