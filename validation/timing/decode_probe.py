"""What a decode step of Hugging Face `generate` pays per new KV length, measured apart from the model.

    python -m validation.timing.decode_probe --out OUT.csv [--hf-out HF.csv] [--budget-s 120]

Part 1 (`probe` rows): the attention half of a decode step without the model. For each shape (batch, q_heads,
kv_heads, head_dim), starting cache length S0 and layer count n, every step grows each of n per-layer caches by one
token with torch.cat (as DynamicCache.update does) and calls SDPA with a (batch, q_heads, 1, head_dim) query
(enable_gqa=True, no mask: what transformers 5.17's sdpa_attention_forward passes for an unpadded decode step),
under `sdpa_kernel([backend])` for cudnn, flash and efficient. Steps 1..k run at new key lengths ("new"); then the
caches restart from S0 and the same k lengths run again ("seen": every per-length library cache is warm). Each row
is one step's wall time (host perf_counter around the step, synchronized at both ends), so host-side costs (cuDNN
graph builds) are in it.

Part 2 (`single` rows): one SDPA call at a new key length against the same call repeated: the build cost of one
cuDNN graph as a function of the shape.

Part 3 (`--hf-out`, `hf` rows): a 4-layer Llama-3.1-8B-shaped model (validation.model.hf_configs, random weights)
prefills S0 tokens, then decodes 10 steps per stack: Hugging Face's default (DynamicCache, SDPA's own choice),
the same with the single-token calls forced to flash or efficient, and a StaticCache (its key length is the cache's
fixed size every step). Each row is one step's wall time.

Self-contained: torch and transformers only (no estimator/ imports).
"""

from __future__ import annotations

import argparse
import csv
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from validation.errors import typed_line

DEV = "cuda" if torch.cuda.is_available() else "cpu"  # a CPU run is a smoke test only
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}
COLUMNS = ["part", "backend", "batch", "q_heads", "kv_heads", "head_dim", "s0", "layers", "step", "phase",
           "kv_len", "ms", "device_name", "torch_version"]


def _sync(fn=None) -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def _sync_ms(fn) -> float:
    _sync()
    t0 = time.perf_counter()
    fn()
    _sync()
    return (time.perf_counter() - t0) * 1e3


def probe(rows, B, Hq, Hk, D, S0, n, backend, steps, dtype=torch.bfloat16):
    dev = DEV
    k0 = [torch.randn(B, Hk, S0, D, device=dev, dtype=dtype) for _ in range(n)]
    v0 = [torch.randn(B, Hk, S0, D, device=dev, dtype=dtype) for _ in range(n)]
    q = torch.randn(B, Hq, 1, D, device=dev, dtype=dtype)
    new = torch.randn(B, Hk, 1, D, device=dev, dtype=dtype)
    for phase in ("new", "seen"):
        ks, vs = list(k0), list(v0)
        for step in range(1, steps + 1):
            ms = _sync_ms(lambda ks=ks, vs=vs: _decode_layers(q, ks, vs, new, backend))
            rows.append(dict(part="probe", backend=backend, batch=B, q_heads=Hq, kv_heads=Hk, head_dim=D, s0=S0,
                             layers=n, step=step, phase=phase, kv_len=S0 + step, ms=round(ms, 4)))
    k0 = v0 = None
    _empty()


def _decode_layers(q, ks, vs, new, backend) -> None:
    """One decode step's attention over every layer: each cache grows by a token (torch.cat), then SDPA."""
    for i in range(len(ks)):
        ks[i] = torch.cat([ks[i], new], dim=-2)
        vs[i] = torch.cat([vs[i], new], dim=-2)
        with sdpa_kernel([BACKENDS[backend]]):
            F.scaled_dot_product_attention(q, ks[i], vs[i], enable_gqa=q.shape[1] != ks[i].shape[1])


def single(rows, B, Hq, Hk, D, S, backend, dtype=torch.bfloat16):
    q = torch.randn(B, Hq, 1, D, device=DEV, dtype=dtype)
    k = torch.randn(B, Hk, S, D, device=DEV, dtype=dtype)
    v = torch.randn_like(k)

    for phase in ("new", "seen", "seen", "seen"):
        ms = _sync_ms(lambda: _one_call(q, k, v, backend))
        rows.append(dict(part="single", backend=backend, batch=B, q_heads=Hq, kv_heads=Hk, head_dim=D, s0=S,
                         layers=1, step=0, phase=phase, kv_len=S, ms=round(ms, 4)))


def _one_call(q, k, v, backend) -> None:
    with sdpa_kernel([BACKENDS[backend]]):
        F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])


def hf_part(rows, S0, steps=10, batch=1, compiled_only=False):
    from transformers import AutoModelForCausalLM, StaticCache

    from validation.model.hf_configs import family_config, to_hf_config
    cfg = to_hf_config(family_config("llama-3.1-8b", layers=4))
    with torch.device(DEV):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
    model.eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, S0), device=DEV)
    tok = torch.randint(0, cfg.vocab_size, (batch, 1), device=DEV)
    stacks = [("dynamic_auto", None, False), ("dynamic_flash", "flash", False),
              ("dynamic_efficient", "efficient", False), ("dynamic_auto_again", None, False),
              ("static_auto", None, True)]
    if compiled_only:  # the StaticCache step against the same step under torch.compile(mode="reduce-overhead")
        stacks = [("static_auto", None, True), ("static_compiled", None, True)]
    with torch.no_grad():
        for name, forced, static in stacks:
            try:
                _hf_stack(rows, model, cfg, ids, tok, S0, steps, batch, name, forced, static, StaticCache)
            except Exception as exc:  # noqa: BLE001
                print(f"hf {name} at {S0}: {typed_line(exc, 240)}")
            _empty()
    del model
    _empty()


