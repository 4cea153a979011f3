"""`python -m validation model --config PATH | --preset NAME [the plan's flags]`: your own model, your workload, one
GPU, no torchrun. The measured row beside the plan's figures, component by component and phase by phase.

    python -m validation model --config my/config.json --seq-len 8192 --mode training --precision bf16-mixed \\
        --out measured.csv [--layers 4 | --fit-layers] [--decode-tokens 16] [--force] [--timeout-s 600]

The flags are `python -m estimator plan`'s own (estimator/cli/plan.py add_plan_arguments: seq len, batch, dtype,
mode, precision, optimizer, checkpointing, backend, kv options, ...), so the plan is the one the planner prints for
them. The model is built from the config dict exactly as written (random weights, nothing downloaded) through
`AutoConfig.for_model(model_type, **config)` and `AutoModelForCausalLM.from_config`: any model_type transformers
knows, not only validation/model/hf_configs.py's families. `--layers N` cuts the config itself (num_hidden_layers,
its layer_types pattern: validation.model.hf_configs.cut_layers) and the plan is made for the cut config;
`--fit-layers` cuts to the most layers the guard lets run. The row says so (`layers_cut_from`).

The measurement is `validation.hf_models`' (validation/model/hf_models.py run_case on its ModelSlot, after the same
warm-up; protocols in validation/model/hf_runs.py), so a row equals what `python -m validation.hf_models --cases`
measures for the same case. --mode training is the training protocol (step 1, then step 2 phase by phase:
forward, backward, optimizer); --mode inference is a bfloat16 prefill keeping its KV cache, then --decode-tokens
single-token steps. A forced SDPA backend (math, flash, efficient, cudnn) runs under
torch.nn.attention.sdpa_kernel([it]).

The guard is `python -m validation run`'s (validation/call/guard.py CLI_GUARD): the plan's peak (its total less
the CUDA context) must leave the margin of the free memory; the predicted time of the case's calls must be under
--timeout-s, which also bounds the run (SIGALRM, as validation/call/runner.py time_limit); --force skips both
checks. An out-of-memory error is a row (`oom`, with the phase), never a crash. What the plan cannot be measured
as here (tp/cp/ep > 1: that is torchrun's `validation model --family`; selective or full checkpointing; a KV dtype
other than the model's) is refused with a one-line error naming the flag.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from dataclasses import replace

from estimator.cli.plan import add_plan_arguments, inputs_from_args
from validation.errors import first_line
from validation.model import own_plan
from validation.model.hf_configs import cut_layers

OWN_COLUMNS = ["config_source", "layers_cut_from", "sdpa_backend", "gpu"]
ARCH_OVERRIDES = ("hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab")
DEFAULT_DECODE_TOKENS = 16
MAX_TIMEOUT_S = 24 * 3600.0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m validation model", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_plan_arguments(p)
    p.set_defaults(gpu=None)  # detected from the device (h200 on a CPU), unless --gpu names one
    own = p.add_argument_group("measuring")
    own.add_argument("--out", required=True, help="output CSV: one row, the measurement beside the plan")
    own.add_argument("--append", action="store_true", help="append the row to --out (same columns)")
    own.add_argument("--fit-layers", action="store_true",
                     help="cut the model to the most layers the guard lets run (the plan is made for the cut)")
    own.add_argument("--decode-tokens", type=int, default=None,
                     help=f"inference: single-token decode steps after the prefill (default {DEFAULT_DECODE_TOKENS})")
    own.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when torch sees a GPU, else cpu")
    own.add_argument("--force", action="store_true", help="run even when the guard predicts it does not fit")
    own.add_argument("--timeout-s", type=float, default=600.0, help="time limit of the run in seconds; 0 = none")
    return p


# ------------------------------------------------------------------------------------------------ the model


def read_config(args) -> tuple[dict, str]:
    """(config dict to build, where it came from): the --config file, or the --preset's config."""
    from estimator.model.presets import get_preset
    from estimator.textfile import MAX_CONFIG_BYTES, read_json_limited
    from validation.model.spec_configs import config_for_spec

    if bool(args.preset) == bool(args.config):
        raise ValueError("--config: give --config PATH or --preset NAME (one of them)")
    for flag in ARCH_OVERRIDES:
        if getattr(args, flag) is not None:
            raise ValueError(f"--{flag.replace('_', '-')}: validation model builds the config as written; edit the "
                             "config.json (only --layers cuts it)")
    if args.config:
        cfg = read_json_limited(args.config, MAX_CONFIG_BYTES, "config")
        if not isinstance(cfg, dict):
            raise ValueError("config: expected a JSON object at the top level")
        source = os.path.basename(args.config)
    else:
        cfg = config_for_spec(get_preset(args.preset), args.preset.lower())
        source = f"preset {args.preset.lower()}"
    return flat_config(cfg), source


