"""Step time of the fine-tuning recipes (estimator/model/finetune.py) and of fp8 training, as changes to one decoder
layer's priced passes (estimator/model/layer_passes.py), per GPU:

- LoRA / QLoRA: the frozen base runs no weight-gradient GEMM (its linears and the LM head: only grad_input), and
  no AccumulateGrad cast under autocast; each adapted linear adds lora_A (T x r x K) and lora_B (T x N x r) GEMMs
  (and their two backward GEMMs each), and outside autocast the fp32 cast of its input, the scaling, the promoted
  sum and its cast back (memory-bound, backward x BACKWARD_MEMORY_FACTOR); the optimizer updates the fp32
  adapters only.
- QLoRA: every 4-bit linear dequantises its weight in forward and again in backward (bitsandbytes' dequantise +
  F.linear path for more than 1,536 rows): a copy-priced pass over the weight each time.
- fp8 (torchao float8, tensorwise, eager): the decoder linears' GEMMs at the float8 datasheet rate (2x bf16 on
  Hopper and Ada: the H100/H200 datasheet's 1,979 vs 989 dense TFLOP/s), plus per linear the eager host time of
  torchao's Float8TrainingTensor casts (amax, scale, cast, transposes) that the GPU waits for:
  FP8_LINEAR_HOST_MS. Fitted by hand to the fit set's three fp8 rows (validation/data/h200_hf_finetune.csv:
  measured minus planned forward and backward with the host term at 0, per linear), and checked on a later
  held-out set (validation/data/h200_hf_finetune_heldout.csv).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from estimator.model import layer_passes as passes
from estimator.model.finetune import adapted_linears, layer_linears

if TYPE_CHECKING:
    from estimator.model.inputs import PlanInputs
    from estimator.model.kernel_prices import Kernels

# bitsandbytes AdamW8bit's step (one fused blockwise kernel per parameter tensor): 42.3 ms for 1.487e9 bf16
# parameters on the H200 (validation/data/h200_hf_finetune.csv, the full bf16-true adamw-8bit row: time_optimizer_ms),
# scaled by HBM bandwidth on other GPUs
BNB_ADAMW8BIT_MS_PER_1E9 = 28.5
FP8_GEMM_SPEEDUP = 2.0  # float8 / bf16 dense tensor-core peak (H100/H200 datasheet)
# eager host time per float8 linear (forward, backward), ms: see the module docstring
FP8_LINEAR_HOST_MS = (0.75, 1.6)


def frozen(inputs: PlanInputs) -> bool:
    return inputs.mode == "training" and inputs.finetune != "full"


def fp8(inputs: PlanInputs) -> bool:
    return inputs.mode == "training" and bool(inputs.recipe and inputs.recipe.fp8_linears)


def adapter_forward(p: passes.Pass, kern: Kernels, inputs: PlanInputs, T: int, autocast: bool) -> None:
    """One layer's adapters in the forward (added to the layer's forward pass; its backward derives from it)."""
    r = inputs.lora_rank
    adt = "bfloat16" if autocast else "float32"
    for lin in adapted_linears(inputs):
        passes.gemm(p, kern, T, r, lin.fan_in, adt)
        passes.gemm(p, kern, T, lin.fan_out, r, adt)
        if not autocast:
            passes.mem(p, kern, "cast_bf16_fp32", T * lin.fan_in)  # x.to(fp32)
            passes.mem(p, kern, "mul", T * lin.fan_out, "float32")  # * scaling
            passes.mem(p, kern, "add", T * lin.fan_out, "float32")  # result + ... (promoted)
            passes.mem(p, kern, "cast_bf16_fp32", T * lin.fan_out)  # .to(result dtype)


def dequantise_ms(kern: Kernels, inputs: PlanInputs) -> tuple[float, int]:
    """QLoRA: (GPU ms, kernels) of dequantising every 4-bit linear of one layer once."""
    if inputs.finetune != "qlora":
        return 0.0, 0
    total, kernels = 0.0, 0
    for lin in layer_linears(inputs.model):
        g, kn = kern.mem_ms("copy", lin.numel, "bfloat16")
        total, kernels = total + g, kernels + kn + 2  # + the absmax dequantisation and the offset add
    return total, kernels


def adapter_backward_gemm_ms(kern: Kernels, inputs: PlanInputs, T: int, autocast: bool) -> float:
    """One layer's adapter GEMMs in backward: grad_input and grad_weight of lora_A and lora_B."""
    r, adt = inputs.lora_rank, "bfloat16" if autocast else "float32"
    total = 0.0
    for lin in adapted_linears(inputs):
        for n_, k_ in ((r, lin.fan_in), (lin.fan_out, r)):
            total += kern.gemm_ms(T, n_, k_, adt, "grad_input") + kern.gemm_ms(T, n_, k_, adt, "grad_weight")
    return total


def fp8_layer_gemm_saving_ms(kern: Kernels, inputs: PlanInputs, T: int, dtype: str, kind: str) -> float:
    """What float8 GEMMs save on one layer's linears (forward, or both backward GEMMs)."""
    kinds = ("forward",) if kind == "forward" else ("grad_input", "grad_weight")
    bf16 = sum(kern.gemm_ms(T, lin.fan_out, lin.fan_in, dtype, k) for lin in layer_linears(inputs.model)
               for k in kinds)
    return bf16 * (1 - 1 / FP8_GEMM_SPEEDUP)


def fp8_forward(p: passes.Pass, kern: Kernels, inputs: PlanInputs, T: int, dtype: str) -> None:
    p.add("gemm", -fp8_layer_gemm_saving_ms(kern, inputs, T, dtype, "forward"), 0.0, 0)
    p.add("python", 0.0, FP8_LINEAR_HOST_MS[0] * len(layer_linears(inputs.model)), 0)


def fp8_backward(p: passes.Pass, kern: Kernels, inputs: PlanInputs, T: int, dtype: str) -> None:
    p.add("gemm", -fp8_layer_gemm_saving_ms(kern, inputs, T, dtype, "backward"), 0.0, 0)
    p.add("python", 0.0, FP8_LINEAR_HOST_MS[1] * len(layer_linears(inputs.model)), 0)


def base_grad_weight_ms(kern: Kernels, inputs: PlanInputs, T: int, dtype: str) -> float:
    """The weight-gradient GEMMs of one layer's linears, which a frozen base does not run."""
    return sum(kern.gemm_ms(T, lin.fan_out, lin.fan_in, dtype, "grad_weight") for lin in layer_linears(inputs.model))
