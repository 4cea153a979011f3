"""Parameter-efficient fine-tuning: what peft's LoRA and QLoRA (bitsandbytes NF4 base) change in a training plan.
Exact bytes per GPU, from the libraries' sources (peft 0.21.2, bitsandbytes 0.50.2, PyTorch 2.11):

- Frozen base (peft/tuners/tuners_utils.py `_mark_only_adapters_as_trainable`): no gradients, no optimizer state
  for the base. Autograd saves a tensor for a backward only where an input needs its gradient
  (tools/autograd/gen_variable_type.py guards each saved variable by `should_compute_output`): a frozen Linear
  keeps its weight (a parameter, no new memory) but not its input; a frozen RMSNorm `weight * x` does not keep `x`.
  So every linear input, down_proj's `act·up` and the norms' scaled outputs of full fine-tuning are gone.
- Adapters (peft/tuners/lora/layer.py `Linear.update_layer`, `LoraLayer._move_adapter_to_device_of_base_layer`,
  tuners_utils.py `cast_adapter_dtype`): `lora_A` (r x in) and `lora_B` (out x r) per adapted linear, created in
  the base dtype and upcast to fp32 by get_peft_model's default `autocast_adapter_dtype=True`; their gradients and
  optimizer state are fp32 (4 bytes per element).
- Adapter forward (lora/layer.py `Linear.forward`; bnb.py `Linear4bit.forward`): outside autocast the input is cast
  to the adapter dtype (`_cast_input_dtype`: an fp32 copy per adapted linear, saved by lora_A) and lora_A's output
  (b·n·r fp32) is saved by lora_B; `result + lora_B(...) * scaling` promotes to fp32 and is cast back.
  Under autocast (bf16-mixed) lora_A casts its input to bf16 itself (one bf16 copy saved per adapted linear).
- QLoRA (bitsandbytes/nn/modules.py `Params4bit._quantize`, functional.py `quantize_4bit` with
  compress_statistics=True): each linear of the decoder layers holds ceil(n/2) bytes of packed NF4 codes, one uint8
  absmax per 64-element block, one fp32 absmax per 256 of those blocks, the fp32 offset and the 16-entry NF4 code;
  embedding, norms, biases and the LM head stay in the 16-bit dtype. In training (more than 1,536 rows) every 4-bit
  matmul takes the dequantise + F.linear path (backends/cuda/ops.py `_dequant_linear_fallback`): the fp32 absmax
  (twice, with the offset added) and a bf16 copy of the weight live during each linear's forward and again during
  its backward (autograd/_functions.py `MatMul4Bit.backward`); only the packed weight is saved.
Each CUDA allocation is rounded up to 512 bytes (c10/cuda/CUDACachingAllocator.cpp kMinBlockSize).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from estimator.units import cdiv

if TYPE_CHECKING:
    from estimator.model.inputs import PlanInputs
    from estimator.model.specs import ModelSpec

# the recipe names (FINETUNES, LORA_TARGETS) and their checks live with the inputs (estimator/model/inputs.py)
ADAPTER_BYTES = 4  # peft's autocast_adapter_dtype=True: adapters (and their grads, optimizer state) in fp32
NF4_BLOCK = 64  # bitsandbytes Linear4bit default blocksize
NESTED_BLOCK = 256  # double quantisation: the absmax quantised blockwise in blocks of 256
BLOCK = 512  # CUDA caching allocator rounding


def _rounded(nbytes: int) -> int:
    return cdiv(nbytes, BLOCK) * BLOCK


@dataclass(frozen=True, kw_only=True)
class Linear:
    """One nn.Linear of a decoder layer: its name in Hugging Face's modules, widths, group, and bias."""

    name: str
    fan_in: int
    fan_out: int
    group: str  # attention | mlp
    bias: bool = False

    @property
    def numel(self) -> int:
        return self.fan_in * self.fan_out


def layer_linears(m: ModelSpec) -> tuple[Linear, ...]:
    """The linears of one dense decoder layer, as transformers names them (Llama, Mistral, Qwen2, Gemma)."""
    H, d, dv = m.hidden, m.head_dim, m.v_head
    attn = (Linear(name="q_proj", fan_in=H, fan_out=m.q_heads * d, group="attention", bias=m.qkv_bias),
            Linear(name="k_proj", fan_in=H, fan_out=m.kv_heads * d, group="attention", bias=m.qkv_bias),
            Linear(name="v_proj", fan_in=H, fan_out=m.kv_heads * dv, group="attention", bias=m.qkv_bias),
            Linear(name="o_proj", fan_in=m.q_heads * dv, fan_out=H, group="attention", bias=m.out_bias))
    if m.gated_ffn:
        mlp = (Linear(name="gate_proj", fan_in=H, fan_out=m.ffn, group="mlp", bias=m.mlp_bias),
               Linear(name="up_proj", fan_in=H, fan_out=m.ffn, group="mlp", bias=m.mlp_bias),
               Linear(name="down_proj", fan_in=m.ffn, fan_out=H, group="mlp", bias=m.mlp_bias))
    else:
        mlp = (Linear(name="up_proj", fan_in=H, fan_out=m.ffn, group="mlp", bias=m.mlp_bias),
               Linear(name="down_proj", fan_in=m.ffn, fan_out=H, group="mlp", bias=m.mlp_bias))
    return attn + mlp


