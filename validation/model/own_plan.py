"""The plan's side of `validation model --config/--preset` (validation/model/own_model.py): which measured case a
plan is (`case_of`, refusing by flag what one GPU cannot run as planned), the guard (`guard_reason`), the plan's
figures per phase and component (`plan_columns`) and the measured ones beside them (`compare`, over `PARTS`).

Planned figures are on the allocator's scale of validation.model.hf_models' columns: absolute
max_memory_allocated() (cuBLAS workspaces and weights included), the CUDA context left out (the allocator does
not see it: validation/model/model_report.py compares the same way). Per phase, from the plan's own model
(estimator/model/budget.py, activations.py training_peak, state.py optimizer_step_bytes): forward + backward peak =
workspaces + weights + optimizer state + the activation-detail `backward_peak_bytes`; optimizer-step peak =
workspaces + weights + optimizer state + the step's gradients and temporaries.
"""

from __future__ import annotations

import functools

from validation.errors import first_line

# The plan's SDPA backend -> torch.nn.attention.SDPBackend member the measured run is forced to
FORCED = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}
ATTN_OF = {"auto": "sdpa", "eager": "eager", "flex": "flex_attention", **{b: "sdpa" for b in FORCED}}

# (key, mode, phase, component, measured column, planned column, unit)
PARTS = (
    ("params", "both", "build", "parameters", "n_params", "plan_params", "count"),
    ("workspace", "both", "build", "cuBLAS workspaces (the warm-up's)", "baseline_bytes", "plan_workspace_bytes",
     "bytes"),
    ("weights", "both", "build", "weights", "weights_bytes", "plan_weights_bytes", "bytes"),
    ("state", "train", "step 1", "optimizer state, fp32 masters (kept)", "state_bytes", "plan_state_bytes", "bytes"),
    ("fwd_bwd", "train", "forward + backward", "peak allocated", "peak_forward_backward_bytes",
     "plan_fwd_bwd_peak_bytes", "bytes"),
    ("optimizer_peak", "train", "optimizer step", "peak allocated", "peak_optimizer_bytes",
     "plan_optimizer_peak_bytes", "bytes"),
    ("kv_cache", "prefill", "prefill", "KV cache", "kv_cache_bytes", "plan_kv_cache_bytes", "bytes"),
    ("transient", "both", "peak", "the step's tensors at the peak (peak less workspaces, weights, kept state or KV "
     "cache)", "transient_bytes", "plan_transient_bytes", "bytes"),
    ("peak", "both", "peak", "peak allocated", "peak_bytes", "plan_peak_bytes", "bytes"),
    ("forward_ms", "train", "forward", "time", "time_forward_ms", "plan_forward_ms", "ms"),
    ("backward_ms", "train", "backward", "time", "time_backward_ms", "plan_backward_ms", "ms"),
    ("optimizer_ms", "train", "optimizer step", "time", "time_optimizer_ms", "plan_optimizer_ms", "ms"),
    ("step_ms", "train", "whole step", "time (median)", "time_step_ms", "plan_step_ms", "ms"),
    ("prefill_ms", "prefill", "prefill", "time (median)", "time_prefill_ms", "plan_prefill_ms", "ms"),
    ("decode_ms", "prefill", "decode", "time per token (steady)", "decode_warm_ms_per_token",
     "plan_decode_ms_per_token", "ms"),
)
# the plan's stated error band (measured / planned - 1) per headline time; other phase times: within 15%
BANDED = {"step_ms": "step", "prefill_ms": "prefill", "decode_ms": "decode"}
PHASE_TIME_TOLERANCE = 0.15  # as validation/model/model_report.py TIME_TOLERANCE

PLAN_COLUMNS = ["plan_model", "plan_error", "plan_fits", "plan_selected_backend",
                *dict.fromkeys(p[5] for p in PARTS), "plan_band"]
COMPARE_COLUMNS = ["peak_forward_backward_bytes", "transient_bytes",
                   *(f"{p[0]}_err" for p in PARTS), "peak_within_tolerance", "time_within_band", "worst_part"]


