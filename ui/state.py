"""The query-string round trip: form values ↔ `?key=value` so that any plan or call can be shared by URL.

Pure functions (no Streamlit). `values_from_query` never raises: a bad parameter is dropped with a
one-line message naming it, and the default stands in. `query_from_values` writes every field, so a
shared URL pins the whole plan even if the defaults change later.
"""

from __future__ import annotations

from collections.abc import Mapping

from estimator.call.config import (
    DTYPE_BITS,
    KV_DTYPE_BITS,
    MASKS,
    MAX_SEQ_LEN,
    STRUCTURED_MASKS,
    check_positive_int,
    normalize_dtype,
    parse_bool,
    parse_mask,
)
from estimator.call.registry import BACKENDS
from estimator.hardware import get_gpu
from estimator.model.inputs import CHECKPOINTING, FINETUNES, LOGITS, LORA_TARGETS
from estimator.model.inputs import MODES as PLAN_MODES
from estimator.model.recipes import OPTIMIZERS, PRECISIONS

PRECISION_CHOICES = ("auto", *PRECISIONS)  # auto: follow dtype (bfloat16 -> bf16-mixed, ...)

MODEL_SOURCES = ("preset", "custom", "hf-config")
CALL_MODES = ("forward", "forward_backward")

# Defaults: PlanInputs' own (estimator/model/inputs.py PLAN_INPUT_DEFAULTS) in the form's encoding (0 for "none",
# "auto" precision), for the app's first view: Llama-3-8B serving its trained context on one H200.
DEFAULT_PRESET = "llama-3-8b"
DEFAULT_GPU = "h200"  # the GPU the project measures on (PlanInputs defaults to h100-sxm)


def _plan_defaults() -> dict:
    from estimator.model.inputs import PLAN_INPUT_DEFAULTS as d
    from estimator.model.presets import get_preset

    return {"source": "preset", "preset": DEFAULT_PRESET, **arch_values(get_preset(DEFAULT_PRESET)),
            "seq_len": default_seq_len(DEFAULT_PRESET), "batch": d["batch"], "dtype": d["dtype"],
            "kv_dtype": d["kv_dtype"] or d["dtype"], "mode": d["mode"], "checkpointing": d["checkpointing"],
            "window": d["window"] or 0, "backend": d["backend"], "gpu": DEFAULT_GPU,
            "gpus": d["gpus"] or d["tp"] * d["cp"], "tp": d["tp"], "cp": d["cp"], "zero": d["zero"],
            "micro_batch": d["micro_batch"] or 0, "sequence_parallel": d["sequence_parallel"],
            "logits": d["logits"], "precision": d["precision"] or "auto", "optimizer": d["optimizer"],
            "finetune": d["finetune"], "lora_rank": d["lora_rank"], "lora_targets": d["lora_targets"],
            # image plans (estimator/cli/vision_args.py): no image until a size is given
            "image_size": "", "images": 1, "trainable": "all"}


ZERO_STAGES = (0, 1, 2, 3)
ARCH_FIELDS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "gated_ffn", "tied_embeddings")
_INT_LIMITS = {"layers": 4096, "hidden": 1 << 20, "heads": 1 << 16, "kv_heads": 1 << 16, "head_dim": 1 << 16,
               "ffn": 1 << 22, "vocab": 1 << 24, "seq_len": MAX_SEQ_LEN, "batch": 1 << 20, "gpus": 1 << 16,
               "tp": 1 << 12, "cp": 1 << 12, "lora_rank": 1 << 16}
_CHOICES = {"source": MODEL_SOURCES, "mode": PLAN_MODES, "checkpointing": CHECKPOINTING, "backend": BACKENDS,
            "logits": LOGITS, "precision": PRECISION_CHOICES, "optimizer": tuple(OPTIMIZERS),
            "trainable": ("all", "tower-frozen", "projector"), "finetune": FINETUNES, "lora_targets": LORA_TARGETS}

CALL_DEFAULTS: dict = {
    "batch": 1, "q_heads": 32, "kv_heads": 8, "head_dim": 128, "q_len": 8192, "kv_len": 8192,
    "dtype": "bfloat16", "causal": True, "mask": "none", "mask_size": 0, "dropout": 0.0, "mode": "forward",
    "backend": "auto", "gpu": "h200",
}
CALL_MASKS = (*MASKS, *STRUCTURED_MASKS)  # the form's mask kinds; a structured one takes its size (W or K) too
_CALL_INT_LIMITS = {"batch": 1 << 20, "q_heads": 1 << 16, "kv_heads": 1 << 16, "head_dim": 1 << 16,
                    "q_len": MAX_SEQ_LEN, "kv_len": MAX_SEQ_LEN}
_CALL_CHOICES = {"mask": CALL_MASKS, "mode": CALL_MODES, "backend": BACKENDS}


def _first(value):
    return value[-1] if isinstance(value, list | tuple) else value


