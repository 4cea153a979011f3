"""The process group and the sharding of `python -m validation model` (validation/model/distributed.py, whose docstring
gives the protocol): NCCL multicast off and the group started (`init`), the model built and tensor-parallelised
(`build`, `tp_plan`), FSDP2 / DDP over the dp mesh (`shard_data_parallel`), each dp rank's batch
(`batch_tensors`) and torch's context parallel over the cp mesh (`cp_context`)."""

from __future__ import annotations

import contextlib
import os

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
TP_COLWISE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
TP_ROWWISE = ("self_attn.o_proj", "mlp.down_proj")


def init(cuda: bool):
    """Environment (multicast off), process group, device; returns (rank, world, device)."""
    import torch
    import torch.distributed as dist

    for k, v in MULTICAST_OFF.items():
        os.environ[k] = v
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if cuda:
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    return rank, world, device


def tp_plan(model) -> dict:
    """{module path: ParallelStyle} for every decoder layer (and the embedding and head); ValueError by name when a
    layer is not the dense Llama shape."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    names = dict(model.named_modules())
    plan = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
            "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)}
    for i in range(len(model.model.layers)):
        for sub, style in [(s, ColwiseParallel) for s in TP_COLWISE] + [(s, RowwiseParallel) for s in TP_ROWWISE]:
            path = f"model.layers.{i}.{sub}"
            if path not in names:
                raise ValueError(f"--tp: layer {i} has no {sub} (fused projections and MoE experts are not "
                                 "sharded here; dense Llama-style decoders only)")
            plan[path] = style()
    if getattr(model.config, "tie_word_embeddings", False):
        raise ValueError("--tp: tied embeddings are not sharded here")
    return plan


def build(args, device, mesh, dtype):
    """The HF model on this rank's device, seed 0 everywhere, then TP-sharded over mesh['tp']."""
    import torch
    from torch.distributed.tensor.parallel import parallelize_module
    from transformers import AutoModelForCausalLM

    from validation.model.hf_configs import family_config, to_hf_config

    torch.manual_seed(0)
    cfg = to_hf_config(family_config(args.family, args.layers, None, args.tiny))
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=args.attn_implementation, dtype=dtype)
    if args.tp > 1:
        parallelize_module(model, mesh["tp"], tp_plan(model))
    return model, cfg


def shard_data_parallel(model, args, mesh, device):
    """ZeRO-3 (FSDP2 over mesh['dp']) or DDP; returns the module to call."""
    if mesh["dp"].size() == 1 or args.mode != "train":
        return model
    if args.zero == 3:
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def batch_tensors(args, cfg, device, mesh):
    """ids, labels (shifted once over the whole sequence, -100 at its end) and position ids of this dp rank's
    batch share; the same on every tp/cp rank of a replica (seed by dp rank)."""
    import torch

    dp_rank = mesh["dp"].get_local_rank()
    gen = torch.Generator().manual_seed(1000 + dp_rank)
    b = args.batch // mesh["dp"].size()
    ids = torch.randint(0, cfg.vocab_size, (b, args.seq_len), generator=gen).to(device)
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = ids[:, 1:]
    pos = torch.arange(args.seq_len, device=device).unsqueeze(0).expand(b, -1).contiguous()
    return ids, labels, pos


def cp_context(args, mesh, buffers):
    """torch's context parallel over mesh['cp'] (CUDA), sharding `buffers` in place along dim 1."""
    if args.cp == 1:
        return contextlib.nullcontext()
    from torch.distributed.tensor.experimental import context_parallel

    try:  # a K/V ring (the plan's model) rather than all-gathering K/V
        from torch.distributed.tensor.experimental._attention import set_rotate_method

        set_rotate_method("alltoall")
    except ImportError:
        pass
    return context_parallel(mesh["cp"], buffers=buffers, buffer_seq_dims=[1] * len(buffers))
