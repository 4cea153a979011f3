"""The Triton kernels TorchInductor compiled for a call (flex_attention's templates): each kernel's launch config
(BLOCK_* sizes, warps, stages) and what the compiler made of it (registers per thread, spilled bytes, shared
memory), read from the CachingAutotuner objects Inductor keeps (torch/_inductor/runtime/triton_heuristics.py).

    from validation.timing import triton_configs
    before = triton_configs.autotuner_ids()
    ... run the compiled call ...
    configs = triton_configs.compiled_since(before)   # {kernel name: "BLOCK_M=128 ... regs=168 spills=0 ..."}

`python -m validation.timing.triton_configs --out FILE` writes the source of the installed torch's flex config
heuristics (the functions that choose those configs) to FILE, so a measurement records the rules it ran under.
"""

from __future__ import annotations

import argparse
import ast
import gc
import os

# the functions of torch/_inductor whose source says which config a flex kernel gets (names differ between versions:
# whichever exist are written)
CONFIG_FUNCTIONS = ("get_flex_attn_fwd_configs", "get_flex_attn_bwd_configs", "get_flex_decode_configs",
                    "_get_default_config_fwd", "_get_default_config_bwd", "_use_flex_decoding", "get_split_k",
                    "create_flex_decoding_kernel", "set_head_dim_values")
CONFIG_CLASSES = ("CUDAConfigHeuristic",)


def _autotuners() -> list:
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    # type(), not isinstance: isinstance reads __class__, which a dead weak proxy among the live objects raises on
    return [o for o in gc.get_objects() if issubclass(type(o), CachingAutotuner)]


def autotuner_ids() -> set[int]:
    """ids of the autotuners alive now (what a later `compiled_since` leaves out)."""
    return {id(a) for a in _autotuners()}


def _name(tuner) -> str:
    meta = getattr(tuner, "inductor_meta", None) or {}
    fn = getattr(tuner, "fn", None)
    return str(meta.get("kernel_name") or getattr(fn, "__name__", "") or getattr(fn, "name", ""))


def describe(tuner) -> str:
    """One line: the chosen launcher's config kwargs, warps, stages, registers, spills and shared bytes."""
    launchers = getattr(tuner, "launchers", None) or []
    if not launchers:
        return "not launched"
    launcher = launchers[0]
    cfg = getattr(launcher, "config", None)
    parts = [f"{k}={v}" for k, v in sorted((getattr(cfg, "kwargs", None) or {}).items())]
    for label, value in (("warps", getattr(cfg, "num_warps", None)), ("stages", getattr(cfg, "num_stages", None)),
                         ("regs", getattr(launcher, "n_regs", None)), ("spills", getattr(launcher, "n_spills", None)),
                         ("shared", getattr(launcher, "shared", None))):
        if value is not None:
            parts.append(f"{label}={value}")
    return " ".join(parts)


def compiled_since(before: set[int]) -> dict[str, str]:
    """{kernel name: `describe`} of the autotuners created since `autotuner_ids()` returned `before`."""
    return {_name(t): describe(t) for t in _autotuners() if id(t) not in before}


def config_source() -> str:
    """The source of CONFIG_FUNCTIONS and CONFIG_CLASSES' __init__ in the installed torch/_inductor, with their file
    paths."""
    import torch

    root = os.path.join(os.path.dirname(torch.__file__), "_inductor")
    out = [f"torch {torch.__version__}"]
    for folder, _, files in sorted(os.walk(root)):
        for fname in sorted(files):
            if not fname.endswith(".py"):
                continue
            path = os.path.join(folder, fname)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if "flex" not in text:
                continue
            for node in ast.walk(ast.parse(text)):
                wanted = isinstance(node, ast.FunctionDef) and node.name in CONFIG_FUNCTIONS
                if isinstance(node, ast.ClassDef) and node.name in CONFIG_CLASSES:
                    init = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
                    node, wanted = (init[0], True) if init else (node, False)
                if wanted:
                    rel = os.path.relpath(path, os.path.dirname(root))
                    out.append(f"\n# {rel}:{node.lineno}\n{ast.get_source_segment(text, node)}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.timing.triton_configs",
                                     description="write the installed torch's flex config heuristics' source")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(config_source())
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