def _coerce(key: str, raw, ints: Mapping[str, int], choices: Mapping[str, tuple], presets: tuple[str, ...] = ()):
    """One query value → its typed form value; ValueError naming the key otherwise."""
    if key in ints:
        return check_positive_int(key, raw, ints[key])
    if key in choices:
        value = str(raw).strip().lower()
        if value not in choices[key]:
            raise ValueError(f"{key}: unknown value {raw!r}; expected one of {', '.join(choices[key])}")
        return value
    if key == "dtype":
        return normalize_dtype(raw, field="dtype", allowed=DTYPE_BITS)
    if key == "kv_dtype":
        return normalize_dtype(raw, field="kv_dtype", allowed=KV_DTYPE_BITS)
    if key == "gpu":
        return get_gpu(raw).name
    if key in ("gated_ffn", "tied_embeddings", "causal", "sequence_parallel"):
        return parse_bool(key, raw)
    if key == "zero":
        text = str(raw).strip()
        if text not in {str(z) for z in ZERO_STAGES}:
            raise ValueError(f"zero: unknown ZeRO stage {raw!r}; expected 0, 1, 2 or 3")
        return int(text)
    if key == "micro_batch":  # 0 = the whole per-replica batch in one pass
        text = str(raw).strip().lower()
        return 0 if text in ("", "0", "none") else check_positive_int("micro_batch", text, 1 << 20)
    if key == "window":  # 0 = no window (global attention)
        text = str(raw).strip().lower()
        return 0 if text in ("", "0", "none") else check_positive_int("window", text, MAX_SEQ_LEN)
    if key == "preset":
        value = str(raw).strip().lower()
        if presets and value not in presets:
            raise ValueError(f"preset: unknown preset {raw!r}; known: {', '.join(presets)}")
        return value
    if key == "image_size":  # "" = no image; S or HxW pixels (estimator.model.vision_tokens.parse_image_size)
        from estimator.model.vision_tokens import parse_image_size

        text = str(raw).strip().lower()
        if text in ("", "0", "none"):
            return ""
        h, w = parse_image_size(text)
        return str(h) if h == w else f"{h}x{w}"
    if key == "images":  # images per sequence, 0..256
        text = str(raw).strip()
        if not text.isdigit() or int(text) > 256:
            raise ValueError(f"images: expected 0..256 images per sequence, got {raw!r}")
        return int(text)
    if key == "dropout":
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"dropout: expected a probability in [0, 1), got {raw!r}") from None
        if not 0.0 <= value < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {raw!r}")
        return value
    raise ValueError(f"{key}: not a parameter of this page")


def values_from_query(params: Mapping, *, presets: tuple[str, ...] = ()) -> tuple[dict, list[str]]:
    """Plan form values from a query string (defaults for what is absent); errors for what is malformed."""
    values, errors = dict(PLAN_DEFAULTS), []
    for key, raw in params.items():
        if key not in PLAN_DEFAULTS:
            continue  # other pages' parameters, or ones we no longer use
        try:
            values[key] = _coerce(key, _first(raw), _INT_LIMITS, _CHOICES, presets)
        except ValueError as exc:
            errors.append(f"URL parameter {exc}")
    return values, errors


def query_from_values(values: Mapping) -> dict[str, str]:
    """Form values → query parameters: the preset or the architecture (never both), then everything else."""
    skip = set(ARCH_FIELDS) if values.get("source", "preset") == "preset" else {"preset"}
    query = {}
    for key in PLAN_DEFAULTS:
        if key in skip or key not in values:
            continue
        value = values[key]
        if key == "source" and value == "hf-config":
            value = "custom"  # an uploaded config travels as its architecture fields
        query[key] = str(int(value)) if isinstance(value, bool) else str(value)
    return query


def call_values_from_query(params: Mapping) -> tuple[dict, list[str]]:
    """Attention-call form values from a query string; errors for malformed parameters."""
    values, errors = dict(CALL_DEFAULTS), []
    for key, raw in params.items():
        if key not in CALL_DEFAULTS or key == "mask_size":
            continue
        try:
            if key == "mask":  # none | bool | float | window:W | document:K, as the CLI and CSV spell it
                kind, window, documents = parse_mask(_first(raw))
                values["mask"], values["mask_size"] = kind, (window or documents if kind in STRUCTURED_MASKS else 0)
            else:
                values[key] = _coerce(key, _first(raw), _CALL_INT_LIMITS, _CALL_CHOICES)
        except ValueError as exc:
            errors.append(f"URL parameter {exc}")
    return values, errors


def call_mask(values: Mapping) -> str:
    """The form's mask kind and size as the estimator spells the mask: 'window:49', 'document:4', 'bool'."""
    kind = values.get("mask", "none")
    if kind not in STRUCTURED_MASKS:
        return kind
    size = values.get("mask_size") or 0
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= MAX_SEQ_LEN:
        what = "window W (keys)" if kind == "window" else "documents K"
        raise ValueError(f"mask_size: a {kind} mask needs its {what} as a positive integer, got {size!r}")
    return f"{kind}:{size}"


def call_kwargs(values: Mapping) -> dict:
    """AttentionCall's fields from the call form's values (the GPU is separate)."""
    out = {k: v for k, v in values.items() if k not in ("gpu", "mask_size")}
    out["mask"] = call_mask(values)
    return out


