"""Training recipes: the precision (which dtype the weights, gradients, optimizer state and compute use) and the
optimizer (its state and the temporaries its step allocates). Bytes per parameter, exact.

Precision names are Lightning's (`Trainer(precision=...)`), which HF Trainer and torch.amp users run too:

| precision   | weights | gradients | master copy | compute | how it runs                                         |
|-------------|---------|-----------|-------------|---------|-----------------------------------------------------|
| bf16-mixed  | fp32    | fp32      | -           | bf16    | fp32 model under torch.autocast (HF `bf16=True`)    |
| 16-mixed    | fp32    | fp32      | -           | fp16    | the same in float16, with torch.amp.GradScaler      |
| bf16-true   | bf16    | bf16      | -           | bf16    | model.to(torch.bfloat16), optimizer on it           |
| 16-true     | fp16    | fp16      | -           | fp16    | the same in float16                                 |
| 32-true     | fp32    | fp32      | -           | fp32    | everything in float32                               |
| bf16-master | bf16    | bf16      | fp32        | bf16    | fp32 master weights and moments (DeepSpeed style)   |
| fp8         | bf16    | bf16      | -           | fp8     | bf16-true, the decoder linears in torchao float8    |

`fp8` is torchao's float8 training (torchao/float8/float8_linear.py, torchao 0.18.0; `convert_to_float8_training`
with the default tensorwise scaling) on the decoder layers' linears of a bf16 model: each linear casts its input,
weight and (in backward) output gradient to float8 with one dynamic scale per tensor, runs torch._scaled_mm, and
saves the bf16 input and weight (`matmul_with_hp_or_float8_args.forward: ctx.save_for_backward(input_hp,
weight_hp_t)`); the float8 copies are transients. Its activations and state are bf16-true's.

Autocast (torch/csrc/autograd/autocast_mode.cpp, PyTorch 2.11) casts each fp32 weight that a matmul reads to the
compute dtype once per forward and keeps the cast in a cache while the autocast region is open; autograd saves the
cast for the backward of that matmul, so every layer's 16-bit weight copies stay alive until its backward ran.
Each linear casts its (fp32) input separately, and the residual stream, the norms and the embedding output stay in
fp32 (type promotion: fp32 residual + 16-bit branch = fp32).

Optimizer state and step temporaries (torch/optim/adam.py, sgd.py, PyTorch 2.11):
- `adamw` (the default foreach implementation): exp_avg and exp_avg_sq in the parameter dtype, created with
  `zeros_like` on the first step; `_multi_tensor_adam` then allocates `exp_avg_sq_sqrt = _foreach_sqrt(...)`,
  one parameter-sized temporary for the whole step; `step` counters are CPU tensors.
- `adamw-fused` (`fused=True`): the same state, no parameter-sized temporary (one fused kernel); the `step`
  counters live on the GPU (one 4-byte tensor per parameter tensor, a 512-byte block each: ignored).
- `sgd` (momentum 0.9): one momentum buffer per parameter, cloned from the first gradient; the foreach step
  works in place.
- `adamw-8bit` (bitsandbytes `AdamW8bit`, blockwise quantisation): two uint8 states per parameter plus one fp32
  absmax per 256-element block per state (bitsandbytes/optim/optimizer.py `Optimizer2State`, blocksize 256);
  tensors under 4,096 elements keep fp32 states (`min_8bit_size`); dequantised in registers (no temporaries).
  Modelled from the source (bitsandbytes 0.50.2); measured on the H200 (validation/data/h200_hf_finetune.csv).
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.call.config import DTYPE_BITS


@dataclass(frozen=True)
class Precision:
    name: str
    weight_dtype: str  # dtype of the model's parameters
    compute_dtype: str  # dtype the matmuls and attention run in
    autocast: bool  # fp32 weights cast per matmul (16-bit copies saved for backward); fp32 residual stream
    master_dtype: str | None = None  # an fp32 copy of the weights the optimizer updates (bf16-master)
    grad_scaler: bool = False
    fp8_linears: bool = False  # torchao float8 training: the decoder linears' GEMMs in float8 (transient casts)

    @property
    def weight_bytes(self) -> int:
        return DTYPE_BITS[self.weight_dtype] // 8

    @property
    def compute_bytes(self) -> int:
        return DTYPE_BITS[self.compute_dtype] // 8

    @property
    def residual_bytes(self) -> int:
        """Element size of the residual stream, the norms' saved tensors and the embedding output."""
        return 4 if self.autocast else self.compute_bytes

    @property
    def optimizer_param_bytes(self) -> int:
        """Element size of the tensors the optimizer updates (its state and gradients are of this dtype)."""
        return 4 if self.master_dtype else self.weight_bytes


PRECISIONS = {p.name: p for p in (
    Precision("bf16-mixed", "float32", "bfloat16", autocast=True),
    Precision("16-mixed", "float32", "float16", autocast=True, grad_scaler=True),
    Precision("bf16-true", "bfloat16", "bfloat16", autocast=False),
    Precision("16-true", "float16", "float16", autocast=False),
    Precision("32-true", "float32", "float32", autocast=False),
    Precision("bf16-master", "bfloat16", "bfloat16", autocast=False, master_dtype="float32"),
    Precision("fp8", "bfloat16", "bfloat16", autocast=False, fp8_linears=True),
)}
# the precision a training plan uses when only --dtype is given
DEFAULT_PRECISION = {"bfloat16": "bf16-mixed", "float16": "16-mixed", "float32": "32-true"}

OPTIMIZERS = ("adamw", "adamw-fused", "sgd", "adamw-8bit")
BNB_BLOCK = 256  # bitsandbytes blockwise quantisation block (elements per fp32 absmax)
BNB_MIN_8BIT_SIZE = 4096  # bitsandbytes keeps fp32 state for tensors with fewer elements


def optimizer_state_bytes(optimizer: str, params: int, param_bytes: int, tensor_sizes: tuple[int, ...] = ()) -> int:
    """Persistent optimizer state for `params` parameters whose update runs in `param_bytes`-byte elements.
    adamw, adamw-fused: 2 moments; sgd: 1 momentum buffer; adamw-8bit: 2 × (1 byte + 4 bytes per 256-element
    block) per parameter, fp32 (2 × 4 bytes) for tensors under 4,096 elements (`tensor_sizes` lists those)."""
    if optimizer in ("adamw", "adamw-fused"):
        return 2 * params * param_bytes
    if optimizer == "sgd":
        return params * param_bytes
    if optimizer == "adamw-8bit":
        small = sum(s for s in tensor_sizes if s < BNB_MIN_8BIT_SIZE)
        big = params - small
        return 2 * (big + 4 * -(-big // BNB_BLOCK)) + 2 * 4 * small
    raise ValueError(f"optimizer: unknown value {optimizer!r}; expected one of {', '.join(OPTIMIZERS)}")


def optimizer_step_transient_bytes(optimizer: str, params: int, param_bytes: int) -> int:
    """Bytes the optimizer step allocates and frees: foreach AdamW's `exp_avg_sq_sqrt` (one parameter-sized
    tensor in the parameter dtype); none for fused AdamW, SGD's in-place foreach step and 8-bit AdamW."""
    return params * param_bytes if optimizer == "adamw" else 0