def case_of(inputs, cfg: dict, decode_tokens: int | None, default_decode: int, family: str) -> tuple[dict, str]:
    """(the hf_models case for these plan inputs on one GPU, the forced SDPA backend or ''). ValueError naming the
    flag for what the measured protocols (validation/model/hf_runs.py) cannot run as planned."""
    if inputs.tp != 1 or inputs.cp != 1 or inputs.ep != 1 or (inputs.gpus or 1) != 1:
        raise ValueError("--gpus: this command runs one GPU; tp/cp/ep/dp run under torchrun "
                         "(torchrun --nproc-per-node N -m validation model --family ...)")
    if inputs.backend not in ATTN_OF:
        raise ValueError(f"--backend: {inputs.backend} is planned but not measured here; one of: {', '.join(ATTN_OF)}")
    if inputs.window is not None:
        raise ValueError("--window: the model runs its config's own windows; set sliding_window in the config.json")
    if inputs.kv_layout != "hf":
        raise ValueError("--kv-layout: transformers stores the cache as `hf`; other layouts are planned only")
    if inputs.model.kind != "decoder":
        raise ValueError("--config: an image encoder is measured by python -m validation.hf_models' vision families "
                         "(validation/model/hf_vision.py); this command builds causal language models")
    training = inputs.mode == "training"
    case = {"family": family, "layers": cfg["num_hidden_layers"], "attn_implementation": ATTN_OF[inputs.backend],
            "overrides": "", "no_reset": 0, "seq_len": inputs.seq_len, "batch": inputs.batch, "image_size": "",
            "images": 0, "trainable": "all", "config": cfg,
            # the fine-tuning recipe (validation/model/hf_finetune.py builds it: peft LoRA, NF4 QLoRA)
            "finetune": inputs.finetune, "lora_rank": inputs.lora_rank, "lora_targets": inputs.lora_targets}
    if training:
        if inputs.checkpointing not in ("none", "hf"):
            raise ValueError(f"--checkpointing: {inputs.checkpointing} is planned only; measured: none, hf "
                             "(model.gradient_checkpointing_enable())")
        for flag, planned_only in (("--zero", inputs.zero), ("--persistent-grads", inputs.persistent_grads),
                                   ("--sequence-parallel", inputs.sequence_parallel),
                                   ("--micro-batch", inputs.micro_batch not in (None, inputs.batch))):
            if planned_only:
                raise ValueError(f"{flag}: planned only; the measured step is one pass, gradients set to None")
        if decode_tokens:
            raise ValueError("--decode-tokens: applies to --mode inference")
        case.update(mode="train", precision=inputs.recipe.name, optimizer=inputs.optimizer,
                    checkpointing=inputs.checkpointing, decode_tokens=0)
    else:
        if inputs.dtype != "bfloat16":
            raise ValueError(f"--dtype: the measured prefill runs a bfloat16 model, not {inputs.dtype}")
        if inputs.kv_dtype not in (None, inputs.dtype):
            raise ValueError(f"--kv-dtype: transformers' cache holds the model's dtype, not {inputs.kv_dtype}")
        if inputs.logits != "last":
            raise ValueError("--logits: the measured prefill keeps the last position's logits (logits_to_keep=1)")
        case.update(mode="prefill", precision="bf16-true", optimizer="adamw", checkpointing="none",
                    decode_tokens=default_decode if decode_tokens is None else decode_tokens)
    return case, inputs.backend if inputs.backend in FORCED else ""


def make(inputs):
    """(plan, '') or (None, the planner's one-line reason)."""
    from estimator.model.plan import make_plan

    try:
        plan = make_plan(inputs, solve=False)
    except ValueError as exc:
        return None, first_line(exc, 300)
    return plan, "" if plan.supported else first_line(plan.verdict, 300)


def planned_peak(plan) -> int:
    from estimator.call.attention import CUDA_CONTEXT_BYTES

    return plan.total_bytes - CUDA_CONTEXT_BYTES


def predicted_s(plan, case: dict) -> float:
    """Seconds of GPU work the case runs, by the plan: four training steps; or five prefills (the measured one,
    a warm pass when decoding, three timed) and two decode passes."""
    if case["mode"] == "train":
        return 4 * plan.step_time_ms / 1e3
    decode = 2 * case["decode_tokens"] * (plan.decode_time_ms_per_token or 0.0)
    return (5 * plan.prefill_time_ms + decode) / 1e3


def guard_reason(plan, plan_error: str, case: dict, free_bytes: int | None, timeout_s: float) -> str:
    """Why the guard refuses the case ('' when it may run): validation run's CLI_GUARD on the plan's peak, and the
    predicted time against --timeout-s."""
    from validation.call.guard import CLI_GUARD

    if plan is None or plan_error:
        return f"the plan has no figure to guard with ({plan_error}); --force runs it anyway"
    need = planned_peak(plan)
    if free_bytes is not None and CLI_GUARD.blocks(need, free_bytes):
        return (f"predicted {need / 2**30:,.2f} GiB does not fit {free_bytes / 2**30:,.2f} GiB free with the margin "
                "(need x 1.1 + 512 MiB); cut layers (--layers N, --fit-layers) or --force")
    seconds = predicted_s(plan, case)
    if timeout_s and seconds > timeout_s:
        return f"predicted {seconds:,.1f} s of GPU work exceeds --timeout-s {timeout_s:g}; --force runs it"
    return ""


