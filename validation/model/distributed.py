"""`python -m validation model`: a real Hugging Face model over several processes (one per GPU), measured per rank
beside the plan's per-GPU prediction. Run it under torchrun:

    torchrun --nproc-per-node 2 -m validation model --family llama-3.1-8b --layers 4 --mode train \\
        --seq-len 16384 --tp 2 --out tp2.csv

World = dp · cp · tp, tp innermost (consecutive ranks), then cp, then dp: the placement estimator/model/comm.py
prices. Process group: NCCL on CUDA, gloo on the CPU. NCCL's NVLink multicast is switched off before the group
starts (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1).

Tensor parallel (--tp): torch.distributed.tensor.parallel.parallelize_module with the Megatron/Llama plan the
planner's ModelSpec.params_per_gpu assumes: q/k/v and gate/up column-wise, o and down row-wise, the embedding
row-wise (vocabulary split) and lm_head column-wise with its logits left vocabulary-sharded (the training loss is
computed under torch's loss_parallel). Norms are replicated. Dense decoders with q_proj/k_proj/v_proj/o_proj and
gate_proj/up_proj/down_proj only (llama, qwen2, mistral, gemma); a fused projection or MoE experts are refused by
name. Sequence parallel is not implemented (refused).

Context parallel (--cp, CUDA only): torch.distributed.tensor.experimental.context_parallel over the cp mesh
(torch's ring attention, rotate method "alltoall" = a K/V ring, load-balanced causal sharding of input ids,
labels and position ids). It replaces SDPA's flash/efficient/cuDNN ops, so it needs CUDA and
attn_implementation sdpa; the CPU's SDPA op is not among them, and --cp > 1 on the CPU is refused. Training under
cp > 1 all-reduces the gradients over the cp group after the backward (every cp rank holds the same weights).

ZeRO (--zero 3, training, dp > 1): FSDP2 (`torch.distributed.fsdp.fully_shard`) over the dp mesh, each decoder
layer a unit, then the root. --zero 0 with dp > 1 is DistributedDataParallel (tp = cp = 1 only). ZeRO-1/2 are
refused (FSDP2 shards weights too; they would need DeepSpeed).

Measured per rank, protocol as validation.model.hf_models (random weights, nothing downloaded): the model is built on
the rank's device from validation.model.hf_configs (seed 0 on every rank), then parallelised. CUDA: memory_allocated()
and max_memory_allocated() (absolute, so peak_bytes includes weights and optimizer state). CPU: no allocator
counters; peak_extra_bytes is the running maximum of the profiler's [memory] events over the measured call
(validation.call.protocol.cpu_peak_bytes), peak_bytes = weights + state + that. param_bytes is the sum of the rank's
local parameter storages (DTensor shards, FSDP shards).
  train:   step 1 (creates the optimizer state), then step 2 measured (peak), steps 2-4 timed (median).
  prefill: model.eval(), no_grad, model(ids, use_cache=True, logits_to_keep=1); the first call warms up, the
           second is measured (the KV cache of the first freed before it), three timed (median).
Each rank's row (and the plan's per-GPU figures beside it: make_plan with tp, cp, gpus = world, zero, the same
config) is gathered to rank 0, which writes them to --out (one row per rank, rank order).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import statistics
import sys
import time

from validation.errors import first_line, is_oom, typed_line
from validation.model.sharding import batch_tensors, build, cp_context, init, shard_data_parallel

CASE_COLUMNS = ["family", "layers", "tiny", "attn_implementation", "mode", "precision", "optimizer", "seq_len",
                "batch", "world_size", "tp", "cp", "dp", "zero", "sequence_parallel", "cp_impl", "rank", "tp_rank",
                "cp_rank", "dp_rank"]
RESULT_COLUMNS = ["status", "reason", "n_params_local", "param_bytes", "weights_bytes", "state_bytes",
                  "peak_extra_bytes", "peak_bytes", "kv_cache_bytes", "time_first_call_ms", "time_ms", "n_timed",
                  "loss"]
PLAN_COLUMNS = ["plan_params_per_gpu", "plan_param_bytes", "plan_weights_bytes", "plan_kv_cache_bytes",
                "plan_activation_bytes", "plan_total_bytes", "plan_peak_bytes", "plan_fits", "plan_time_ms",
                "plan_communication_time_ms", "plan_comm_tp_ms", "plan_comm_cp_ms", "plan_comm_dp_ms", "plan_links",
                "plan_error", "param_bytes_diff", "peak_rel_err", "time_rel_err"]
ENV_COLUMNS = ["device", "device_name", "gpu", "torch_version", "transformers_version", "nccl_nvls_enable"]
COLUMNS = CASE_COLUMNS + RESULT_COLUMNS + PLAN_COLUMNS + ENV_COLUMNS

PRECISIONS = {"bf16-mixed": "float32", "32-true": "float32", "bf16-true": "bfloat16"}  # -> weights dtype
BACKEND_OF = {"sdpa": "auto", "eager": "eager"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", required=True, help="a family of validation/model/hf_configs.py (llama-3.1-8b, ...)")
    p.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    p.add_argument("--tiny", action="store_true", help="the shrunken family (CPU tests)")
    p.add_argument("--mode", choices=("prefill", "train"), default="prefill")
    p.add_argument("--seq-len", type=int, required=True, help="tokens per sequence (whole sequence, before cp)")
    p.add_argument("--batch", type=int, default=1, help="sequences in the whole job, split over dp (default 1)")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--cp", type=int, default=1)
    p.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3), help="ZeRO stage over dp (0 or 3)")
    p.add_argument("--sequence-parallel", action="store_true", help="not implemented: refused")
    p.add_argument("--attn", dest="attn_implementation", default="sdpa", choices=sorted(BACKEND_OF))
    p.add_argument("--precision", default="bf16-mixed", choices=sorted(PRECISIONS),
                   help="train: the recipe (default bf16-mixed); prefill always runs a bf16 model")
    p.add_argument("--optimizer", default="adamw", choices=("adamw", "sgd"))
    p.add_argument("--gpu", help="catalog GPU the plan is for (default: detected; h200 on the CPU)")
    p.add_argument("--out", required=True, help="output CSV (rank 0 writes one row per rank)")
    p.add_argument("--append", action="store_true", help="append to --out (same columns) instead of replacing it")


# ------------------------------------------------------------------------------------------------ setup


def check_args(args, world: int, cuda: bool) -> None:
    """One-line ValueErrors for what this module does not run."""
    tp, cp = args.tp, args.cp
    if tp < 1 or cp < 1 or world % (tp * cp):
        raise ValueError(f"--tp {tp} · --cp {cp} must divide the world size {world}")
    dp = world // (tp * cp)
    if args.sequence_parallel:
        raise ValueError("--sequence-parallel: not implemented in validation model (TP runs without it)")
    if cp > 1 and not cuda:
        raise ValueError("--cp: torch's context_parallel replaces CUDA SDPA ops (flash/efficient/cuDNN); "
                         "it does not run on the CPU")
    if cp > 1 and args.attn_implementation != "sdpa":
        raise ValueError("--cp: context parallel needs --attn sdpa (it replaces SDPA)")
    if args.zero in (1, 2):
        raise ValueError("--zero: stages 1 and 2 are not implemented (FSDP2 is ZeRO-3); use 0 or 3")
    if args.zero == 3 and args.mode != "train":
        raise ValueError("--zero 3 applies to --mode train")
    if args.mode == "train" and dp > 1 and args.zero == 0 and (tp > 1 or cp > 1):
        raise ValueError("--zero 0 with dp > 1 is DDP, which runs with tp = cp = 1 only; use --zero 3")
    if args.batch % dp:
        raise ValueError(f"--batch {args.batch} is not a multiple of dp = {dp}")
    if args.seq_len % (2 * cp) and cp > 1:
        raise ValueError(f"--seq-len {args.seq_len}: context parallel's load balancing needs a multiple of 2·cp")


def local_param_bytes(model) -> tuple[int, int]:
    """(elements, bytes) of the parameters this rank holds: local shards of DTensors, distinct storages."""
    from torch.distributed.tensor import DTensor

    seen, n, nbytes = set(), 0, 0
    for p in model.parameters():
        t = p.to_local() if isinstance(p, DTensor) else p
        t = t.detach()
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.numel())
        if key in seen:
            continue
        seen.add(key)
        n += t.numel()
        nbytes += t.numel() * t.element_size()
    return n, nbytes


def tensors_bytes(obj) -> int:
    """Bytes of the (local) tensors in an optimizer state dict."""
    import torch
    from torch.distributed.tensor import DTensor

    total = 0
    for state in obj.values():
        for v in state.values():
            if isinstance(v, DTensor):
                v = v.to_local()
            if isinstance(v, torch.Tensor):
                total += v.numel() * v.element_size()
    return total


# ----------------------------------------------------------------------------------------------- the plan


def plan_columns(args, world: int, gpu: str) -> dict:
    """The plan's per-GPU figures for this run (empty plan_* and plan_error when the planner refuses it)."""
    from estimator.call.attention import CUDA_CONTEXT_BYTES
    from estimator.model.hf_config import from_hf_config
    from estimator.model.inputs import PlanInputs
    from estimator.model.plan import make_plan
    from validation.model.hf_configs import family_config

    try:
        cfg = family_config(args.family, args.layers, None, args.tiny)
        model = from_hf_config(cfg, name=f"{args.family} ({args.layers} layers)")
        training = args.mode == "train"
        kw = dict(precision=args.precision, optimizer=args.optimizer, zero=args.zero) if training else dict(
            dtype="bfloat16")
        inputs = PlanInputs(model=model, seq_len=args.seq_len, batch=args.batch,
                            mode="training" if training else "inference",
                            backend=BACKEND_OF[args.attn_implementation], gpu=gpu, tp=args.tp, cp=args.cp,
                            gpus=world, **kw)
        plan = make_plan(inputs, solve=False)
    except ValueError as exc:
        return {"plan_error": first_line(exc, 300)}
    es = plan.weights_bytes // max(1, plan.params_per_gpu) if not training else inputs.recipe.weight_bytes
    comm = plan.communication or {}
    param_bytes = plan.params_per_gpu * es
    if training and args.zero == 3:  # FSDP2 keeps 1/dp of each parameter at rest
        param_bytes = -(-param_bytes // inputs.dp)
    return {
        "plan_params_per_gpu": plan.params_per_gpu, "plan_param_bytes": param_bytes,
        "plan_weights_bytes": plan.weights_bytes, "plan_kv_cache_bytes": plan.kv_cache_bytes,
        "plan_activation_bytes": plan.activation_bytes, "plan_total_bytes": plan.total_bytes,
        "plan_peak_bytes": plan.total_bytes - CUDA_CONTEXT_BYTES, "plan_fits": plan.fits,
        "plan_time_ms": round(plan.step_time_ms if training else plan.prefill_time_ms, 4),
        "plan_communication_time_ms": round(plan.communication_time_ms, 4),
        "plan_comm_tp_ms": round(comm.get("tp_ms", 0.0), 4), "plan_comm_cp_ms": round(comm.get("cp_ms", 0.0), 4),
        "plan_comm_dp_ms": round(comm.get("dp_ms", 0.0), 4),
        "plan_links": " ".join(f"{k}:{v}" for k, v in sorted(comm.get("links", {}).items())), "plan_error": "",
    }


# --------------------------------------------------------------------------------------------- measuring


class Meter:
    """Per-rank memory and time: CUDA allocator counters and events, or profiler events and perf_counter."""

    def __init__(self, device):
        import torch

        self.torch, self.device, self.cuda = torch, device, device.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def allocated(self):
        return self.torch.cuda.memory_allocated(self.device) if self.cuda else None

    def peak_extra(self, fn):
        """(fn(), peak bytes above what was allocated when fn started)."""
        if self.cuda:
            self.sync()
            base = self.torch.cuda.memory_allocated(self.device)
            self.torch.cuda.reset_peak_memory_stats(self.device)
            out = fn()
            self.sync()
            return out, self.torch.cuda.max_memory_allocated(self.device) - base
        from validation.call.protocol import cpu_peak_bytes

        box = {}
        peak = cpu_peak_bytes(lambda: box.setdefault("out", fn()))
        return box["out"], peak

    def timed(self, fn):
        import torch.distributed as dist

        dist.barrier()
        self.sync()
        t = time.perf_counter()
        out = fn()
        self.sync()
        return out, (time.perf_counter() - t) * 1e3


def run(args, rank, world, device) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh

    dp = world // (args.tp * args.cp)
    mesh = init_device_mesh(device.type, (dp, args.cp, args.tp), mesh_dim_names=("dp", "cp", "tp"))
    meter = Meter(device)
    row = {"tp_rank": mesh["tp"].get_local_rank(), "cp_rank": mesh["cp"].get_local_rank(),
           "dp_rank": mesh["dp"].get_local_rank()}
    train = args.mode == "train"
    dtype = getattr(torch, PRECISIONS[args.precision]) if train else torch.bfloat16
    base = meter.allocated()
    model, cfg = build(args, device, mesh, dtype)
    module = shard_data_parallel(model, args, mesh, device)
    meter.sync()
    row["n_params_local"], row["param_bytes"] = local_param_bytes(model)
    row["weights_bytes"] = meter.allocated() - base if meter.cuda else row["param_bytes"] + sum(
        b.numel() * b.element_size() for b in model.buffers())
    ids, labels, pos = batch_tensors(args, cfg, device, mesh)
    with cp_context(args, mesh, [ids, labels, pos]):
        if train:
            _train(args, model, module, mesh, meter, ids, labels, pos, row, F)
        else:
            _prefill(model, meter, ids, pos, row)
    if meter.cuda:
        row["peak_bytes"] = torch.cuda.max_memory_allocated(device) - (base or 0)
    else:
        row["peak_bytes"] = row["weights_bytes"] + (row.get("state_bytes") or 0) + row["peak_extra_bytes"]
    row["status"] = "ok"
    return row


def _prefill(model, meter, ids, pos, row):
    import torch

    model.eval()
    with torch.no_grad():
        def call():
            return model(input_ids=ids, position_ids=pos, use_cache=True, logits_to_keep=1)

        out, first = meter.timed(call)
        row["time_first_call_ms"] = round(first, 3)
        del out
        out, row["peak_extra_bytes"] = meter.peak_extra(call)
        cache = out.past_key_values
        row["kv_cache_bytes"] = sum(t.numel() * t.element_size() for layer in cache.layers
                                    for t in (layer.keys, layer.values) if t is not None)
        del out, cache
        times = []
        for _ in range(3):
            out, t = meter.timed(call)
            del out
            times.append(t)
    row["time_ms"] = round(statistics.median(times), 3)
    row["n_timed"] = len(times)


def _train(args, model, module, mesh, meter, ids, labels, pos, row, F):
    import torch
    import torch.distributed as dist

    model.train()
    model.config.use_cache = False
    params = [p for p in model.parameters() if p.requires_grad]
    opt = (torch.optim.AdamW(params, lr=1e-5) if args.optimizer == "adamw"
           else torch.optim.SGD(params, lr=1e-3, momentum=0.9))
    amp = torch.bfloat16 if args.precision == "bf16-mixed" else None
    loss_ctx = contextlib.nullcontext
    if args.tp > 1:
        from torch.distributed.tensor.parallel import loss_parallel

        loss_ctx = loss_parallel
    cp_group = mesh["cp"].get_group() if args.cp > 1 else None

    def step():
        ctx = torch.autocast(meter.device.type, dtype=amp) if amp is not None else contextlib.nullcontext()
        with ctx:
            logits = module(input_ids=ids, position_ids=pos).logits
        with loss_ctx():
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
            del logits
            loss.backward()
        if cp_group is not None:  # every cp rank holds the same weights: sum the gradients of its chunk
            for p in params:
                if p.grad is not None:
                    g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                    dist.all_reduce(g, group=cp_group)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    loss, first = meter.timed(step)
    row["time_first_call_ms"] = round(first, 3)
    meter.sync()
    row["state_bytes"] = tensors_bytes(opt.state)
    loss, row["peak_extra_bytes"] = meter.peak_extra(step)
    times = [meter.timed(step)[1] for _ in range(3)]
    row["loss"] = round(float(loss.float().item()), 5)
    row["time_ms"] = round(statistics.median(times), 3)
    row["n_timed"] = len(times)


# -------------------------------------------------------------------------------------------------- main


def compare(row: dict) -> dict:
    out = {}
    if row.get("plan_param_bytes") not in (None, "") and row.get("param_bytes") not in (None, ""):
        out["param_bytes_diff"] = int(row["param_bytes"]) - int(row["plan_param_bytes"])
    if row.get("status") == "ok" and row.get("plan_peak_bytes") not in (None, "") and row["device"] == "cuda":
        out["peak_rel_err"] = round((row["plan_peak_bytes"] - row["peak_bytes"]) / row["peak_bytes"], 4)
    if row.get("status") == "ok" and row.get("plan_time_ms") not in (None, "") and row.get("time_ms"):
        out["time_rel_err"] = round(row["plan_time_ms"] / row["time_ms"] - 1, 4)
    return out


def write_rows(path: str, rows: list[dict], append: bool, columns: list[str] | None = None) -> None:
    """`validation model`'s rows into PATH (appended where asked and the header is the same; None cells empty)."""
    columns = COLUMNS if columns is None else columns
    if append and os.path.exists(path):
        with open(path, newline="") as fh:
            if next(csv.reader(fh), []) != columns:
                raise ValueError(f"--append: {path} has other columns than validation model writes")
    else:
        append = False
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a" if append else "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        if not append:
            writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})


