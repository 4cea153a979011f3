"""Fine-tuning recipes of a `validation.hf_models` case, applied to the freshly built model: LoRA and QLoRA (peft,
bitsandbytes) and FP8 training (torchao float8). Self-contained like hf_models: torch, transformers, peft,
bitsandbytes, torchao (imported only when a case asks for them; a missing one makes the case `unsupported`).

Case columns: `finetune` full | lora | qlora, `lora_rank` (default 16), `lora_targets` attention | mlp | all
(default all), `precision` fp8 (torchao float8 training with tensorwise scaling on the decoder layers' linears).

  lora   peft `LoraConfig(r=rank, lora_alpha=2·rank, lora_dropout=0.0, bias="none", target_modules=...)` on the
         model as built (bf16-true: bf16 base; bf16-mixed: fp32 base under autocast), `get_peft_model` (its default
         autocast_adapter_dtype=True keeps the adapters in fp32), then `enable_input_require_grads()` (what peft
         does when checkpointing is on; the harness does it for every case, so layer 0 saves what the others do).
  qlora  every nn.Linear of the decoder layers replaced by a bitsandbytes `Linear4bit` (NF4, blocksize 64,
         compress_statistics=True: double quantisation, compute_dtype bfloat16), quantised from the bf16 weights on
         the GPU; embedding, norms and lm_head stay bf16 (as transformers' `load_in_4bit` leaves them); then
         `is_loaded_in_4bit = True` and LoRA as above (peft dispatches its bnb Linear4bit adapter).
  fp8    bf16 model; `torchao.float8.convert_to_float8_training` on the decoder layers' linears (lm_head stays
         bf16), default `Float8LinearConfig` (tensorwise scaling), no torch.compile.
Target module names: attention = q_proj, k_proj, v_proj, o_proj; mlp = gate_proj, up_proj, down_proj.
"""

from __future__ import annotations

import torch

FINETUNES = ("full", "lora", "qlora")
LORA_TARGETS = {"attention": ("q_proj", "k_proj", "v_proj", "o_proj"),
                "mlp": ("gate_proj", "up_proj", "down_proj")}
LORA_TARGETS["all"] = LORA_TARGETS["attention"] + LORA_TARGETS["mlp"]


class MissingLibrary(Exception):
    """A library the case needs is not importable here."""


def _decoder_layers(model):
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError("fine-tuning cases need a decoder with model.layers")
    return layers


def quantize_nf4(model, device) -> int:
    """Replace every nn.Linear of the decoder layers by a bnb Linear4bit (NF4, double quantisation); returns how
    many were replaced."""
    try:
        import bitsandbytes as bnb
    except Exception:  # noqa: BLE001
        raise MissingLibrary("bitsandbytes not installed") from None
    count = 0
    for layer in _decoder_layers(model):
        for parent in list(layer.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is not torch.nn.Linear:
                    continue
                q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                      compute_dtype=torch.bfloat16, compress_statistics=True, quant_type="nf4",
                                      device="meta")
                w = child.weight.data
                q.weight = bnb.nn.Params4bit(w.to(torch.bfloat16), requires_grad=False, compress_statistics=True,
                                             quant_type="nf4", blocksize=64, module=q)
                q.weight._quantize(device)
                if child.bias is not None:
                    q.bias = torch.nn.Parameter(child.bias.data.to(torch.bfloat16), requires_grad=False)
                setattr(parent, name, q)
                del child, w
                count += 1
    model.is_loaded_in_4bit = True
    return count


def add_lora(model, rank: int, targets: str):
    try:
        from peft import LoraConfig, get_peft_model
    except Exception:  # noqa: BLE001
        raise MissingLibrary("peft not installed") from None
    cfg = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, bias="none",
                     target_modules=list(LORA_TARGETS[targets]), task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, cfg)
    peft_model.enable_input_require_grads()
    return peft_model


def to_float8(model) -> None:
    try:
        from torchao.float8 import convert_to_float8_training
    except Exception:  # noqa: BLE001
        raise MissingLibrary("torchao not installed") from None
    convert_to_float8_training(model, module_filter_fn=lambda mod, fqn: ".layers." in f".{fqn}")


def apply_finetune(model, case: dict, device):
    """The case's recipe applied to the built model (returns the model to train: the peft wrapper for LoRA)."""
    ft = case["finetune"]
    if ft not in FINETUNES:
        raise ValueError(f"unknown finetune {ft!r} (known: {', '.join(FINETUNES)})")
    if case["lora_targets"] not in LORA_TARGETS:
        raise ValueError(f"unknown lora_targets {case['lora_targets']!r}")
    if case["precision"] == "fp8":
        to_float8(model)
    if ft == "qlora":
        quantize_nf4(model, device)
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    if ft in ("lora", "qlora"):
        model = add_lora(model, case["lora_rank"], case["lora_targets"])
    return model