def call_query_from_values(values: Mapping) -> dict[str, str]:
    query = {k: str(int(v)) if isinstance(v, bool) else str(v) for k, v in values.items()
             if k in CALL_DEFAULTS and k != "mask_size"}
    if "mask" in values:
        query["mask"] = call_mask(values)
    return query


# --- form values → the estimator's configs (ValueError naming the field on bad input) ---------------------------


def spec_from_config_bytes(data: bytes, name: str = "config"):
    """A ModelSpec from an uploaded Hugging Face config.json: its bytes, never a path (a JSON string is refused
    as not an object, so an upload cannot name a file on the server)."""
    from estimator.model.hf_config import from_hf_config_bytes

    return from_hf_config_bytes(data, name=name)


def arch_values(spec) -> dict:
    """The form's architecture fields for a ModelSpec (so an uploaded config can travel in the URL)."""
    return {"layers": spec.layers, "hidden": spec.hidden, "heads": spec.q_heads, "kv_heads": spec.kv_heads,
            "head_dim": spec.head_dim, "ffn": spec.ffn, "vocab": spec.vocab, "gated_ffn": spec.gated_ffn,
            "tied_embeddings": spec.tied_embeddings}


def model_from_values(values: Mapping, config_spec=None):
    """The model the form describes: a preset, the uploaded config, or the custom architecture fields."""
    from estimator.model.presets import get_preset
    from estimator.model.specs import ModelSpec

    source = values.get("source", "preset")
    if source == "preset":
        return get_preset(values["preset"])
    if source == "hf-config":
        if config_spec is None:
            raise ValueError("config: upload a Hugging Face config.json first")
        return config_spec
    return ModelSpec(name="custom", layers=values["layers"], hidden=values["hidden"], q_heads=values["heads"],
                     kv_heads=values["kv_heads"], head_dim=values["head_dim"], ffn=values["ffn"],
                     vocab=values["vocab"], gated_ffn=bool(values["gated_ffn"]),
                     tied_embeddings=bool(values["tied_embeddings"]))


def plan_inputs(values: Mapping, config_spec=None):
    """PlanInputs from form values (window 0 = the model's own windows)."""
    from estimator.model.inputs import PlanInputs

    def optional(key: str):  # fields older URLs and other pages may leave out
        return values.get(key, PLAN_DEFAULTS[key])

    return PlanInputs(model=model_from_values(values, config_spec), seq_len=values["seq_len"], batch=values["batch"],
                      dtype=values["dtype"], kv_dtype=values["kv_dtype"], mode=values["mode"],
                      checkpointing=values["checkpointing"], window=values["window"] or None,
                      backend=values["backend"], gpu=values["gpu"], gpus=values["gpus"], tp=values["tp"],
                      cp=values["cp"], zero=optional("zero"), micro_batch=optional("micro_batch") or None,
                      sequence_parallel=bool(optional("sequence_parallel")), logits=optional("logits"),
                      precision=None if optional("precision") == "auto" else values["precision"],
                      optimizer=optional("optimizer"), finetune=optional("finetune"),
                      lora_rank=optional("lora_rank"), lora_targets=optional("lora_targets"))


def default_seq_len(preset: str) -> int | None:
    """The n a preset is planned at first: an encoder's native tokens (vit-l-16: 197), else the context the
    model was trained for (llama-3-8b: 8,192); None when the preset does not say."""
    from estimator.model.hybrid import get_hybrid_preset
    from estimator.model.presets import get_preset
    from estimator.model.vision_presets import get_vision_preset

    if get_hybrid_preset(preset) is not None:  # a state-space / hybrid preset: its prefill at 4,096 tokens
        return 4096
    vision = get_vision_preset(preset)
    if vision is not None:  # a vision-language preset: n counts the text tokens; Swin: the image gives them
        return 512 if hasattr(vision, "lm") else None
    spec = get_preset(preset)
    if spec.kind == "encoder":
        return spec.native_tokens
    return spec.max_positions


PLAN_DEFAULTS: dict = _plan_defaults()


def check_form_values(values: Mapping) -> None:
    """Form values out of range are an error naming the field (the widgets do not clamp them, so that a 0 or a
    negative number is never silently planned as something else)."""
    for key, limit in _INT_LIMITS.items():
        if key in ARCH_FIELDS and values.get("source", "preset") != "custom":
            continue  # a preset's or a config's own architecture
        if key in values:
            check_positive_int(key, values[key], limit)
    for key, limit in (("window", MAX_SEQ_LEN), ("micro_batch", 1 << 20)):
        value = values.get(key) or 0
        if not 0 <= value <= limit:
            raise ValueError(f"{key}: must be 0 (none) or a positive integer up to {limit:,}, got {value!r}")


def current_plan_inputs(session: Mapping):
    """The plan the planning page last built in this session, or the defaults' (ValueError if invalid)."""
    return session.get("plan_inputs") or plan_inputs(PLAN_DEFAULTS)