def family_of(args, cfg: dict) -> str:
    """The row's `family`: the hf_configs family a preset is built from, else the config's model_type."""
    from validation.model.spec_configs import PRESET_FAMILY

    return PRESET_FAMILY.get((args.preset or "").lower()) or str(cfg["model_type"])


def flat_config(cfg: dict) -> dict:
    """The decoder's config: a multimodal file's `text_config` (as estimator/model/hf_config.py reads it)."""
    cfg = copy.deepcopy(cfg)
    if isinstance(cfg.get("text_config"), dict) and "num_hidden_layers" not in cfg:
        text = cfg["text_config"]
        cfg = {**text, "model_type": text.get("model_type") or cfg.get("model_type"),
               "tie_word_embeddings": cfg.get("tie_word_embeddings", text.get("tie_word_embeddings"))}
    if not cfg.get("model_type"):
        raise ValueError("config: no model_type: transformers needs it to build the model (\"model_type\": \"llama\")")
    if not isinstance(cfg.get("num_hidden_layers"), int) or cfg["num_hidden_layers"] < 1:
        raise ValueError("config: num_hidden_layers must be a positive integer")
    return cfg


def plan_inputs(args, cfg: dict, label: str, gpu: str):
    """The plan's inputs for the config dict as it will be built (the estimator CLI's own flag handling)."""
    ns = copy.copy(args)
    ns.preset, ns.config, ns.layers, ns.gpu = None, cfg, None, gpu
    inputs = inputs_from_args(ns)
    return replace(inputs, model=replace(inputs.model, name=label))


def cut(cfg: dict, layers: int) -> dict:
    return cut_layers(copy.deepcopy(cfg), layers)


def fit_layers(args, cfg: dict, label: str, gpu: str, free_bytes: int) -> int:
    """The most layers (at most the config's) whose plan passes the guard in `free_bytes`; ValueError if none."""
    from estimator.model.plan import make_plan
    from validation.call.guard import CLI_GUARD

    def passes(n: int) -> bool:
        plan = make_plan(plan_inputs(args, cut(cfg, n), label, gpu), solve=False)
        return plan.supported and not CLI_GUARD.blocks(own_plan.planned_peak(plan), free_bytes)

    lo, hi = 0, cfg["num_hidden_layers"]
    while lo < hi:  # the plan grows with the layers: the largest n that passes
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if passes(mid) else (lo, mid - 1)
    if lo == 0:
        raise ValueError("--fit-layers: even one layer is predicted not to fit in the free memory")
    return lo


# -------------------------------------------------------------------------------------------------- running


def detect(args) -> tuple[str, str]:
    """(device, catalog GPU the plan is for)."""
    import torch

    from estimator.hardware import get_gpu, gpu_from_device_name

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device: cuda requested but torch sees no GPU (this machine runs on cpu)")
    gpu = args.gpu
    if gpu is None:
        gpu = gpu_from_device_name(torch.cuda.get_device_name()) if device == "cuda" else "h200"
        if gpu is None:
            raise ValueError(f"--gpu: cannot map {torch.cuda.get_device_name()!r} to the catalog; pass --gpu NAME")
    return device, get_gpu(gpu).name


