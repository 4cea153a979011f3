"""Measured per-GPU memory (exact allocator bytes) and time of real Hugging Face models, training and inference,
to check the planner's estimates. Self-contained: torch, transformers, stdlib (no estimator/ imports).

    python -m validation.hf_models --suite recipes --out OUT.csv --budget-s 480 [--device cuda] [--tiny]
    python -m validation.hf_models --cases FILE.csv --out OUT.csv
    python -m validation.hf_models --suite archs --dump-configs DIR      # also writes the exact configs built

Suites (`--suite`) are the case lists of `validation.model.hf_suites`. Models are built from the configs in
`validation.model.hf_configs` (random weights, nothing downloaded) with
`AutoModelForCausalLM.from_config(config, attn_implementation=..., dtype=...)` under `with torch.device(device)`.
One model is reused by consecutive cases sharing (family, layers, overrides, attn_implementation, load dtype).

Memory columns (CUDA only; empty on CPU), all exact integers from torch.cuda's caching-allocator counters:
  baseline_bytes   memory_allocated() with nothing of ours alive, just before the model is built: the cuBLAS
                   workspaces created by the warm-up (one per cuBLAS handle: forward thread and autograd thread).
                   Every later build checks it is unchanged; a change is reported in `reason` ("baseline ...").
  weights_bytes    memory_allocated() after the build minus baseline_bytes (parameters and buffers).
  peak_*_bytes     absolute max_memory_allocated() (so they include baseline and weights).
  peak_reserved_bytes  max_memory_reserved() over step 2 (train) or the prefill: the caching-allocator view,
                   for fragmentation (not reset by empty_cache between cases: we empty the cache after each case).

The training and prefill protocols (their phases, precisions and optimizers) are those of
`validation.model.hf_runs`, which runs one case. Fine-tuning cases (columns `finetune` full | lora | qlora,
`lora_rank`, `lora_targets`; precision `fp8`) get their recipe from `validation.model.hf_finetune` right after the
build, so `weights_bytes` holds the quantised base and the adapters; `trainable_params` counts what trains.
flex_attention: torch._dynamo.reset() before each flex case unless no_reset=1; recompile_limit is recorded.
Errors: OutOfMemoryError / "out of memory" -> status `oom`, `phase` says where (peak_at_oom_bytes = the peak
before the failed allocation); other exceptions -> `error` with a one-line reason. Everything is freed after each
case; a model whose resident bytes differ from baseline+weights after cleanup is rebuilt.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import sys
import time
import traceback

import torch

from validation.errors import is_oom, typed_line
from validation.model.hf_configs import FAMILIES, dump_config, family_config, layer_kinds, to_hf_config
from validation.model.hf_finetune import MissingLibrary, apply_finetune
from validation.model.hf_runs import PRECISIONS, Dev, PhaseBox, Unsupported, run_prefill, run_train, sub_or_none
from validation.model.hf_suites import SUITES
from validation.model.hf_vision import build as build_vision
from validation.model.hf_vision import is_vision, set_trainable, vision_config
from validation.model.hf_vision import tokens as vision_tokens

CASE_COLUMNS = ["family", "layers", "attn_implementation", "mode", "precision", "optimizer", "checkpointing",
                "seq_len", "batch", "decode_tokens", "overrides", "no_reset", "image_size", "images", "trainable",
                "finetune", "lora_rank", "lora_targets"]
RESULT_COLUMNS = [
    "status", "reason", "phase", "n_params", "trainable_params", "model_type", "experts_implementation", "layer_types",
    "baseline_bytes", "weights_bytes", "state_bytes", "peak_step1_bytes", "peak_forward_bytes",
    "after_forward_bytes", "peak_backward_bytes", "peak_optimizer_bytes", "peak_bytes", "peak_reserved_bytes",
    "peak_at_oom_bytes", "input_bytes", "logits_bytes", "kv_cache_bytes", "cache_tensor_bytes", "peak_decode_bytes",
    "time_first_call_ms", "time_step1_ms", "time_forward_ms", "time_backward_ms", "time_optimizer_ms",
    "time_step_ms", "n_timed", "time_prefill_ms", "decode_ms_per_token", "decode_warm_ms_per_token", "loss",
    "recompile_limit", "build_s",
    "case_s", "vision_tokens", "lm_tokens", "config_file", "torch_version", "transformers_version", "device_name",
    "tiny",
]
COLUMNS = CASE_COLUMNS + RESULT_COLUMNS


# ------------------------------------------------------------------------------------------------------ cases


def normalize_case(case: dict) -> dict:
    """Types and defaults of one case row (from a suite or a CSV)."""
    c = {k: case.get(k) for k in CASE_COLUMNS}
    for k in ("family", "attn_implementation", "mode", "precision", "optimizer", "checkpointing"):
        if c[k] in (None, ""):
            if k in ("precision", "optimizer", "checkpointing"):
                c[k] = {"precision": "bf16-true", "optimizer": "adamw", "checkpointing": "none"}[k]
            else:
                raise ValueError(f"case is missing {k}: {case}")
        c[k] = str(c[k]).strip()
    for k in ("layers", "seq_len", "batch"):
        c[k] = int(c[k])
    c["decode_tokens"] = int(c["decode_tokens"] or 0)
    ov = c["overrides"]
    if isinstance(ov, dict):
        ov = json.dumps(ov, sort_keys=True)
    c["overrides"] = ov.strip() if isinstance(ov, str) and ov.strip() else ""
    nr = c["no_reset"]
    c["no_reset"] = 1 if str(nr).strip().lower() in ("1", "true", "yes") else 0
    if c["mode"] == "prefill":
        c["precision"] = c["precision"] or "bf16-true"
    c["image_size"] = str(c["image_size"] or "").strip()  # vision families (validation.model.hf_vision)
    c["images"] = int(c["images"] or 0)
    c["trainable"] = str(c["trainable"] or "").strip() or "all"
    # fine-tuning recipes (validation.model.hf_finetune)
    c["finetune"] = str(c["finetune"] or "").strip() or "full"
    c["lora_rank"] = int(c["lora_rank"] or 16)
    c["lora_targets"] = str(c["lora_targets"] or "").strip() or "all"
    return c


def load_dtype(case: dict) -> torch.dtype:
    if case["mode"] == "prefill":
        return torch.bfloat16
    p = case["precision"]
    if p in ("bf16-mixed", "16-mixed", "32-true"):
        return torch.float32
    if p in ("bf16-true", "bf16-master", "fp8") or case.get("finetune") == "qlora":
        return torch.bfloat16
    if p == "16-true":
        return torch.float16
    raise ValueError(f"unknown precision {p!r} (known: {', '.join(PRECISIONS)})")


def read_cases(path: str) -> list[dict]:
    with open(path, newline="") as fh:
        return [normalize_case(r) for r in csv.DictReader(fh)]


# ------------------------------------------------------------------------------------------------------ model


class ModelSlot:
    """The one resident model, reused while the key stays the same."""

    def __init__(self, dev: Dev, tiny: bool):
        self.dev, self.tiny = dev, tiny
        self.key = None
        self.model = None
        self.info = {}
        self.warm_baseline = None

    def free(self):
        self.model = None
        self.key = None
        self.info = {}
        self.dev.empty_cache()

    def key_of(self, case):
        own = json.dumps(case["config"], sort_keys=True) if case.get("config") else ""
        return (case["family"], case["layers"], case["overrides"], case["attn_implementation"], load_dtype(case),
                case["image_size"] if case["family"].startswith("vit") else "",
                case["trainable"] if case["mode"] == "train" else "all", own,
                (case["finetune"], case["lora_rank"], case["lora_targets"], case["precision"] == "fp8")
                if case["mode"] == "train" else ("full",))

    def config_of(self, case) -> dict:
        """The config dict the case builds: its own `config` (a user's config.json, `validation model --config`,
        layers already cut) or the family's from validation.model.hf_configs."""
        if case.get("config"):
            return case["config"]
        return family_config(case["family"], case["layers"], case["overrides"] or None, self.tiny)

    def get(self, case):
        key = self.key_of(case)
        if self.model is not None and key == self.key:
            resident = self.dev.allocated()
            if resident is None or resident == self.info["baseline_bytes"] + self.info["weights_bytes"]:
                return self.model, self.info, False
        self.free()
        if is_vision(case["family"]) and not case.get("config"):
            return self._get_vision(case, key)
        cfg = self.config_of(case)
        hf_cfg = to_hf_config(cfg)
        baseline = self.dev.allocated()
        notes = []
        if self.warm_baseline is not None and baseline is not None and baseline != self.warm_baseline:
            notes.append(f"baseline {baseline} != warm-up baseline {self.warm_baseline}")
        from transformers import AutoModelForCausalLM

        t = time.perf_counter()
        with torch.device(self.dev.device):
            model = AutoModelForCausalLM.from_config(hf_cfg, attn_implementation=case["attn_implementation"],
                                                     dtype=load_dtype(case))
        if case["mode"] == "train" and (case["finetune"] != "full" or case["precision"] == "fp8"):
            model = apply_finetune(model, case, self.dev.device)
            self.dev.empty_cache()
        self.dev.sync()
        build_s = time.perf_counter() - t
        after = self.dev.allocated()
        self.model, self.key = model, key
        self.info = {
            "n_params": sum(p.numel() for p in model.parameters()),
            "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "model_type": cfg["model_type"],
            "experts_implementation": getattr(model.config, "_experts_implementation", None)
            if _is_moe(cfg) else "",
            "layer_types": ",".join("S" if k == "sliding_attention" else "F" for k in layer_kinds(cfg)),
            "baseline_bytes": baseline, "weights_bytes": sub_or_none(after, baseline), "build_s": round(build_s, 3),
            "vocab": cfg["vocab_size"], "notes": notes,
        }
        return model, self.info, True


    def _get_vision(self, case, key):
        cfg = vision_config(case["family"], case["layers"], case["overrides"] or None, self.tiny, case["image_size"])
        baseline = self.dev.allocated()
        t = time.perf_counter()
        with torch.device(self.dev.device):
            model = build_vision(cfg, case["attn_implementation"], load_dtype(case))
        set_trainable(model, cfg, case["trainable"] if case["mode"] == "train" else "all")  # as key_of keys it
        self.dev.sync()
        build_s = time.perf_counter() - t
        after = self.dev.allocated()
        self.model, self.key = model, key
        self.info = {"n_params": sum(p.numel() for p in model.parameters()), "model_type": cfg["model_type"],
                     "experts_implementation": "", "layer_types": "", "baseline_bytes": baseline,
                     "weights_bytes": sub_or_none(after, baseline), "build_s": round(build_s, 3), "vocab": 0,
                     "notes": [], "vision_cfg": cfg}
        return model, self.info, True