def _hf_stack(rows, model, cfg, ids, tok, S0, steps, batch, name, forced, static, StaticCache):
    kw = {}
    if static:
        kw["past_key_values"] = StaticCache(config=cfg, max_cache_len=S0 + steps + 8)
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **kw)
    cache = out.past_key_values
    del out
    # static_compiled: the decode forward under torch.compile(mode="reduce-overhead") (Inductor with CUDA graphs; the
    # StaticCache keeps every shape fixed, cache_position is a tensor), what transformers' generate does with
    # cache_implementation="static" and a compile config. Its first steps pay the compile and the graph capture.
    fwd = torch.compile(model.forward, mode="reduce-overhead", dynamic=False) if name == "static_compiled" else model
    for step in range(1, steps + 1):
        pos = torch.tensor([S0 + step - 1], device=DEV)

        def one(c=cache, p=pos):
            extra = {"cache_position": p} if static else {}
            if forced:
                with sdpa_kernel([BACKENDS[forced]]):
                    return fwd(input_ids=tok, past_key_values=c, use_cache=True, **extra)
            return fwd(input_ids=tok, past_key_values=c, use_cache=True, **extra)
        ms = _sync_ms(one)
        rows.append(dict(part="hf", backend=name, batch=batch, q_heads=cfg.num_attention_heads,
                         kv_heads=cfg.num_key_value_heads, head_dim=cfg.hidden_size // cfg.num_attention_heads,
                         s0=S0, layers=4, step=step, phase="new" if name != "dynamic_auto_again" else "seen",
                         kv_len=S0 + step, ms=round(ms, 4)))
    del cache


def _empty() -> None:
    if DEV == "cuda":
        torch.cuda.empty_cache()


def _guarded(fn, *args) -> None:
    """Run one measurement; a backend that cannot run the shape (or any other failure) is printed, not raised."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001
        print(f"{fn.__name__}{args[1:]}: {typed_line(exc, 200)}")
    _empty()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--hf-out")
    ap.add_argument("--budget-s", type=float, default=120.0)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--hf-s0", type=int, default=32 * 1024, help="with --hf-out: the prefill length (default 32768)")
    ap.add_argument("--hf-compiled-only", action="store_true",
                    help="with --hf-out: only the StaticCache step, eager and under torch.compile (no probe rows)")
    a = ap.parse_args(argv)
    t_end = time.perf_counter() + a.budget_s
    env = dict(device_name=torch.cuda.get_device_name() if DEV == "cuda" else "cpu", torch_version=torch.__version__)
    x = torch.randn(64, 64, device=DEV)
    (x @ x).sum().item()
    K = 1024
    if a.hf_out:  # first: the whole-model stacks are what the plan's alternatives stand on
        hrows: list[dict] = []
        for S0 in (a.hf_s0,):
            try:
                hf_part(hrows, S0, steps=16 if a.hf_compiled_only else 10, compiled_only=a.hf_compiled_only)
            except Exception as exc:  # noqa: BLE001  (a failed part is reported, the rest still runs)
                print(f"hf part at {S0}: {typed_line(exc, 240)}")
        write_rows(a.hf_out, hrows, env)
        if a.hf_compiled_only:
            return
    rows: list[dict] = []
    shapes = [(1, 32, 8, 128), (4, 32, 8, 128), (1, 28, 4, 128), (8, 32, 8, 128), (1, 16, 8, 256), (1, 32, 8, 64)]
    for S in (4 * K + 1, 128 * K + 1, 32 * K + 1):  # one graph build per new shape and length
        for B, Hq, Hk, D in shapes:
            for backend in ("cudnn", "flash", "efficient"):
                if time.perf_counter() < t_end:
                    _guarded(single, rows, B, Hq, Hk, D, S, backend)
    plan = [((1, 32, 8, 128), S0, n) for S0 in (8 * K, 128 * K) for n in (1, 4)]
    plan += [((4, 32, 8, 128), 32 * K, 4), ((8, 32, 8, 128), 8 * K, 4), ((1, 28, 4, 128), 64 * K, 4),
             ((1, 16, 8, 256), 32 * K, 4), ((1, 32, 8, 128), 32 * K, 8)]
    for (B, Hq, Hk, D), S0, n in plan:
        for backend in ("cudnn", "flash", "efficient"):
            if time.perf_counter() < t_end:
                _guarded(probe, rows, B, Hq, Hk, D, S0, n, backend, a.steps)
    write_rows(a.out, rows, env)


def write_rows(path, rows, env, columns=None) -> None:
    """Rows (each with the run's environment columns) to a CSV of `columns` (this probe's COLUMNS by default)."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns or COLUMNS)
        w.writeheader()
        w.writerows({**r, **env} for r in rows)


if __name__ == "__main__":
    main()
