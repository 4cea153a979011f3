"""The measurement sections of `python -m validation calibrate` (validation/timing/calibrate.py times them, runs them
under its budget and writes the JSON): memory-bound kernels, the launch floor, SDPA attention and optimizer
steps; the GEMM classes (dense and grouped) are in validation/timing/calibrate_gemm.py. Each `measure_*` returns
the rows of its JSON section (format in validation/timing/calibrate.py) and appends what it could
not measure to `skipped`."""

from __future__ import annotations

import statistics
import time
import warnings

import torch
import torch.nn.functional as F

from validation.errors import typed_line

GIB = 1 << 30
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def sig(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


# ---------------------------------------------------------------- memory-bound kernels

def _rmsnorm(x, weight, eps=1e-6):
    """transformers' LlamaRMSNorm.forward."""
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(input_dtype)


def _rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _rope(q, cos, sin):
    """transformers' apply_rotary_pos_emb for one tensor (cos, sin already unsqueezed to (1, 1, S, D))."""
    return (q * cos) + (_rotate_half(q) * sin)


def _memory_ops(rows_list, cols, quick):
    """(op, dtype, shape, elements, bytes, min_bytes, kernels, make) for each op and size; make(device) returns
    the function to time. Byte formulas: s = element size, n = elements, r = rows, h = last dim."""
    ops = []
    for r in rows_list:
        ops += _layer_ops(r, cols) + _expert_ops(r, cols) + _softmax_ops(r, cols)
    return ops + _cross_entropy_ops(quick)


def _layer_ops(r, cols):
    """A decoder layer's memory-bound ops on (r, cols): add and mul, the bf16 -> fp32 cast, a copy, RMSNorm, SiLU·mul
    and RoPE, each with its eager kernels' bytes."""
    n = r * cols
    ops = []
    for dname in ("bfloat16", "float32"):
        s = 2 if dname == "bfloat16" else 4
        for op, fn in (("add", torch.add), ("mul", torch.mul)):
            def make(device, dt=DTYPES[dname], r=r, fn=fn):
                a = torch.randn(r, cols, device=device, dtype=dt)
                b = torch.randn(r, cols, device=device, dtype=dt)
                return lambda: fn(a, b)
            ops.append((op, dname, [r, cols], n, 3 * s * n, 3 * s * n, 1, make))

    def make_cast(device, r=r):
        a = torch.randn(r, cols, device=device, dtype=torch.bfloat16)
        return lambda: a.to(torch.float32)
    ops.append(("cast_bf16_fp32", "bfloat16", [r, cols], n, 6 * n, 6 * n, 1, make_cast))

    def make_copy(device, r=r):
        a = torch.randn(r, cols, device=device, dtype=torch.bfloat16)
        b = torch.empty_like(a)
        return lambda: b.copy_(a)
    ops.append(("copy", "bfloat16", [r, cols], n, 4 * n, 4 * n, 1, make_copy))

    # to fp32 (2n+4n), pow (8n), mean (4n+4r), +eps (8r), rsqrt (8r), mul (8n+4r), to bf16 (4n+2n),
    # weight * (4n+2h): 36n + 24r + 2h over 8 kernels; fused: 4n + 2h.
    def make_rms(device, r=r):
        x = torch.randn(r, cols, device=device, dtype=torch.bfloat16)
        w = torch.ones(cols, device=device, dtype=torch.bfloat16)
        return lambda: _rmsnorm(x, w)
    ops.append(("rmsnorm", "bfloat16", [r, cols], n, 36 * n + 24 * r + 2 * cols, 4 * n + 2 * cols, 8,
                make_rms))

    # silu (4n), mul (6n): 10n over 2 kernels; fused: 6n.
    def make_silu(device, r=r):
        g = torch.randn(r, cols, device=device, dtype=torch.bfloat16)
        u = torch.randn(r, cols, device=device, dtype=torch.bfloat16)
        return lambda: F.silu(g) * u
    ops.append(("silu_mul", "bfloat16", [r, cols], n, 10 * n, 6 * n, 2, make_silu))

    # q (1, H, S, D) with H*D = cols, S = r; c = S*D for cos and sin each.
    # q*cos (4n+2c), -x2 (2n), cat (4n), rot*sin (4n+2c), add (6n): 20n + 4c over 5 kernels; fused 4n + 4c.
    heads, d = max(1, cols // 128), min(128, cols)
    c = r * d

    def make_rope(device, r=r, heads=heads, d=d):
        q = torch.randn(1, heads, r, d, device=device, dtype=torch.bfloat16)
        cos = torch.randn(1, 1, r, d, device=device, dtype=torch.bfloat16)
        sin = torch.randn(1, 1, r, d, device=device, dtype=torch.bfloat16)
        return lambda: _rope(q, cos, sin)
    ops.append(("rope", "bfloat16", [1, heads, r, d], heads * r * d, 20 * n + 4 * c, 4 * n + 4 * c, 5,
                make_rope))
    return ops


def _expert_ops(r, cols):
    """The elementwise ops of transformers' grouped_mm experts (integrations/moe.py), which run PyTorch's
    non-vectorised elementwise kernel: a row mask or row weight broadcast over the hidden dim, a chunked (strided)
    gate/up pair, a row gather."""
    n = r * cols
    ops = []

    # masked_fill with a (r, 1) mask: read n, write n, mask r bytes
    def make_masked_fill(device, r=r):
        x = torch.randn(r, cols, device=device, dtype=torch.bfloat16)
        m = torch.zeros(r, 1, device=device, dtype=torch.bool)
        return lambda: x.masked_fill(m, 0.0)
    ops.append(("masked_fill_rows", "bfloat16", [r, cols], n, 4 * n + r, 4 * n + r, 1, make_masked_fill))

    # gate, up = x.chunk(2, -1) of x (r, 2·cols); silu(gate) (4n, strided read), * up (6n): 10n over 2 kernels
    def make_silu_chunked(device, r=r):
        x = torch.randn(r, 2 * cols, device=device, dtype=torch.bfloat16)

        def run():
            g, u = x.chunk(2, dim=-1)
            return F.silu(g) * u
        return run
    ops.append(("silu_mul_chunked", "bfloat16", [r, 2 * cols], n, 10 * n, 6 * n, 2, make_silu_chunked))

    # x * w[:, None] with w (r,): read n + r, write n
    def make_mul_rows(device, r=r):
        x = torch.randn(r, cols, device=device, dtype=torch.bfloat16)
        w = torch.randn(r, device=device, dtype=torch.bfloat16)
        return lambda: x * w.unsqueeze(-1)
    ops.append(("mul_rows", "bfloat16", [r, cols], n, 4 * n + 2 * r, 4 * n + 2 * r, 1, make_mul_rows))

    # x[perm] with a random permutation of the rows: read n, write n (+ the int64 index)
    def make_gather_rows(device, r=r):
        x = torch.randn(r, cols, device=device, dtype=torch.bfloat16)
        perm = torch.randperm(r, device=device)
        return lambda: x[perm]
    ops.append(("gather_rows", "bfloat16", [r, cols], n, 4 * n + 8 * r, 4 * n + 8 * r, 1, make_gather_rows))
    return ops


def _softmax_ops(r, cols):
    """An fp32 softmax over the last dim: read n, write n."""
    n = r * cols

    def make_softmax(device, r=r):
        x = torch.randn(r, cols, device=device, dtype=torch.float32)
        return lambda: torch.softmax(x, dim=-1)
    return [("softmax", "float32", [r, cols], n, 8 * n, 8 * n, 1, make_softmax)]


def _cross_entropy_ops(quick):
    """Cross entropy on fp32 logits (HF upcasts), forward and backward: log_softmax (8n), nll (~0), backward: zeros
    + scatter of the nll grad (4n), log_softmax_backward (12n): 24n; fused forward+backward: read logits, write
    grad = 8n."""
    ops = []
    vocab = 1000 if quick else 128256
    for t in ((32, 64) if quick else (2048, 8192)):
        n = t * vocab

        def make_ce(device, t=t):
            logits = torch.randn(t, vocab, device=device, dtype=torch.float32, requires_grad=True)
            labels = torch.randint(0, vocab, (t,), device=device)

            def fn():
                logits.grad = None
                F.cross_entropy(logits, labels).backward()
            return fn
        ops.append(("cross_entropy_fwd_bwd", "float32", [t, vocab], n, 24 * n, 8 * n, 5, make_ce))
    return ops


def measure_memory_bound(timer, device, quick, budget, skipped) -> list[dict]:
    rows_list, cols = ((64, 256), 256) if quick else ((4096, 16384, 32768), 4096)
    out = []
    for op, dname, shape, n, nbytes, min_bytes, kernels, make in _memory_ops(rows_list, cols, quick):
        what = f"{op} {dname} {shape}"
        if budget.over():
            skipped.append(dict(section="memory_bound", what=what, reason="time budget"))
            continue
        try:
            fn = make(device)
            ms = timer(fn)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a skipped entry
            skipped.append(dict(section="memory_bound", what=what, reason=typed_line(exc)))
            continue
        finally:
            fn = None
        out.append(dict(op=op, dtype=dname, shape=shape, elements=n, bytes=nbytes, min_bytes=min_bytes,
                        kernels=kernels, ms=sig(ms), gbps=sig(nbytes / ms / 1e6, 5)))
    return out


# ---------------------------------------------------------------- launch floor

def measure_launch(device) -> dict:
    x = torch.zeros(1, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(50):
        x + x
    sync()
    launch = []
    for _ in range(5):
        sync()
        t0 = time.perf_counter()
        for _ in range(1000):
            x + x
        sync()
        launch.append((time.perf_counter() - t0) * 1e3 / 1000)
    idle, with_kernel = [], []
    for _ in range(5):
        sync()
        t0 = time.perf_counter()
        for _ in range(100):
            sync()
        idle.append((time.perf_counter() - t0) * 1e3 / 100)
        t0 = time.perf_counter()
        for _ in range(100):
            x + x
            sync()
        with_kernel.append((time.perf_counter() - t0) * 1e3 / 100)
    return dict(launch_floor_ms=sig(max(statistics.median(launch), 1e-6)),
                sync_ms=sig(max(statistics.median(idle), 1e-6)),
                launch_sync_ms=sig(max(statistics.median(with_kernel), 1e-6)))


# ---------------------------------------------------------------- attention

def attention_cases(quick) -> list[tuple[str, int, int, bool]]:
    """(mode, q_len, kv_len, causal)."""
    if quick:
        return ([("forward", L, L, True) for L in (64, 128)] + [("forward_backward", 64, 64, True)]
                + [("forward", 1, kv, False) for kv in (256, 1024)])
    return ([("forward", L, L, True) for L in (1024, 4096, 16384)] + [("forward_backward", 4096, 4096, True)]
            + [("forward", 1, kv, False) for kv in (4096, 32768, 131072)])


def measure_attention(timer, device, quick, budget, skipped) -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    B, Hq, Hkv, D, dname = 1, 32, 8, 128, "bfloat16"
    dtype = DTYPES[dname]
    out = []
    for mode, lq, lkv, causal in attention_cases(quick):
        for name, backend in backends.items():
            what = f"{name} {mode} q_len={lq} kv_len={lkv}"
            if budget.over():
                skipped.append(dict(section="attention", what=what, reason="time budget"))
                continue
            grad = mode == "forward_backward"
            fn = q = k = v = dout = None
            try:
                q = torch.randn(B, Hq, lq, D, device=device, dtype=dtype, requires_grad=grad)
                k = torch.randn(B, Hkv, lkv, D, device=device, dtype=dtype, requires_grad=grad)
                v = torch.randn(B, Hkv, lkv, D, device=device, dtype=dtype, requires_grad=grad)
                dout = torch.randn(B, Hq, lq, D, device=device, dtype=dtype) if grad else None

                def fn(backend=backend, q=q, k=k, v=v, dout=dout, causal=causal, grad=grad):
                    with sdpa_kernel(backend):
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
                    if grad:
                        q.grad = k.grad = v.grad = None
                        o.backward(dout)
                    return o
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ms = timer(fn)
            except Exception as exc:  # noqa: BLE001 - a backend without a kernel, out of memory
                skipped.append(dict(section="attention", what=what, reason=typed_line(exc)))
                continue
            finally:
                fn = q = k = v = dout = None
                if device == "cuda":
                    torch.cuda.empty_cache()
            flops = 4.0 * B * Hq * lq * lkv * D * (0.5 if causal and lq == lkv else 1.0) * (3.5 if grad else 1.0)
            nbytes = 2 * (2 * B * Hq * lq * D + 2 * B * Hkv * lkv * D) * (2 if grad else 1)
            out.append(dict(backend=name, mode=mode, batch=B, q_heads=Hq, kv_heads=Hkv, head_dim=D, q_len=lq,
                            kv_len=lkv, causal=causal, dtype=dname, ms=sig(ms),
                            tflops=sig(flops / ms / 1e9, 5), bytes=nbytes, gbps=sig(nbytes / ms / 1e6, 5)))
    return out


# ---------------------------------------------------------------- optimizer

def measure_optimizers(timer, device, quick, budget, skipped) -> list[dict]:
    total, count = (1_000_000, 20) if quick else (1_000_000_000, 20)
    # uneven sizes like a model's (a few large, many small), summing exactly to `total`
    weights = [4 if i % 5 == 0 else 1 for i in range(count)]
    sizes = [total * w // sum(weights) for w in weights]
    sizes[0] += total - sum(sizes)
    makers = {"adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-6, foreach=True),
              "adamw_fused": lambda ps: torch.optim.AdamW(ps, lr=1e-6, fused=True),
              "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=1e-6, momentum=0.9, foreach=True)}
    out = []
    for dname in ("bfloat16", "float32"):
        params = None
        for name, make in makers.items():
            what = f"{name} {dname} {total}"
            if budget.over():
                skipped.append(dict(section="optimizer", what=what, reason="time budget"))
                continue
            opt = None
            try:
                if params is None:
                    params = []
                    for n in sizes:
                        p = torch.nn.Parameter(torch.randn(n, device=device, dtype=DTYPES[dname]))
                        p.grad = torch.randn_like(p)
                        params.append(p)
                opt = make(params)
                ms = timer(opt.step)
            except Exception as exc:  # noqa: BLE001 - every failure becomes a skipped entry
                skipped.append(dict(section="optimizer", what=what, reason=typed_line(exc)))
                continue
            finally:
                opt = None
                if device == "cuda":
                    torch.cuda.empty_cache()
            out.append(dict(name=name, dtype=dname, params=total, tensors=count, ms=sig(ms),
                            ms_per_1e9_params=sig(ms * 1e9 / total)))
        params = None
        if device == "cuda":
            torch.cuda.empty_cache()
    return out