def main_model(args) -> int:
    """The `model` sub-command (validation/cli.py): ValueError for one-line errors before any process group."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise ValueError("validation model runs under torchrun (RANK/WORLD_SIZE unset): "
                         "torchrun --nproc-per-node N -m validation model ...")
    import torch

    cuda = torch.cuda.is_available()
    world = int(os.environ["WORLD_SIZE"])
    check_args(args, world, cuda)
    if args.layers < 1 or args.seq_len < 1 or args.batch < 1:
        raise ValueError("--layers, --seq-len and --batch must be positive")
    from estimator.hardware import get_gpu, gpu_from_device_name

    gpu = args.gpu or (gpu_from_device_name(torch.cuda.get_device_name()) if cuda else None) or "h200"
    gpu = get_gpu(gpu).name
    rank, world, device = init(cuda)
    import torch.distributed as dist

    try:
        case = {"family": args.family, "layers": args.layers, "tiny": int(args.tiny),
                "attn_implementation": args.attn_implementation, "mode": args.mode,
                "precision": args.precision if args.mode == "train" else "bf16-true",
                "optimizer": args.optimizer if args.mode == "train" else "", "seq_len": args.seq_len,
                "batch": args.batch, "world_size": world, "tp": args.tp, "cp": args.cp,
                "dp": world // (args.tp * args.cp), "zero": args.zero, "sequence_parallel": 0,
                "cp_impl": "torch context_parallel (alltoall ring)" if args.cp > 1 else "", "rank": rank}
        try:
            import transformers

            trv = transformers.__version__
        except ImportError:
            trv = ""
        env = {"device": device.type, "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
               "gpu": gpu, "torch_version": torch.__version__, "transformers_version": trv,
               "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE", "")}
        row = dict(case, **env)
        try:
            row.update(run(args, rank, world, device))
        except Exception as exc:  # noqa: BLE001 - the rank's failure becomes its row
            row.update(status="oom" if is_oom(exc) else "error", reason=typed_line(exc))
        row.update(plan_columns(args, world, gpu))
        row.update(compare(row))
        rows = [None] * world
        dist.all_gather_object(rows, row)
        if rank == 0:
            write_rows(args.out, rows, args.append)
            for r in rows:
                print(f"rank {r['rank']}: {r.get('status')} param_bytes {r.get('param_bytes')} (plan "
                      f"{r.get('plan_param_bytes')}) peak {r.get('peak_bytes')} (plan {r.get('plan_peak_bytes')}) "
                      f"time {r.get('time_ms')} ms (plan {r.get('plan_time_ms')}, communication "
                      f"{r.get('plan_communication_time_ms')}) {r.get('reason') or ''}".rstrip(), file=sys.stderr)
            print(f"wrote {args.out} ({world} rows)", file=sys.stderr)
        dist.barrier()
        return 0 if all(r.get("status") == "ok" for r in rows) else 1
    finally:
        dist.destroy_process_group()
