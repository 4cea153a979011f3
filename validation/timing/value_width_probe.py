"""Two things a long-context plan needs measured on the device itself: which SDPA backend runs an attention call
whose value width differs from its query/key width (MLA: q/k 192, v 128), and how the host-side costs of a decode
step (a cuDNN graph build at a new key length, a host-bound chain of small launches) move with the host's speed.

    python -m validation.timing.value_width_probe --out OUT.csv [--budget-s 100]

Part `route` rows: for each shape (batch, heads, q_len, kv_len, d_qk, d_v, causal), `torch._fused_sdp_choice`
(the backend SDPA's own dispatch picks, torch's SDPBackend numbering) and, under `sdpa_kernel([backend])` for
cudnn, efficient and flash, whether the call runs and its median time over 3 repeats (ms; synchronized). The same
shape with v padded to d_qk (what a flash path needs) and with d_v = d_qk is measured beside it.

Part `host` rows: cycles of validation.timing.host_speed's three figures, then one q_len = 1 cuDNN call at a new
key length of a shape already built minus the same call repeated (one graph build), then a chain of 300 tiny
launches (a host-bound decode step's dispatch). Each cycle is one row, so build and chain times can be set against
the host's speed at the same moment.

Self-contained: torch and the standard library only (no estimator/ imports).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from validation.errors import typed_line
from validation.timing.decode_probe import write_rows
from validation.timing.host_speed import launch_us, module_call_us, python_loop_ns

DEV = "cuda" if torch.cuda.is_available() else "cpu"  # a CPU run is a smoke test only
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "flash": SDPBackend.FLASH_ATTENTION}
COLUMNS = ["part", "variant", "backend", "batch", "heads", "kv_heads", "q_len", "kv_len", "d_qk", "d_v", "causal",
           "choice", "ok", "ms", "python_loop_ns", "launch_us", "module_call_us", "build_ms", "seen_ms",
           "chain_ms", "error", "utc", "device_name", "torch_version"]


def _sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def _ms(fn, repeats: int = 3) -> float:
    out = []
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def _choice(q, k, v, causal) -> int:
    try:
        return int(torch._fused_sdp_choice(q, k, v, None, 0.0, causal, enable_gqa=q.shape[1] != k.shape[1]))
    except Exception:  # noqa: BLE001
        return -1


def route(rows, B, H, Hk, sq, skv, d, dv, causal, variant, dtype=torch.bfloat16):
    q = torch.randn(B, H, sq, d, device=DEV, dtype=dtype)
    k = torch.randn(B, Hk, skv, d, device=DEV, dtype=dtype)
    v = torch.randn(B, Hk, skv, dv, device=DEV, dtype=dtype)
    gqa = H != Hk
    base = dict(part="route", variant=variant, batch=B, heads=H, kv_heads=Hk, q_len=sq, kv_len=skv, d_qk=d, d_v=dv,
                causal=int(causal), choice=_choice(q, k, v, causal))
    for name in ("default", *BACKENDS):
        rec = dict(base, backend=name)
        try:
            def call():
                F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
            if name == "default":
                call()
                rec.update(ok=1, ms=round(_ms(call), 4))
            else:
                with sdpa_kernel([BACKENDS[name]]):
                    call()
                    rec.update(ok=1, ms=round(_ms(call), 4))
        except Exception as exc:  # noqa: BLE001  (a backend that refuses the shape is a result)
            rec.update(ok=0, error=typed_line(exc, 160))
        rows.append(rec)
        print({k_: rec.get(k_) for k_ in ("variant", "backend", "q_len", "kv_len", "d_qk", "d_v", "choice", "ok",
                                          "ms")})
    if DEV == "cuda":
        torch.cuda.empty_cache()


def host_cycle(rows, i, S, B=1, H=32, Hk=8, D=128, dtype=torch.bfloat16):
    rec = dict(part="host", variant=f"cycle{i}", backend="cudnn", batch=B, heads=H, kv_heads=Hk, q_len=1,
               kv_len=S, d_qk=D, d_v=D, causal=0)
    rec.update(python_loop_ns=round(python_loop_ns(300_000), 2), launch_us=round(launch_us(DEV, 1000), 3),
               module_call_us=round(module_call_us(DEV, 500), 3))
    q = torch.randn(B, H, 1, D, device=DEV, dtype=dtype)
    k = torch.randn(B, Hk, S, D, device=DEV, dtype=dtype)
    v = torch.randn_like(k)

    def call():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=H != Hk)
    try:
        new = _ms(call, 1)
        seen = _ms(call, 3)
        rec.update(ok=1, build_ms=round(new - seen, 3), seen_ms=round(seen, 4))
    except Exception as exc:  # noqa: BLE001
        rec.update(ok=0, error=typed_line(exc, 160))
    x = torch.zeros(64, device=DEV)

    def chain():
        for _ in range(300):
            x.add_(1.0)
    chain()
    rec["chain_ms"] = round(_ms(chain, 3), 4)
    rec["utc"] = time.strftime("%H:%M:%S", time.gmtime())
    rows.append(rec)
    print({k_: rec.get(k_) for k_ in ("variant", "kv_len", "batch", "python_loop_ns", "launch_us", "build_ms",
                                      "seen_ms", "chain_ms")})


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=100.0)
    ap.add_argument("--scale", type=int, default=1024, help="tokens per 'k' in the shapes (a CPU smoke test: 16)")
    a = ap.parse_args(argv)
    t_end = time.perf_counter() + a.budget_s
    env = dict(device_name=torch.cuda.get_device_name() if DEV == "cuda" else "cpu", torch_version=torch.__version__)
    K = a.scale
    rows: list[dict] = []
    # DeepSeek-V2-Lite's attention: 16 heads, q/k 192 (128 nope + 64 rope), v 128; prefill causal and decode q_len 1
    plan = []
    for S in (8 * K, 64 * K, 128 * K):
        plan += [(1, 16, 16, S, S, 192, 128, True, "mla"), (1, 16, 16, S, S, 192, 192, True, "mla_v_padded")]
    plan += [(1, 16, 16, 64 * K, 64 * K, 128, 128, True, "d128")]
    plan += [(1, 16, 16, 1, S, 192, 128, False, "mla_decode") for S in (8 * K + 1, 128 * K + 1)]
    plan += [(4, 16, 16, 1, 32 * K + 1, 192, 128, False, "mla_decode")]
    for B, H, Hk, sq, skv, d, dv, causal, variant in plan:
        if time.perf_counter() > t_end - min(45.0, a.budget_s / 3):
            break
        try:
            route(rows, B, H, Hk, sq, skv, d, dv, causal, variant)
            _write(a.out, rows, env)  # after every shape: a run cut short by its timeout keeps what it measured
        except Exception as exc:  # noqa: BLE001
            print(f"route {variant} {sq}x{skv}: {typed_line(exc, 200)}")
    i = 0
    while time.perf_counter() < t_end and i < 40:
        S = 16 * K + 1 + i  # a new key length each cycle: one build each
        B = 8 if i % 4 == 3 else 1
        try:
            host_cycle(rows, i, S, B=B)
        except Exception as exc:  # noqa: BLE001
            print(f"host cycle {i}: {typed_line(exc, 200)}")
        i += 1
    _write(a.out, rows, env)
    print(f"wrote {len(rows)} rows to {a.out}")


def _write(path, rows, env) -> None:
    write_rows(path, rows, env, COLUMNS)


if __name__ == "__main__":
    main()