def _is_moe(cfg):
    return any(k in cfg for k in ("num_local_experts", "num_experts", "n_routed_experts"))


def warm_up(dev: Dev, inference_only: bool = False):
    """cuBLAS handles/workspaces of the forward and the autograd thread, autocast and no-grad paths (seq 128),
    on a tiny llama; returns memory_allocated() afterwards with everything freed (the baseline). `inference_only`
    (--warmup inference): the no-grad path only, so the process holds the one workspace a serving process has
    (no autograd thread); for prefill-only case lists."""
    from transformers import AutoModelForCausalLM

    cfg = to_hf_config(family_config("llama-3.1-8b", 1, tiny=True))
    with torch.device(dev.device):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
    ids = torch.randint(0, cfg.vocab_size, (1, 128), device=dev.device)
    if not inference_only:
        model.train()
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        del loss
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss  # plain fp32 too
        loss.backward()
        del loss
    model.eval()
    model.to(torch.bfloat16)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        del out
    del model, ids
    dev.sync()
    dev.empty_cache()
    return dev.allocated()


def _recompile_limit():
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            return getattr(cfg, name)
    return None


def run_case(case: dict, slot: ModelSlot, dev: Dev, row: dict, run_fn=None, box: PhaseBox | None = None):
    """Fill `row` for one case; never raises (status ok / oom / error / unsupported). `box` (optional) is where
    the phase being run is written (a caller can watch it: `validation model` prints each phase)."""
    box = PhaseBox() if box is None else box
    t0 = time.perf_counter()
    try:
        if case["mode"] not in ("train", "prefill"):
            raise ValueError(f"unknown mode {case['mode']!r}")
        if case["attn_implementation"] == "flex_attention":
            row["recompile_limit"] = _recompile_limit()
            if not case["no_reset"]:
                torch._dynamo.reset()
        box.phase = "build"
        model, info, built = slot.get(case)
        if "vision_cfg" in info:
            row["vision_tokens"], row["lm_tokens"] = vision_tokens(info["vision_cfg"], case)
        row["trainable_params"] = info.get("trainable_params", "")
        for k in ("n_params", "model_type", "experts_implementation", "layer_types", "baseline_bytes",
                  "weights_bytes"):
            row[k] = info[k]
        row["build_s"] = info["build_s"] if built else 0.0
        if info["notes"]:
            row["reason"] = "; ".join(info["notes"])
        fn = run_fn or (run_train if case["mode"] == "train" else run_prefill)
        fn(model, info, case, dev, row, box)
        row["status"] = "ok"
        row["phase"] = ""
    except (Unsupported, MissingLibrary) as e:
        row.update(status="unsupported", reason=str(e), phase=box.phase)
    except Exception as e:  # noqa: BLE001 - every failure becomes a row
        if is_oom(e):
            row.update(status="oom", reason=f"OOM in {box.phase}: {typed_line(e, 200)}", phase=box.phase,
                       peak_at_oom_bytes=dev.peak())
        else:
            row.update(status="error", reason=f"{box.phase}: {typed_line(e)}", phase=box.phase)
        traceback.clear_frames(e.__traceback__)
        del e
    finally:
        model = info = None
        _cleanup(slot, dev)
    row["case_s"] = round(time.perf_counter() - t0, 3)
    return row


