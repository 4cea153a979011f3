"""The serving simulation beside a measured run: `python -m estimator serve` (estimator/serve/) for the same model
config, GPU, engine knobs and workload flags, through its own flag parser, so both sides read the workload the
same way (estimator/serve/workload.py)."""

from __future__ import annotations

import json
import os
import tempfile

ENGINE_FLAGS = (("--block-size", "block_size"), ("--num-blocks", "num_blocks"),
                ("--max-batch-tokens", "max_batch_tokens"), ("--memory-fraction", "memory_fraction"),
                ("--max-seqs", "max_seqs"))
WORKLOAD_FLAGS = (("--rate", "rate"), ("--requests", "requests"), ("--prompt-tokens", "prompt_tokens"),
                  ("--output-tokens", "output_tokens"), ("--seed", "seed"))


def serve_flags(args, config_path: str, gpu: str) -> list[str]:
    """The `python -m estimator serve` flags of a run (hf-cb, bf16 as the engine runs the model)."""
    flags = ["--config", config_path, "--gpu", gpu, "--dtype", "bfloat16", "--engine", "hf-cb"]
    for flag, name in ENGINE_FLAGS:
        if getattr(args, name) is not None:
            flags += [flag, str(getattr(args, name))]
    if args.workload:
        flags += ["--workload", args.workload]
    else:
        for flag, name in WORKLOAD_FLAGS:
            flags += [flag, str(getattr(args, name))]
    return flags


def predict_run(args, cfg: dict, requests: list, gpu: str) -> dict:
    """{"flags", "result": ServeResult, "requests": [{first_token_s, finish_s, ttft_s, tpot_s, e2e_s}]}."""
    from estimator.cli.serve import build_parser, inputs_from_serve_args
    from estimator.serve.capacity import serve

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as fh:
            json.dump(cfg, fh)
        flags = serve_flags(args, path, gpu)
        inputs = inputs_from_serve_args(build_parser().parse_args(flags))
        result = serve(inputs)
    sim = result.simulation
    if len(sim.arrival_s) != len(requests) or any(abs(a - r.arrival_s) > 1e-9
                                                  for a, r in zip(sim.arrival_s, requests, strict=True)):
        raise ValueError("prediction: the simulated workload differs from the measured one")
    rows = []
    for a, f, z, out in zip(sim.arrival_s, sim.first_token_s, sim.finish_s, sim.output_tokens, strict=False):
        rows.append({"first_token_s": f, "finish_s": z, "ttft_s": f - a, "e2e_s": z - a,
                     "tpot_s": (z - f) / (out - 1) if out > 1 else None})
    return {"flags": flags, "result": result, "requests": rows}
