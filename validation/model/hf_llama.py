"""A real Hugging Face Llama on the GPU against `plan`: peak allocated bytes of an inference
prefill (KV cache kept, logits for the last position) and of a training step (forward + backward with
the mixed-precision AdamW state resident), with `attn_implementation` eager or sdpa.

python -m validation.hf_llama --config tests/data/llama-3-8b.config.json --layers 4 --out OUT.csv

Needs torch and transformers (random weights from the config: nothing is downloaded). The plan is the
estimator's `make_plan` for the same architecture; we compare the allocator's view (plan total minus the
CUDA context, which max_memory_allocated does not see). The optimizer state is held as fp32 buffers of
12 bytes per parameter (master weights + two moments); the optimizer step itself is not run.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile

import torch

from estimator.call.attention import CUDA_CONTEXT_BYTES
from estimator.cli.plan import build_parser, inputs_from_args
from estimator.model.plan import make_plan
from validation.call.grid import write_csv


def plan_bytes(config_path: str, seq_len: int, batch: int, mode: str, backend: str) -> int:
    args = build_parser().parse_args(["--config", config_path, "--seq-len", str(seq_len), "--batch", str(batch),
                                      "--mode", mode, "--backend", backend, "--gpu", "h200"])
    plan = make_plan(inputs_from_args(args), solve=False)
    return plan.total_bytes - CUDA_CONTEXT_BYTES


def measure(model, seq_len: int, batch: int, mode: str, vocab: int) -> int:
    ids = torch.randint(0, vocab, (batch, seq_len), device="cuda")
    state = None
    if mode == "training":
        numel = sum(p.numel() for p in model.parameters())
        state = torch.empty(numel * 3, dtype=torch.float32, device="cuda")  # master + m + v
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    if mode == "inference":
        with torch.no_grad():
            out = model(ids, use_cache=True, logits_to_keep=1)
    else:
        out = model(ids, labels=ids)
        out.loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del out, state, ids
    model.zero_grad(set_to_none=True)
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.hf_llama")
    parser.add_argument("--config", required=True)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cases", default="inference:eager:4096,inference:eager:16384,training:eager:2048,"
                                           "training:eager:4096,inference:sdpa:16384,training:sdpa:8192",
                        help="mode:attn_implementation:seq_len[:batch], comma-separated")
    args = parser.parse_args(argv)
    from transformers import LlamaConfig, LlamaForCausalLM

    with open(args.config) as fh:
        cfg = json.load(fh)
    cfg["num_hidden_layers"] = args.layers
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(cfg, fh)
        small_config = fh.name
    rows = []
    for impl in ("eager", "sdpa"):
        cases = [c.split(":") for c in args.cases.split(",") if c.split(":")[1] == impl]
        if not cases:
            continue
        config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version")})
        model = LlamaForCausalLM._from_config(config, attn_implementation=impl, torch_dtype=torch.bfloat16).cuda()
        measure(model, 128, 1, "training", cfg["vocab_size"])  # warm-up: cuBLAS workspaces of both threads
        measure(model, 128, 1, "inference", cfg["vocab_size"])
        for mode, _, seq, *rest in cases:
            seq_len, batch = int(seq), int(rest[0]) if rest else 1
            try:
                measured = measure(model, seq_len, batch, mode, cfg["vocab_size"])
                status = "ok"
            except torch.cuda.OutOfMemoryError:
                measured, status = None, "oom"
                gc.collect()
                torch.cuda.empty_cache()
            backend = "eager" if impl == "eager" else "auto"
            planned = plan_bytes(small_config, seq_len, batch, mode, backend)
            rows.append({"attn_implementation": impl, "plan_backend": backend, "mode": mode, "layers": args.layers,
                         "seq_len": seq_len, "batch": batch, "status": status, "measured_peak_bytes": measured,
                         "plan_bytes_minus_context": planned,
                         "rel_err": None if measured is None else round((planned - measured) / measured, 4),
                         "torch": torch.__version__, "device": torch.cuda.get_device_name()})
            print(rows[-1], flush=True)
        del model
        gc.collect()
        torch.cuda.empty_cache()
    write_csv(rows, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