def _cleanup(slot: ModelSlot, dev: Dev):
    if slot.model is not None:
        try:
            slot.model.zero_grad(set_to_none=True)
        except Exception:  # noqa: BLE001
            pass
    dev.empty_cache()
    if slot.model is not None and dev.cuda:
        if dev.allocated() != slot.info["baseline_bytes"] + slot.info["weights_bytes"]:
            slot.free()  # something survived the case: rebuild for the next one


# ------------------------------------------------------------------------------------------------------- main


def _versions():
    try:
        import transformers

        tv = transformers.__version__
    except Exception:  # noqa: BLE001
        tv = ""
    return torch.__version__, tv


def config_name(case):
    name = f"{case['family']}-L{case['layers']}"
    if case["overrides"]:
        name += "-" + hashlib.sha1(case["overrides"].encode()).hexdigest()[:8]
    return name + ".json"


def _fmt_bytes(b):
    return "-" if b in (None, "") else f"{b / 2**30:.2f}GiB"


def main(argv=None, run_fn=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.hf_models", description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=sorted(SUITES))
    parser.add_argument("--cases", help="CSV with the case columns: " + ", ".join(CASE_COLUMNS))
    parser.add_argument("--out", help="output CSV (one row per case, flushed row by row)")
    parser.add_argument("--budget-s", type=float, default=480.0, help="start no case after this many seconds")
    parser.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    parser.add_argument("--tiny", action="store_true", help="shrunken families (CPU tests)")
    parser.add_argument("--dump-configs", metavar="DIR",
                        help="write the config of every (family, layers, overrides) of the cases to DIR; without "
                             "--suite/--cases, every family at --layers (default: as published)")
    parser.add_argument("--layers", type=int, default=None, help="with --dump-configs alone")
    parser.add_argument("--list", action="store_true", help="print the suite's cases and exit")
    parser.add_argument("--warmup", choices=("train", "inference"), default="train",
                        help="inference: warm up the no-grad path only (one cuBLAS workspace, as a serving process)")
    args = parser.parse_args(argv)
    t_start = time.monotonic()

    if args.suite and args.cases:
        parser.error("--suite and --cases are exclusive")
    cases = []
    if args.suite:
        cases = [normalize_case(c) for c in SUITES[args.suite]()]
    elif args.cases:
        cases = read_cases(args.cases)
    if args.dump_configs:
        if cases:
            seen = {}
            for c in cases:
                seen.setdefault(config_name(c), c)
            for name, c in seen.items():
                dump_config(c["family"], os.path.join(args.dump_configs, name), c["layers"], c["overrides"] or None,
                            args.tiny)
        else:
            for fam in FAMILIES:
                suffix = f"-L{args.layers}" if args.layers else ""
                dump_config(fam, os.path.join(args.dump_configs, f"{fam}{suffix}.json"), args.layers, None, args.tiny)
        print(f"configs written to {args.dump_configs}", flush=True)
    if args.list:
        for c in cases:
            print(",".join(str(c[k]) for k in CASE_COLUMNS))
        return 0
    if not cases:
        if args.dump_configs:
            return 0
        parser.error("give --suite or --cases")
    if not args.out:
        parser.error("--out is required")

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dev = Dev(device)
    tv, trv = _versions()
    slot = ModelSlot(dev, args.tiny)
    common = {"torch_version": tv, "transformers_version": trv, "device_name": dev.name(), "tiny": int(args.tiny)}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    n = len(cases)
    warmed = False
    with open(args.out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        fh.flush()
        for i, case in enumerate(cases, 1):
            row = dict(case, **common)
            row["config_file"] = config_name(case) if args.dump_configs else ""
            if time.monotonic() - t_start >= args.budget_s:
                row.update(status="skipped_budget", reason=f"budget {args.budget_s:g}s spent")
            else:
                if not warmed:
                    slot.warm_baseline = warm_up(dev, args.warmup == "inference")
                    warmed = True
                run_case(case, slot, dev, row, run_fn)
            writer.writerow(row)
            fh.flush()
            t_ms = row.get("time_step_ms") or row.get("time_prefill_ms")
            print(f"[{i}/{n}] {case['family']} L{case['layers']} {case['attn_implementation']} {case['mode']} "
                  f"{case['precision']} {case['optimizer']} ckpt={case['checkpointing']} "
                  f"{case['seq_len']}x{case['batch']}: {row.get('status')} peak={_fmt_bytes(row.get('peak_bytes'))}"
                  f" t={t_ms if t_ms is not None else '-'}ms {row.get('reason') or ''}".rstrip(), flush=True)
    slot.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
