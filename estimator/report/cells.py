"""The named input cells of the budget workbook (`Named`, `input_cells`) and the closed forms that keep a budget
row live over them (`CLOSED_FORMS`, `closed_forms`: kept only where one reproduces the estimator exactly for these
inputs). Pure Python; estimator/report/xlsx.py writes them."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from estimator.model.budget import Plan

_FUNCS = {"MIN": min, "MAX": max, "INT": math.floor, "CEILING": lambda x, step: math.ceil(x / step) * step}


@dataclass(frozen=True, kw_only=True)
class Named:
    """One input cell: its defined name, label, value and unit."""

    name: str
    label: str
    value: object
    unit: str = ""
    formula: str = ""  # a derived input: an expression over earlier names
    editable: bool = False  # shaded: the workbook recomputes when it changes


def input_cells(inputs, plan: Plan) -> list[Named]:
    """The Inputs sheet, in order. Derived per-GPU sizes are formulas over the raw inputs."""
    from estimator.call.config import DTYPE_BITS, KV_DTYPE_BITS

    m = inputs.model
    windows = list(inputs.windows)
    sizes = sorted({w for w in windows if w is not None})
    window = sizes[0] if sizes else 0
    window_layers = sum(1 for w in windows if w is not None) if len(sizes) <= 1 else 0
    micro_cap = inputs.micro_batch if inputs.mode == "training" and inputs.micro_batch else 1 << 20
    return [
        Named(name="model_name", label="model", value=m.name),
        Named(name="layers", label="layers", value=m.layers),
        Named(name="hidden", label="hidden", value=m.hidden),
        Named(name="q_heads", label="query heads", value=m.q_heads),
        Named(name="kv_heads", label="kv heads", value=m.kv_heads),
        Named(name="head_dim", label="head_dim", value=m.head_dim),
        Named(name="ffn", label="ffn (intermediate)", value=m.ffn),
        Named(name="vocab", label="vocab", value=m.vocab),
        Named(name="params", label="parameters (exact, from the architecture)", value=m.params, unit="parameters"),
        Named(name="params_per_gpu", label="parameters per GPU (estimator: tp sharding)", value=plan.params_per_gpu,
              unit="parameters"),
        Named(name="seq_len", label="n: sequence length", value=inputs.seq_len, unit="tokens", editable=True),
        Named(name="batch", label="batch (sequences in the job)", value=inputs.batch, unit="sequences",
              editable=True),
        Named(name="dtype", label="dtype (compute)", value=inputs.dtype),
        Named(name="dtype_bits", label="dtype element size", value=DTYPE_BITS[inputs.dtype], unit="bits"),
        Named(name="kv_dtype", label="KV-cache dtype", value=inputs.kv_dtype),
        Named(name="kv_bits", label="KV-cache element size", value=KV_DTYPE_BITS[inputs.kv_dtype], unit="bits"),
        Named(name="mode", label="mode", value=inputs.mode),
        Named(name="precision", label="training precision", value=inputs.precision or "-"),
        Named(name="optimizer", label="optimizer (training)", value=inputs.optimizer),
        Named(name="finetune", label="fine-tuning (training: full, lora, qlora)", value=inputs.finetune),
        Named(name="lora_rank", label="LoRA rank (lora, qlora)", value=inputs.lora_rank),
        Named(name="lora_targets", label="LoRA targets (lora, qlora)", value=inputs.lora_targets),
        Named(name="trainable_params", label="trainable parameters per GPU (training)", value=plan.trainable_params,
              unit="parameters"),
        Named(name="checkpointing", label="activation checkpointing", value=inputs.checkpointing),
        Named(name="zero", label="ZeRO stage", value=inputs.zero),
        Named(name="micro_cap", label="micro-batch (training; 1048576 = none)", value=micro_cap,
              unit="sequences"),
        Named(name="backend", label="attention backend (asked)", value=inputs.backend),
        Named(name="attn_window", label="attention window (0 = none)", value=window, unit="tokens"),
        Named(name="window_layers", label="layers using that window", value=window_layers, unit="layers"),
        Named(name="full_window", label="every layer windowed (1) or not (0)",
              value=int(window > 0 and window_layers == m.layers)),
        Named(name="gpu", label="GPU", value=inputs.gpu),
        Named(name="gpus", label="GPUs", value=inputs.gpus),
        Named(name="tp", label="tensor parallel", value=inputs.tp),
        Named(name="cp", label="context parallel", value=inputs.cp),
        Named(name="capacity_bytes", label="GPU memory capacity", value=plan.capacity_bytes, unit="bytes"),
        Named(name="torch_version", label="PyTorch version modelled", value=inputs.torch_version),
        Named(name="dp", label="data parallel = gpus / (tp·cp)", value=inputs.dp, formula="gpus/(tp*cp)"),
        Named(name="tokens_per_gpu", label="tokens per GPU = ⌈n / cp⌉", value=inputs.tokens_per_gpu,
              unit="tokens", formula="CEILING(seq_len/cp, 1)"),
        Named(name="batch_per_gpu", label="batch per GPU = min(⌈batch / dp⌉, micro-batch)",
              value=inputs.batch_per_gpu, formula="MIN(CEILING(batch/dp, 1), micro_cap)"),
        Named(name="q_heads_per_gpu", label="query heads per GPU", value=inputs.q_heads_per_gpu, formula="q_heads/tp"),
        Named(name="kv_heads_per_gpu", label="kv heads per GPU = max(1, ⌊kv_heads / tp⌋)",
              value=inputs.kv_heads_per_gpu, formula="MAX(1, INT(kv_heads/tp))"),
        Named(name="is_decoder", label="decoder (1: keeps K and V per token) or encoder (0)",
              value=int(m.kind == "decoder")),
        Named(name="kv_cached", label="KV cache kept (1: decoder inference; 0: training or encoder)",
              value=int(m.kind == "decoder" and inputs.mode == "inference")),
        Named(name="score_layers", label="layers whose score matrices count (training without checkpointing: all)",
              value=m.layers if inputs.mode == "training" and inputs.checkpointing == "none" else 1, unit="layers"),
    ]


def _eval(expr: str, env: dict) -> float:
    return eval(expr, {"__builtins__": {}}, {**_FUNCS, **env})  # noqa: S307 - our own fixed expressions


def _env(cells: Sequence[Named]) -> dict:
    env = {}
    for cell in cells:
        env[cell.name] = _eval(cell.formula, env) if cell.formula else cell.value
    return env


# Closed forms (bytes per GPU). Each names the plan key it must reproduce exactly to be written as a formula.
KV_TOKENS = "((layers-window_layers)*tokens_per_gpu+window_layers*CEILING(MIN(seq_len, attn_window)/cp, 1))"
CLOSED_FORMS = (
    ("weights (closed form)", "weights_bytes", "params_per_gpu*dtype_bits/8", "parameters × dtype bits / 8"),
    ("KV cache (closed form)", "kv_cache_bytes",
     f"kv_cached*2*kv_heads_per_gpu*head_dim*kv_bits/8*batch_per_gpu*{KV_TOKENS}",
     "2 (K,V) · kv_heads · head_dim · bits/8 · batch · tokens, summed over layers (windowed layers: min(n, window))"),
    ("KV cache per token (closed form)", "kv_cache_bytes_per_token",
     "is_decoder*2*layers*kv_heads_per_gpu*head_dim*kv_bits/8",
     "2 · layers · kv_heads · head_dim · bits/8"),
    ("score matrices (textbook closed form)", "textbook_scores_bytes",
     "score_layers*batch_per_gpu*q_heads_per_gpu*tokens_per_gpu"
     "*MIN(tokens_per_gpu, seq_len-full_window*MAX(0, seq_len-attn_window))*dtype_bits/8",
     "b · h · L · S · dtype bits / 8 (S = min(n, window)), one layer, or every layer when training keeps them all"),
)

RESULT_KEYS = ("selected_backend", "max_seq_len", "max_batch", "prefill_flops", "prefill_time_ms",
               "decode_flops_per_token", "decode_time_ms_per_token", "step_time_ms", "attention_share", "ffn_share",
               "embedding_share")


def _env_at(cells: Sequence[Named], n: int, b: int) -> dict:
    return _env([dataclasses.replace(c, value=n) if c.name == "seq_len" else
                 dataclasses.replace(c, value=b) if c.name == "batch" else c for c in cells])


def closed_forms(inputs, plan: Plan, plan_fn: Callable | None = None) -> list[dict]:
    """Each closed form with its Python value and whether it equals the estimator's figure (then it is live).
    With `plan_fn`, a form is live only if it also reproduces the estimator at other n and batch (an edit of the
    workbook must not leave the estimator behind: e.g. a windowed model's cache that a backend keeps whole)."""
    cells = input_cells(inputs, plan)
    env = _env(cells)
    probes = []
    if plan_fn is not None:
        for n, b in ((2 * inputs.seq_len + 1, inputs.batch), (max(inputs.cp, inputs.seq_len // 2), 3 * inputs.batch)):
            try:
                other = plan_fn(dataclasses.replace(inputs, seq_len=n, batch=b))
            except ValueError:
                continue
            probes.append((_env_at(cells, n, b), other))
    out = []
    for label, key, expr, equation in CLOSED_FORMS:
        value = _eval(expr, env)
        expected = getattr(plan, key)
        matches = expected is not None and float(value).is_integer() and int(value) == int(expected)
        for probe_env, probe_plan in probes:
            probed = getattr(probe_plan, key)
            matches = matches and probed is not None and _eval(expr, probe_env) == probed
        out.append({"label": label, "key": key, "expr": expr, "equation": equation, "value": int(round(value)),
                    "plan_value": expected, "live": matches})
    return out


# the budget components a closed form can stand for: component key -> the plan field the form reproduces
FORM_OF_COMPONENT = {"weights": "weights_bytes", "kv_cache": "kv_cache_bytes"}


def _component_form(key: str, value: int, forms: list[dict]) -> dict | None:
    """The live closed form for a budget component, if one reproduces it (matched by its key and value)."""
    for form in forms:
        if form["live"] and form["value"] == value and form["key"] == FORM_OF_COMPONENT.get(key):
            return form
    return None


def slug(text: str) -> str:
    """A component name as a defined-name fragment: 'activations (peak layer)' -> 'activations_peak_layer'."""
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9]+", "_", text.lower())).strip("_")[:40] or "row"

