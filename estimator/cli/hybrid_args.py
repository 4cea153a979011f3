"""`plan` for a state-space / hybrid model (a hybrid preset, or a config.json whose model_type is mamba2, falcon_h1 or
bamba): the prefill and one decode step, or one training step (`--mode training`: bf16-true, no checkpointing), on
transformers' torch fallback (estimator/model/hybrid_plan.py, hybrid_train.py)."""

from __future__ import annotations

from pathlib import Path

from estimator.model.hybrid import claims_config, get_hybrid_preset, hybrid_from_hf_config
from estimator.model.hybrid_plan import hybrid_plan
from estimator.model.hybrid_train import OPTIMIZERS as TRAIN_OPTIMIZERS
from estimator.textfile import MAX_CONFIG_BYTES, read_json_limited
from estimator.units import gib

TRUE_PRECISION = {"bfloat16": "bf16-true", "float16": "16-true"}

# plan flags that do not apply to these plans (with the value that means "not given")
_UNUSED = (("backend", (None, "auto")), ("tp", (None, 1)), ("cp", (None, 1)),
           ("window", (None,)), ("kv_dtype", (None,)), ("checkpointing", (None, "none")),
           ("xlsx", (None,)), ("trace", (None,)), ("smallest_gpu", (False, None)))


def load_hybrid(args):
    """The HybridSpec the flags name, or None for every other model."""
    if args.preset:
        spec = get_hybrid_preset(args.preset)
        if spec is not None and args.config:
            raise ValueError("--preset: give either --preset or --config, not both")
        return spec
    if not args.config:
        return None
    path = Path(args.config)
    cfg = read_json_limited(path, MAX_CONFIG_BYTES, "config")
    if not isinstance(cfg, dict):
        return None
    if not claims_config(cfg):
        return None
    return hybrid_from_hf_config(cfg, name=path.parent.name or path.stem)


def hybrid_request(args) -> dict | None:
    """The checked request of a hybrid plan: {"spec", "mode" (inference | training), "optimizer", "kw" (seq_len,
    batch, dtype, gpu)}, or None when the model is not a hybrid. A flag that does not apply is one error line."""
    spec = load_hybrid(args)
    if spec is None:
        return None
    for name, unset in _UNUSED:
        if str(getattr(args, name, None)) not in {str(u) for u in unset}:
            raise ValueError(f"--{name.replace('_', '-')}: does not apply to a state-space/hybrid plan (prefill and "
                             "decode, or a bf16-true training step, on the torch fallback)")
    mode = str(getattr(args, "mode", None) or "inference")
    if mode not in ("inference", "training"):
        raise ValueError(f"--mode: expected inference or training, got {mode!r}")
    if args.seq_len is None:
        raise ValueError("--seq-len: give the prefill (or training sequence) length")
    dtype = args.dtype or "bfloat16"
    precision = getattr(args, "precision", None)
    if mode == "inference" and precision is not None:
        raise ValueError("--precision: applies to --mode training only")
    if mode == "training" and precision not in (None, TRUE_PRECISION.get(dtype)):
        raise ValueError(f"--precision: a hybrid training step is priced as {TRUE_PRECISION.get(dtype, 'bf16-true')} "
                         f"(the model in {dtype}, no autocast), not {precision!r}")
    optimizer = getattr(args, "optimizer", None) or "adamw"
    if mode == "training" and optimizer not in TRAIN_OPTIMIZERS:
        raise ValueError(f"--optimizer: {optimizer!r} is not priced for a hybrid model; expected one of "
                         f"{', '.join(TRAIN_OPTIMIZERS)}")
    kw = dict(seq_len=_whole("--seq-len", args.seq_len), batch=_whole("--batch", args.batch or 1),
              dtype=dtype, gpu=args.gpu or "h200")
    return {"spec": spec, "mode": mode, "optimizer": optimizer, "kw": kw}


def hybrid_result(args) -> tuple[dict, str] | None:
    """(JSON-ready result, table text) of the hybrid plan the flags ask for, or None when the model is not one."""
    req = hybrid_request(args)
    if req is None:
        return None
    spec, kw = req["spec"], req["kw"]
    if req["mode"] == "training":
        plans = {"training": hybrid_plan(spec, mode="training", optimizer=req["optimizer"], **kw)}
    else:
        plans = {mode: hybrid_plan(spec, mode=mode, **kw) for mode in ("prefill", "decode")}
    first = next(iter(plans.values()))
    result = {"model": spec.name, "model_type": spec.model_type, "params": spec.params, "path": first.path,
              "source": spec.source}
    lines = [f"{spec.name} ({spec.model_type}, {spec.params:,} parameters; {spec.mamba_layers} Mamba2 / "
             f"{spec.attention_layers} attention layers) on {kw['gpu']}",
             f"priced path: {first.path}"]
    for mode, p in plans.items():
        result[mode] = {"fit_status": p.verdict.status, "verdict": p.verdict.text(), "total_bytes": p.total_bytes,
                        "weights_bytes": p.weights_bytes, "state_bytes": p.state_bytes,
                        "kv_cache_bytes": p.kv_cache_bytes, "activation_bytes": p.activation_bytes,
                        "allocator_reserve_bytes": p.verdict.allocator_reserve_bytes}
        timing = ""
        if p.time_ms is not None:
            lo, hi = p.time_band_ms
            result[mode].update(time_ms=round(p.time_ms, 3), time_band_ms=[round(lo, 3), round(hi, 3)])
            timing = f"; time ~{p.time_ms:,.0f} ms (measured band {lo:,.0f}-{hi:,.0f} ms)"
        if mode == "training":
            result[mode].update(optimizer_bytes=p.optimizer_bytes, gradient_bytes=p.gradient_bytes,
                                optimizer=p.detail["optimizer"], precision=p.detail["recipe"])
            lines.append(f"training ({p.detail['recipe']}, {p.detail['optimizer']}): weights {gib(p.weights_bytes)}, "
                         f"optimizer state {gib(p.optimizer_bytes)}, activations + gradients at the peak "
                         f"{gib(p.activation_bytes)} (gradients {gib(p.gradient_bytes)}) -> {p.verdict.text(gib)}"
                         f"{timing}")
            continue
        lines.append(f"{mode}: weights {gib(p.weights_bytes)}, state {gib(p.state_bytes)}, kv cache "
                     f"{gib(p.kv_cache_bytes)}, activations {gib(p.activation_bytes)} -> {p.verdict.text(gib)}"
                     f"{timing if p.time_ms is not None else '; time not modelled for decode'}")
    return result, "\n".join(lines)


def _whole(flag: str, value) -> int:
    try:
        return int(str(value).replace(",", "").replace("_", ""))
    except ValueError:
        raise ValueError(f"{flag}: expected a whole number, got {value!r}") from None