def plan_columns(plan, plan_error: str) -> dict:
    """The plan's figures for the row (only plan_error when there is no plan)."""
    if plan is None:
        return {"plan_error": plan_error}
    from estimator.model.state import optimizer_step_bytes

    inputs = plan.inputs
    training = inputs.mode == "training"
    comp = {c.key: c.bytes for c in plan.components}
    kept = plan.workspace_bytes + plan.weights_bytes + (plan.optimizer_bytes if training else plan.kv_cache_bytes)
    out = {"plan_model": inputs.model.name, "plan_error": plan_error, "plan_fits": plan.fits,
           "plan_params": plan.params, "plan_selected_backend": plan.selected_backend,
           "plan_workspace_bytes": comp.get("cublas_workspace"), "plan_weights_bytes": plan.weights_bytes,
           "plan_peak_bytes": planned_peak(plan), "plan_transient_bytes": planned_peak(plan) - kept}
    band = plan.time_model.get("error_band", {})
    out["plan_band"] = "; ".join(f"{k} {lo:+.2f}..{hi:+.2f}" for k, (lo, hi) in band.items())
    if training:
        split = plan.time_split
        base = plan.workspace_bytes + plan.weights_bytes + plan.optimizer_bytes
        out.update(plan_state_bytes=plan.optimizer_bytes,
                   plan_fwd_bwd_peak_bytes=base + plan.activation_detail.get("backward_peak_bytes", 0),
                   plan_optimizer_peak_bytes=base + sum(optimizer_step_bytes(inputs)),
                   plan_forward_ms=round(sum(split.get("forward", {}).values()), 4),
                   plan_backward_ms=round(sum(split.get("backward", {}).values()), 4),
                   plan_optimizer_ms=round(sum(split.get("optimizer", {}).values()), 4),
                   plan_step_ms=round(plan.step_time_ms, 4))
    else:
        out.update(plan_kv_cache_bytes=plan.kv_cache_bytes, plan_prefill_ms=round(plan.prefill_time_ms, 4),
                   plan_decode_ms_per_token=None if plan.decode_steady_ms_per_token is None
                   else round(plan.decode_steady_ms_per_token, 4))  # against the warm (steady) steps
    return out


def _num(value):
    if value in (None, ""):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def parts_of(row: dict) -> list[tuple]:
    mode = row.get("mode")
    return [p for p in PARTS if p[1] in ("both", mode)]


def bands(row: dict) -> dict[str, tuple[float, float]]:
    """The plan's error bands from the row's plan_band ('prefill -0.08..+0.17; step ...')."""
    out = {}
    for item in str(row.get("plan_band") or "").split(";"):
        name, _, rng = item.strip().partition(" ")
        lo, sep, hi = rng.partition("..")
        if sep:
            out[name] = (float(lo), float(hi))
    return out


def part_ok(key: str, unit: str, measured: float, planned: float, band: dict) -> bool:
    from validation.call.schema import tolerance_bytes

    if unit == "count":
        return planned == measured
    if unit == "bytes":
        return abs(planned - measured) <= tolerance_bytes(measured)
    ratio = measured / planned - 1 if planned else float("inf")  # the band's quantity
    lo, hi = band.get(BANDED.get(key, ""), (-PHASE_TIME_TOLERANCE, PHASE_TIME_TOLERANCE))
    return lo <= ratio <= hi


def compare(row: dict) -> dict:
    """Derived measured columns and, per part, planned / measured - 1; whether the peak is within max(3%, 2 MiB)
    and the headline time within the plan's band; the part furthest outside (bytes first)."""
    out: dict = {}
    if row.get("status") != "ok":
        return out
    peaks = [_num(row.get(k)) for k in ("peak_forward_bytes", "peak_backward_bytes")]
    if all(p is not None for p in peaks):
        out["peak_forward_backward_bytes"] = int(max(peaks))
    kept = ("state_bytes",) if row.get("mode") == "train" else ("kv_cache_bytes",)
    values = [_num(row.get(k)) for k in ("peak_bytes", "baseline_bytes", "weights_bytes", *kept)]
    if all(v is not None for v in values):
        out["transient_bytes"] = int(values[0] - sum(values[1:]))
    merged, band, worst = {**row, **out}, bands(row), None
    for key, _mode, _phase, _component, mcol, pcol, unit in parts_of(row):
        if unit == "ms" and str(row.get("device_name")) == "cpu":
            continue  # the plan's times are for a GPU of the catalog
        measured, planned = _num(merged.get(mcol)), _num(merged.get(pcol))
        if measured is None or planned is None or measured <= 0:
            continue
        out[f"{key}_err"] = round(planned / measured - 1, 4)
        ok = part_ok(key, unit, measured, planned, band)
        if key == "peak":
            out["peak_within_tolerance"] = ok
        if key in BANDED and ("time_within_band" not in out or not ok):
            out["time_within_band"] = ok
        miss = abs(planned - measured) if unit == "bytes" else None
        if not ok and key not in ("peak", "transient") and (worst is None or (miss or 0) > worst[1]):
            worst = (key, miss or 0)
    out["worst_part"] = worst[0] if worst else ""
    return out


def forced(run_fn, backend: str):
    """run_fn under torch.nn.attention.sdpa_kernel([the backend]): the plan's forced SDPA backend."""
    @functools.wraps(run_fn)
    def run(*args, **kwargs):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([getattr(SDPBackend, FORCED[backend])]):
            return run_fn(*args, **kwargs)
    return run
