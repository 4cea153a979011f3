"""`python -m estimator plan ...`: a whole-model capacity plan as a table, or one JSON object with `--json`
(docs/contract.md §3). Bad input is one line on stderr and exit status 2, never a traceback.

The advisor CLI reuses `add_plan_arguments` and `inputs_from_args`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from functools import partial

from estimator.call.config import KV_DTYPE_BITS
from estimator.call.registry import BACKENDS
from estimator.cli.vision_args import (
    add_image_arguments,
    encoder_token_dict,
    encoder_tokens,
    text_only_note,
    vision_request,
)
from estimator.files import refuse_same_file, strict_json
from estimator.hardware import CATALOG
from estimator.model.budget import Plan
from estimator.model.hf_config import from_hf_config
from estimator.model.inputs import (
    CHECKPOINTING,
    FINETUNES,
    LOGITS,
    LORA_TARGETS,
    MODES,
    PLAN_INPUT_DEFAULTS,
    PlanInputs,
)
from estimator.model.plan import make_plan
from estimator.model.presets import PRESETS, get_preset
from estimator.model.recipes import OPTIMIZERS, PRECISIONS
from estimator.model.specs import ModelSpec
from estimator.model.vision_presets import VISION_PRESETS
from estimator.units import gib

_gib = partial(gib, missing="-", mib_below_1gib=False)  # the table's style: always GiB
D = PLAN_INPUT_DEFAULTS  # every workload and hardware flag defaults to PlanInputs' own default

# PlanInputs / ModelSpec field → the flag that sets it, so that errors name what the user typed.
FLAG_OF = {"seq_len": "--seq-len", "batch": "--batch", "dtype": "--dtype", "kv_dtype": "--kv-dtype",
           "mode": "--mode", "checkpointing": "--checkpointing", "window": "--window", "backend": "--backend",
           "gpu": "--gpu", "gpus": "--gpus", "tp": "--tp", "cp": "--cp", "logits": "--logits",
           "layers": "--layers", "hidden": "--hidden", "q_heads": "--heads", "kv_heads": "--kv-heads",
           "head_dim": "--head-dim", "ffn": "--ffn", "vocab": "--vocab", "preset": "--preset", "config": "--config",
           "precision": "--precision", "optimizer": "--optimizer",
           "torch": "--torch", "sequence_parallel": "--sequence-parallel", "zero": "--zero",
           "micro_batch": "--micro-batch", "persistent_grads": "--persistent-grads", "kv_layout": "--kv-layout",
           "ep": "--ep", "gpus_per_node": "--gpus-per-node", "calibration": "--calibration",
           "gemm_efficiency": "--gemm-efficiency", "hbm_efficiency": "--hbm-efficiency",
           "finetune": "--finetune", "lora_rank": "--lora-rank", "lora_targets": "--lora-targets",
           "compile": "--compile"}
ARCH_FLAGS = {"layers": "layers", "hidden": "hidden", "heads": "q_heads", "kv_heads": "kv_heads",
              "head_dim": "head_dim", "ffn": "ffn", "vocab": "vocab"}


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """Every flag of contract §3 (and a few more) on `parser`."""
    model = parser.add_argument_group("model (a preset, a config.json, or the architecture flags)")
    model.add_argument("--preset", help=f"one of: {', '.join([*PRESETS, *VISION_PRESETS])}")
    model.add_argument("--config", metavar="PATH", help="a local Hugging Face config.json (never fetched)")
    for flag, help_text in (("--layers", "transformer layers"), ("--hidden", "model width"),
                            ("--heads", "query heads"), ("--kv-heads", "kv heads (default: --heads)"),
                            ("--head-dim", "head dimension (default: hidden / heads)"),
                            ("--ffn", "FFN intermediate size"), ("--vocab", "vocabulary size")):
        model.add_argument(flag, default=None, help=help_text + "; with --preset/--config it overrides")
    model.add_argument("--plain-ffn", action="store_true", help="architecture flags: 2-matrix MLP, not SwiGLU")
    model.add_argument("--tied", action="store_true", help="architecture flags: tied input/output embeddings")
    model.add_argument("--encoder", action="store_true",
                       help="architecture flags: bidirectional encoder without KV cache (no vocabulary head)")
    work = parser.add_argument_group("workload")
    work.add_argument("--seq-len", default=None, help="tokens per sequence (encoders: patches + 1)")
    work.add_argument("--batch", default=D["batch"], help=f"sequences in the job (default {D['batch']})")
    work.add_argument("--dtype", default=D["dtype"], help=f"float16, bfloat16 or float32 (default {D['dtype']})")
    work.add_argument("--kv-dtype", default=D["kv_dtype"],
                      help=f"KV cache: {', '.join(KV_DTYPE_BITS)} (default --dtype)")
    work.add_argument("--mode", default=D["mode"], help=f"{' or '.join(MODES)} (default {D['mode']})")
    work.add_argument("--checkpointing", default=D["checkpointing"], help=f"training: {', '.join(CHECKPOINTING)}")
    work.add_argument("--precision", default=D["precision"],
                      help=f"training: {', '.join(PRECISIONS)} (default from --dtype: bfloat16 -> bf16-mixed)")
    work.add_argument("--optimizer", default=D["optimizer"],
                      help=f"training: {', '.join(OPTIMIZERS)} (default {D['optimizer']})")
    work.add_argument("--finetune", default=D["finetune"],
                      help=f"training: {', '.join(FINETUNES)} (default {D['finetune']}; lora/qlora: peft adapters on a "
                      "frozen base, qlora over a bitsandbytes NF4 base)")
    work.add_argument("--lora-rank", default=D["lora_rank"], help=f"LoRA rank r (default {D['lora_rank']})")
    work.add_argument("--lora-targets", default=D["lora_targets"],
                      help=f"LoRA on the {', '.join(LORA_TARGETS)} projections (default {D['lora_targets']})")
    work.add_argument("--compile", action="store_true",
                      help="training: each decoder layer under torch.compile (planned as eager; see assumptions)")
    work.add_argument("--window", default=D["window"],
                      help="sliding window for every layer (default: the model's own)")
    work.add_argument("--backend", default=D["backend"], help=f"{', '.join(BACKENDS)} (default {D['backend']})")
    work.add_argument("--logits", default=D["logits"], help=f"inference logits: {' or '.join(LOGITS)} positions")
    work.add_argument("--kv-layout", default=D["kv_layout"], help="KV cache: hf (as transformers stores it; MLA: "
                      "latent), latent (MLA c_kv + rope key), per-head (MLA decompressed k, v)")
    hw = parser.add_argument_group("hardware")
    hw.add_argument("--gpu", default=D["gpu"], help=f"one of: {', '.join(CATALOG)} (default {D['gpu']})")
    hw.add_argument("--gpus", default=D["gpus"], help="total GPUs (default tp·cp; the rest is data parallel)")
    hw.add_argument("--tp", default=D["tp"], help="tensor-parallel degree")
    hw.add_argument("--cp", default=D["cp"], help="context-parallel degree")
    hw.add_argument("--ep", default=D["ep"], help="expert-parallel degree: MoE routed experts split ep ways")
    hw.add_argument("--gpus-per-node", default=D["gpus_per_node"],
                    help="GPUs per node: larger tp/cp/dp groups use the network")
    timing = parser.add_argument_group("time model")
    timing.add_argument("--calibration", default=D["calibration"],
                        help="kernel calibration JSON from `python -m validation calibrate` (default: the H200's)")
    timing.add_argument("--gemm-efficiency", default=D["gemm_efficiency"],
                        help="override: GEMMs at this fraction of peak (0-1]")
    timing.add_argument("--hbm-efficiency", default=D["hbm_efficiency"],
                        help="override: streaming at this fraction of HBM (0-1]")
    work.add_argument("--micro-batch", default=D["micro_batch"],
                      help="training: sequences per replica per pass; the rest is gradient accumulation")
    work.add_argument("--persistent-grads", action="store_true",
                      help="training: gradients stay allocated between steps (zero_grad(set_to_none=False))")
    hw.add_argument("--zero", default=D["zero"], help="training: ZeRO stage 0-3 over the data-parallel replicas")
    hw.add_argument("--sequence-parallel", action="store_true",
                    help="training with --tp: split norm and residual activations tp ways too (Megatron-LM)")
    hw.add_argument("--torch", dest="torch_version", default=D["torch_version"], help="PyTorch version modelled")
    add_image_arguments(parser)


def _model_from_args(args: argparse.Namespace) -> ModelSpec:
    arch = {field: getattr(args, flag) for flag, field in ARCH_FLAGS.items() if getattr(args, flag) is not None}
    if args.preset and args.config:
        raise ValueError("--preset: give either --preset or --config, not both")
    if args.preset:
        base = get_preset(args.preset)
    elif args.config:
        base = from_hf_config(args.config)
    else:
        required = {"layers": "--layers", "hidden": "--hidden", "q_heads": "--heads", "ffn": "--ffn"}
        if not args.encoder:
            required["vocab"] = "--vocab"
        missing = [flag for field, flag in required.items() if field not in arch]
        if missing:
            raise ValueError("--preset: give --preset, --config, or the architecture flags "
                             f"(missing {', '.join(missing)})")
        hidden, heads = _int("--hidden", arch["hidden"]), _int("--heads", arch["q_heads"])
        if "head_dim" not in arch and hidden % heads:
            raise ValueError(f"--head-dim: --hidden {hidden} is not divisible by --heads {heads}; give --head-dim")
        arch = {k: _int(FLAG_OF[k], v) for k, v in arch.items()}
        arch.setdefault("kv_heads", heads)
        arch.setdefault("head_dim", hidden // heads)
        arch.setdefault("vocab", 1)
        return ModelSpec(name="custom", kind="encoder" if args.encoder else "decoder",
                         gated_ffn=not args.plain_ffn, tied_embeddings=args.tied, source="architecture flags",
                         **({"image_size": 1, "patch_size": 1, "norm": "layernorm"} if args.encoder else {}), **arch)
    if not arch:
        return base
    arch = {k: _int(FLAG_OF[k], v) for k, v in arch.items()}
    windows = base.window_per_layer if arch.get("layers", base.layers) == base.layers else None
    return replace(base, name=base.name + " (modified)", window_per_layer=windows, **arch)


def _int(flag: str, value) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{flag}: expected a positive integer, got {value!r}") from None
    if number != number or not number.is_integer() or number < 1:
        raise ValueError(f"{flag}: expected a positive integer, got {value!r}")
    return int(number)


def _flagged(exc: ValueError, flag_of: dict[str, str] = FLAG_OF) -> ValueError:
    """Rewrite 'field: message' as '--flag: message' so the user sees the flag they typed."""
    text = str(exc)
    head, sep, rest = text.partition(":")
    if sep and head in flag_of:
        return ValueError(f"{flag_of[head]}:{rest}")
    return exc


def inputs_from_args(args: argparse.Namespace) -> PlanInputs:
    """PlanInputs from parsed flags; ValueError naming the flag on bad input. A ViT encoder with --image-size takes
    its tokens from the image ((H//p)(W//p) + 1) and plans --images images per batch entry."""
    try:
        model = _model_from_args(args)
        seq_len, images = encoder_tokens(model, args)
        seq_len = seq_len or args.seq_len
        if seq_len is None:
            if model.kind != "encoder" or not model.patch_size > 1:
                raise ValueError("--seq-len: required (tokens per sequence)")
            seq_len = model.native_tokens
        batch = args.batch
        if model.kind == "encoder" and images != 1:
            batch = _int("--batch", batch) * _int("--images", images)
        return workload_inputs(args, model, seq_len, batch)
    except ValueError as exc:
        raise _flagged(exc) from None


def workload_inputs(args: argparse.Namespace, model: ModelSpec, seq_len, batch=None) -> PlanInputs:
    """The PlanInputs of the workload flags for `model` at `seq_len` tokens."""
    try:
        return PlanInputs(model=model, seq_len=seq_len, batch=args.batch if batch is None else batch,
                          dtype=args.dtype, kv_dtype=args.kv_dtype,
                          mode=args.mode, checkpointing=args.checkpointing, precision=args.precision,
                          optimizer=args.optimizer,
                          window=None if args.window is None else args.window, backend=args.backend,
                          gpu=args.gpu, gpus=args.gpus, tp=args.tp, cp=args.cp, torch_version=args.torch_version,
                          logits=args.logits, sequence_parallel=args.sequence_parallel, zero=args.zero,
                          micro_batch=args.micro_batch, persistent_grads=args.persistent_grads,
                          kv_layout=args.kv_layout, ep=args.ep, gpus_per_node=args.gpus_per_node,
                          calibration=args.calibration, gemm_efficiency=args.gemm_efficiency,
                          hbm_efficiency=args.hbm_efficiency, finetune=args.finetune, lora_rank=args.lora_rank,
                          lora_targets=args.lora_targets, compile=args.compile)
    except ValueError as exc:
        raise _flagged(exc) from None


def image_request(args: argparse.Namespace):
    """A VisionRequest for a Swin or vision-language model (preset or config.json); None for every other model."""
    try:
        return vision_request(args, lambda model, n: workload_inputs(args, model, n))
    except ValueError as exc:
        raise _flagged(exc) from None


def _print_vision(request, args) -> int:
    from estimator.model.vision_plan import vision_plan
    from estimator.model.vision_report import format_vision_table

    plan = vision_plan(request)
    if args.xlsx or args.trace or args.smallest_gpu:
        raise ValueError("--xlsx: the workbook, --trace and --smallest-gpu are not built for image models yet")
    print(strict_json(plan.to_dict(), "plan", indent=2) if args.json else format_vision_table(plan))
    return 0


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line (`error: ...`, exit 2) instead of its usage block: plan,
    advise and serve share it."""

    def error(self, message: str):
        self.exit(2, f"error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m estimator plan", description=__doc__.splitlines()[0])
    add_plan_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object (contract §3)")
    parser.add_argument("--trace", metavar="CSV", help="production trace of per-request seq lengths: P50/P90/P99")
    parser.add_argument("--smallest-gpu", action="store_true", help="also find the smallest catalog GPU(s) that fit")
    parser.add_argument("--xlsx", metavar="PATH", help="also write the budget workbook (live formulas of n and batch)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from estimator.cli.hybrid_args import hybrid_result

        hybrid = hybrid_result(args)  # a state-space / hybrid model (mamba2, falcon_h1, bamba): its own plan
        if hybrid is not None:
            print(strict_json(hybrid[0], "plan", indent=2) if args.json else hybrid[1])
            return 0
        request = image_request(args)
        if request is not None:
            return _print_vision(request, args)
        inputs = inputs_from_args(args)
        plan = make_plan(inputs)
        result = plan.to_dict()
        if inputs.model.kind == "encoder":
            result["tokens"] = encoder_token_dict(inputs, args)
        note = text_only_note(inputs.model)
        if note:
            result["assumptions"].insert(0, note)
        if args.smallest_gpu:
            from estimator.model.solve import smallest_gpu

            result["gpu_choices"] = [vars(c) for c in smallest_gpu(inputs)]
        if args.trace:
            from estimator.model.trace import load_trace, trace_report

            result["trace"] = trace_report(inputs, load_trace(args.trace))
        text = strict_json(result, "plan", indent=2) if args.json else format_table(plan, result)
        if args.xlsx:
            from estimator.advice.plan_rules import advise
            from estimator.report.xlsx import write_plan_xlsx

            refuse_same_file(args.xlsx, (args.config, args.trace, args.calibration), "--xlsx")
            write_plan_xlsx(args.xlsx, plan, advise(inputs))
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0


def format_table(plan: Plan, result: dict) -> str:
    """A readable plan: budget components, capacity, FLOPs, time and the solvers."""
    inp = plan.inputs
    lines = [f"{inp.model.name}: {inp.mode}, seq_len {inp.seq_len:,}, batch {inp.batch}, {inp.dtype}, "
             f"backend {inp.backend} -> {plan.selected_backend}, {inp.gpus} x {inp.gpu} (tp {inp.tp}, cp {inp.cp})",
             f"parameters {plan.params:,} ({plan.params_per_gpu:,} per GPU)"
             + (f", trainable {plan.trainable_params:,}" if inp.mode == "training" else ""), "", "memory per GPU"]
    fit = plan.fit  # the one verdict (estimator/model/budget.py), the page's and the workbook's too
    rows = [*((c.label, c.bytes) for c in plan.components), ("total", plan.total_bytes)]
    if fit.status != "cannot run":
        rows.append(("allocator reserve (largest block)", fit.allocator_reserve_bytes))
    rows.append(("capacity", plan.capacity_bytes))
    if fit.status != "cannot run":
        rows.append(("headroom", fit.headroom_bytes) if fit.fits else ("short by", fit.short_by_bytes))
    width = max(36, *(len(c.label) + 2 for c in plan.components))
    for name, size in rows:
        lines.append(f"  {name:<{width}}{_gib(size):>16}{size:>22,} B")
    lines.append(f"  -> {plan.verdict}")
    lines.append(f"  kv cache per token {plan.kv_cache_bytes_per_token:,} B; materialised attention scores "
                 f"{_gib(plan.attention_scores_bytes)} (textbook n^2 term {_gib(plan.textbook_scores_bytes)})")
    lines += ["", "compute (estimates; see assumptions)",
              f"  forward FLOPs {plan.prefill_flops:.3e} (executed {plan.prefill_executed_flops:.3e}); "
              f"step {plan.training_step_flops:.3e}",
              f"  prefill {plan.prefill_time_ms:,.2f} ms ({plan.prefill_tokens_per_s:,.0f} tokens/s)"]
    if inp.mode == "training":
        lines.append(f"  training step {plan.step_time_ms:,.2f} ms")
    if plan.decode_time_ms_per_token is not None:
        lines.append(f"  decode {plan.decode_time_ms_per_token:,.3f} ms per step ({plan.decode_tokens_per_s:,.0f} "
                     f"tokens/s), {plan.decode_flops_per_token:.3e} FLOPs per token")
        if plan.decode_graph_builds_per_step:
            lines.append(f"    (as generate runs it: a new cache length every step, "
                         f"{plan.decode_graph_builds_per_step} cuDNN graph build(s) a step)")
        for key, label in (("decode_steady_ms_per_token", "every cache length seen before"),
                           ("decode_forced_flash_ms_per_token", "single-token calls forced to flash"),
                           ("decode_static_cache_ms_per_token", "a StaticCache (one length, one graph)"),
                           ("decode_static_compiled_ms_per_token",
                            "a StaticCache under torch.compile (reduce-overhead; compiled once)")):
            value = getattr(plan, key)
            if value is not None and abs(value - plan.decode_time_ms_per_token) > 1e-6:
                lines.append(f"  decode with {label}: {value:,.3f} ms per step")
    lines.append(f"  time shares: attention {plan.attention_share:.0%}, FFN {plan.ffn_share:.0%}, "
                 f"embedding/logits {plan.embedding_share:.0%}, other {plan.other_share:.0%}")
    from estimator.model.budget import budget
    from estimator.report.explain import communication_lines, zero_lines

    comm = communication_lines(plan)
    if comm:
        lines += ["", "communication per GPU (exposed: what overlap leaves on the critical path)"]
        lines += [f"  {line}" for line in comm]
    zero = zero_lines(plan, budget)
    if zero:
        lines += ["", f"ZeRO stages over the {inp.dp} data-parallel replicas (each re-planned)"]
        lines += [f"  {line}" for line in zero]
    lines += ["", f"largest seq_len at batch {inp.batch}: {plan.max_seq_len:,}; "
              f"largest batch at seq_len {inp.seq_len:,}: {plan.max_batch:,}"]
    for choice in result.get("gpu_choices", [])[:5]:
        lines.append(f"  fits on {choice['gpus']} x {choice['gpu']} (tp {choice['tp']}, cp {choice['cp']})")
    if "gpu_choices" in result and not result["gpu_choices"]:
        lines.append("  fits on no catalog GPU with up to 64 GPUs")
    if "trace" in result:
        from estimator.model.trace import format_trace

        lines += ["", format_trace(result["trace"])]
    note = text_only_note(inp.model)
    lines += ["", "assumptions"] + [f"  - {a}" for a in ((note,) if note else ()) + tuple(plan.assumptions)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