def adapted_linears(inputs: PlanInputs) -> tuple[Linear, ...]:
    """The linears of one layer that carry a LoRA adapter (none for full fine-tuning)."""
    if inputs.finetune == "full":
        return ()
    groups = ("attention", "mlp") if inputs.lora_targets == "all" else (inputs.lora_targets,)
    return tuple(lin for lin in layer_linears(inputs.model) if lin.group in groups)


def adapter_tensor_sizes(inputs: PlanInputs) -> tuple[int, ...]:
    """Elements of every adapter tensor (lora_A: r x in, lora_B: out x r) of the model, layer by layer."""
    r = inputs.lora_rank
    per_layer = tuple(s for lin in adapted_linears(inputs) for s in (r * lin.fan_in, lin.fan_out * r))
    return per_layer * inputs.model.layers


def trainable_params(inputs: PlanInputs) -> int:
    """Parameters the optimizer updates: every one (full), or the adapters' (LoRA, QLoRA)."""
    if inputs.finetune == "full":
        return inputs.model.params_per_gpu(inputs.tp, inputs.ep)
    return sum(adapter_tensor_sizes(inputs))


def nf4_linear_bytes(numel: int) -> int:
    """Bytes one NF4 Linear4bit weight holds with double quantisation: packed codes, uint8 absmax per 64, fp32
    absmax per 256 absmax values, fp32 offset, the NF4 code table (16 fp32): each its own allocation."""
    blocks = cdiv(numel, NF4_BLOCK)
    return (_rounded(cdiv(numel, 2)) + _rounded(blocks) + _rounded(cdiv(blocks, NESTED_BLOCK) * 4)
            + _rounded(4) + _rounded(16 * 4))


def base_weight_bytes(inputs: PlanInputs) -> int:
    """The frozen base model's bytes: the recipe's weight dtype (LoRA), or NF4 decoder linears and the rest in
    bf16 (QLoRA)."""
    m, recipe = inputs.model, inputs.recipe
    params = m.params_per_gpu(inputs.tp, inputs.ep)
    if inputs.finetune != "qlora":
        return params * recipe.weight_bytes
    linears = layer_linears(m)
    quantised = sum(lin.numel for lin in linears) * m.layers
    return (params - quantised) * recipe.weight_bytes + m.layers * sum(nf4_linear_bytes(lin.numel) for lin in linears)


def dequantised_weight_bytes(inputs: PlanInputs) -> int:
    """QLoRA: the largest transient of one 4-bit matmul (forward or backward): the bf16 weight and the two fp32
    absmax tensors (dequantised, then + offset); 0 otherwise."""
    if inputs.finetune != "qlora":
        return 0
    n = max(lin.numel for lin in layer_linears(inputs.model))
    return _rounded(n * 2) + 2 * _rounded(cdiv(n, NF4_BLOCK) * 4)


# ------------------------------------------------------------------------------------------ saved activations

def adapter_saved_bytes(inputs: PlanInputs, rows: int, es: int, autocast: bool) -> tuple[int, int]:
    """(attention side, MLP side) bytes one layer's adapters save: lora_A's input (outside autocast an fp32 cast
    per adapted linear; under autocast lora_A's own 16-bit cast) and lora_A's output (rows x r), saved by lora_B.
    Where the input already has the adapter dtype (32-true) no cast is made: linears reading one tensor share it."""
    r = inputs.lora_rank
    ab = es if autocast else ADAPTER_BYTES
    cast = autocast or es != ADAPTER_BYTES
    sides = {"attention": 0, "mlp": 0}
    seen: set[str] = set()
    for lin in adapted_linears(inputs):
        source = lin.name if cast else {"k_proj": "q_proj", "v_proj": "q_proj", "up_proj": "gate_proj"}.get(
            lin.name, lin.name)
        if source not in seen:
            sides[lin.group] += rows * lin.fan_in * ab
            seen.add(source)
        sides[lin.group] += rows * r * ab
    return sides["attention"], sides["mlp"]


def adapter_backward_bytes(inputs: PlanInputs, rows: int, autocast: bool) -> int:
    """The largest extra transient of one adapted linear's backward outside autocast: the fp32 gradient of the
    promoted `result + lora_B(...) * scaling`, its 16-bit cast for the base output and the scaled fp32 gradient
    (output width), and the fp32 gradient of lora_A's input with its cast back (input width). Under autocast the
    sum stays in the 16-bit dtype: none."""
    if autocast or inputs.finetune == "full":
        return 0
    out_bytes, in_bytes = (4 + 2 + 4, 4 + 2) if inputs.finetune == "lora" else (4 + 4, 4 + 2)
    return max((rows * (lin.fan_out * out_bytes + lin.fan_in * in_bytes) for lin in adapted_linears(inputs)),
               default=0)
