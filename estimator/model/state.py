"""Model state per GPU: weights, gradients and optimizer state of the plan's precision recipe and optimizer, and
what the optimizer step reads and allocates. Exact bytes (estimator/model/recipes.py has the per-parameter
figures and their sources)."""

from __future__ import annotations

from estimator.call.config import element_bytes
from estimator.model.finetune import ADAPTER_BYTES, adapter_tensor_sizes, base_weight_bytes, trainable_params
from estimator.model.inputs import PlanInputs
from estimator.model.recipes import optimizer_state_bytes, optimizer_step_transient_bytes
from estimator.units import cdiv


def model_state(inputs: PlanInputs) -> tuple[int, int, int]:
    """(weights, gradients, optimizer state) bytes per GPU. Inference: weights in dtype. Training: the precision
    recipe's weights and gradients, and the optimizer's state (plus bf16-master's fp32 master weights), per
    estimator/model/recipes.py; ZeRO stage z shards the optimizer state (z ≥ 1), gradients (z ≥ 2) and weights
    (z = 3) over the data-parallel replicas (Rajbhandari et al. 2020, arXiv:1910.02054 §5); stage 3 adds the gathered
    weights of two layers (the current and the prefetched)."""
    params = inputs.model.params_per_gpu(inputs.tp, inputs.ep)
    recipe = inputs.recipe
    if recipe is None:
        return params * element_bytes(inputs.dtype), 0, 0
    if inputs.finetune != "full":
        return _adapter_state(inputs)
    dp, z, m, wb = inputs.dp, inputs.zero, inputs.model, recipe.weight_bytes
    weights = params * wb if z < 3 else cdiv(params * wb, dp) + 2 * (params // m.layers) * wb
    grads = params * wb if z < 2 else cdiv(params * wb, dp)
    optimizer = optimizer_state_bytes(inputs.optimizer, params, recipe.optimizer_param_bytes)
    if recipe.master_dtype:
        optimizer += params * 4
    return weights, grads, optimizer if z < 1 else cdiv(optimizer, dp)


def _adapter_state(inputs: PlanInputs) -> tuple[int, int, int]:
    """LoRA / QLoRA: the frozen base (estimator/model/finetune.py `base_weight_bytes`) + fp32 adapters; fp32
    adapter gradients and the optimizer's state of the adapters (ZeRO shards these as for full fine-tuning; stage
    3 the base too)."""
    dp, z = inputs.dp, inputs.zero
    trainable = trainable_params(inputs)
    base = base_weight_bytes(inputs)
    adapters = trainable * ADAPTER_BYTES
    weights = base + adapters if z < 3 else cdiv(base + adapters, dp)
    grads = adapters if z < 2 else cdiv(adapters, dp)
    optimizer = optimizer_state_bytes(inputs.optimizer, trainable, ADAPTER_BYTES, adapter_tensor_sizes(inputs))
    return weights, grads, optimizer if z < 1 else cdiv(optimizer, dp)


def optimizer_step_bytes(inputs: PlanInputs) -> tuple[int, int]:
    """(gradients the optimizer reads, temporaries of its step) per GPU at the optimizer step. bf16-master: the
    16-bit gradients are copied to fp32 before the step (`master.grad = p.grad.float()`, then `p.grad = None`),
    so the step sees 4 bytes per parameter of gradients. Sharded by ZeRO ≥ 1 (each replica steps its shard)."""
    params = inputs.model.params_per_gpu(inputs.tp, inputs.ep)
    recipe = inputs.recipe
    _, grads, _ = model_state(inputs)
    if inputs.finetune != "full":
        transient = optimizer_step_transient_bytes(inputs.optimizer, trainable_params(inputs), ADAPTER_BYTES)
        return grads, transient if inputs.zero < 1 else cdiv(transient, inputs.dp)
    if recipe.master_dtype:
        grads = params * 4 if inputs.zero < 2 else cdiv(params * 4, inputs.dp)
    transient = optimizer_step_transient_bytes(inputs.optimizer, params, recipe.optimizer_param_bytes)
    return grads, transient if inputs.zero < 1 else cdiv(transient, inputs.dp)