def prepare(args) -> dict:
    """Everything decided before the GPU is touched: config (cut), plan, case, guard. ValueError on bad input."""
    if not 0 <= args.timeout_s <= MAX_TIMEOUT_S:
        raise ValueError(f"--timeout-s: expected seconds in [0, {MAX_TIMEOUT_S:g}] (0 = none), got {args.timeout_s}")
    if args.decode_tokens is not None and not 0 <= args.decode_tokens <= 4096:
        raise ValueError(f"--decode-tokens: expected 0..4096, got {args.decode_tokens}")
    from estimator.cli.plan import image_request
    from validation.call.runner import free_bytes

    device, gpu = detect(args)
    if image_request(args) is not None:  # a Swin or a vision-language model (with --text-only: its text decoder)
        raise ValueError("--config: image models are measured by python -m validation.hf_models' vision families "
                         "(validation/model/hf_vision.py); this command builds causal language models (--text-only "
                         "measures a vision-language model's text decoder)")
    cfg, source = read_config(args)
    full_layers = cfg["num_hidden_layers"]
    layers = full_layers
    if args.layers is not None:
        from estimator.cli.plan import _int

        layers = min(_int("--layers", args.layers), full_layers)
    free = free_bytes(device)
    label = f"{source} ({layers} layers)"
    if args.fit_layers:
        if args.force:
            raise ValueError("--fit-layers: cuts to what the guard allows; --force skips the guard (give one)")
        if free is not None:
            layers = min(layers, fit_layers(args, cut(cfg, layers), source, gpu, free))
            label = f"{source} ({layers} layers)"
    built = cut(cfg, layers)
    refused = ""
    try:
        inputs = plan_inputs(args, built, label, gpu)
    except ValueError as exc:  # a model the planner does not read is still measured, its refusal in the row
        if not str(exc).startswith("--config:"):
            raise
        refused = first_line(exc).removeprefix("--config: ")
        try:  # the workload flags are checked on the config's sizes read as Llama's; this is never planned
            inputs = plan_inputs(args, {**built, "model_type": "llama"}, label, gpu)
        except ValueError:
            raise exc from None
    case, sdpa_backend = own_plan.case_of(inputs, built, args.decode_tokens, DEFAULT_DECODE_TOKENS,
                                          family_of(args, cfg))
    plan, plan_error = (None, refused) if refused else own_plan.make(inputs)
    reason = "" if args.force else own_plan.guard_reason(plan, plan_error, case, free, args.timeout_s)
    return {"device": device, "gpu": gpu, "config": built, "source": source, "case": case, "inputs": inputs,
            "plan": plan, "plan_error": plan_error, "sdpa_backend": sdpa_backend, "guard_reason": reason,
            "layers_cut_from": full_layers if layers != full_layers else ""}


def measure(prep: dict, timeout_s: float, on_phase=None) -> dict:
    """The row: run_case of validation.hf_models on the prepared case (unless the guard refused it)."""
    import torch

    from validation.call.runner import CaseTimeout, time_limit
    from validation.model import hf_models
    from validation.model.hf_runs import Dev, PhaseBox, run_prefill, run_train

    case = prep["case"]
    try:
        import transformers

        trv = transformers.__version__
    except ImportError:
        trv = ""
    dev = Dev(prep["device"])
    row = {k: v for k, v in case.items() if k != "config"}
    row.update(torch_version=torch.__version__, transformers_version=trv, device_name=dev.name(), tiny=0,
               config_source=prep["source"], layers_cut_from=prep["layers_cut_from"],
               sdpa_backend=prep["sdpa_backend"], gpu=prep["gpu"])
    row.update(own_plan.plan_columns(prep["plan"], prep["plan_error"]))
    if prep["guard_reason"]:
        row.update(status="skipped_guard", reason=prep["guard_reason"])
        return row

    class Box(PhaseBox):  # reports each phase as the run enters it
        _phase = "setup"

        @property
        def phase(self):
            return self._phase

        @phase.setter
        def phase(self, value):
            self._phase = value
            if on_phase is not None:
                on_phase(value)

    run_fn = run_train if case["mode"] == "train" else run_prefill
    if prep["sdpa_backend"]:
        run_fn = own_plan.forced(run_fn, prep["sdpa_backend"])
    slot = hf_models.ModelSlot(dev, tiny=False)
    try:
        with time_limit(timeout_s):
            if on_phase is not None:
                on_phase("warm-up")
            slot.warm_baseline = hf_models.warm_up(dev)
            hf_models.run_case(case, slot, dev, row, run_fn, box=Box())
    except CaseTimeout as exc:
        row.update(status="error", reason=f"timeout: {exc} (--timeout-s)")
    finally:
        slot.free()
    row.update(own_plan.compare(row))
    return row


def columns() -> list[str]:
    """The row's columns: validation.hf_models' (imported here: it loads torch), then ours, the plan's, the
    comparison's."""
    from validation.model.hf_models import COLUMNS as HF_COLUMNS

    return HF_COLUMNS + OWN_COLUMNS + own_plan.PLAN_COLUMNS + own_plan.COMPARE_COLUMNS


def write_row(path: str, row: dict, append: bool) -> None:
    from validation.model.distributed import write_rows

    write_rows(path, [row], append, columns())


def run_command(args) -> int:
    """The command (validation/cli.py dispatches here): prepare, measure, write, explain."""
    from validation.model.own_report import explain

    started = time.perf_counter()
    prep = prepare(args)

    def on_phase(name: str) -> None:
        print(f"phase: {name} ({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)

    row = measure(prep, args.timeout_s, on_phase)
    write_row(args.out, row, args.append)
    for line in explain(row):
        print(line, file=sys.stderr)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0 if row.get("status") == "ok" else 1


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return run_command(args)
    except ValueError as exc:
        print(f"error: {first_line(exc)}", file=sys.stderr)
        return 2
