"""The measurement protocol of docs/contract.md §1 for one attention call, on CUDA or the CPU.

peak_extra_bytes = max_memory_allocated() - memory_allocated() around the second (warm) call, with
q, k, v, the mask and grad_out already allocated. On the CPU the peak is the running maximum of
the profiler's memory events (`profile_memory=True`), as no allocator statistics exist there.
Imports only torch and the estimator: this file runs on the GPU machine, which has nothing else.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from estimator.call.config import AttentionCall
from validation.call import flex
from validation.call.eager import eager_attention
from validation.errors import first_line, is_oom

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}

# aten ops that name the backend that really ran (profiler op names, 2.11 CUDA and 2.13 CPU).
BACKEND_OPS = (
    ("aten::_scaled_dot_product_cudnn_attention", "cudnn"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "flash"),
    ("aten::_scaled_dot_product_flash_attention", "flash"),
    ("aten::_scaled_dot_product_efficient_attention", "efficient"),
    ("aten::_scaled_dot_product_attention_math", "math"),
)


@dataclass
class Inputs:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor | None
    grad_out: torch.Tensor | None
    extra: dict = field(default_factory=dict)


def make_inputs(call: AttentionCall, device: str, seed: int = 0) -> Inputs:
    """Random (never zero) q, k, v, mask and grad_out, allocated before the baseline is taken."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = TORCH_DTYPES[call.dtype]
    grad = call.training
    B, Hq, Hk, L, S, D = call.batch, call.q_heads, call.kv_heads, call.q_len, call.kv_len, call.head_dim

    def rand(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=dtype).requires_grad_(grad)

    q, k, v = rand(B, Hq, L, D), rand(B, Hk, S, D), rand(B, Hk, S, D)
    mask, extra = None, {}
    if call.backend == "flash-attn":  # window_size / packed documents are arguments, not tensors
        pass
    elif call.backend == "flex":  # a BlockMask from the mask_mod; a new shape compiles afresh (validation/call/flex.py)
        flex.reset()
        extra["block_mask"] = flex.block_mask(call, device)
    elif call.mask.startswith(("window:", "document:")):  # SDPA and eager: the dense bool mask it implies
        from torch.nn.attention.flex_attention import create_mask

        kind, number = call.mask.split(":")
        mod = flex.mask_mod_for(kind, int(number), call.causal, L, S)
        mask = create_mask(mod, B, 1, L, S, device=device)
    elif call.mask == "bool":
        mask = torch.rand(B, 1, L, S, generator=gen, device=device) > 0.1  # True = attend
        mask[..., 0] = True  # no fully masked row: keeps softmax finite
    elif call.mask == "float":
        mask = torch.randn(B, 1, L, S, generator=gen, device=device, dtype=dtype)
    grad_out = torch.randn(B, Hq, L, D, generator=gen, device=device, dtype=dtype) if grad else None
    return Inputs(q, k, v, mask, grad_out, extra)


def sdpa_context(backend: str):
    """Force one SDPA backend (contract §1, step 4); `auto` and `eager` leave PyTorch alone."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    forced = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
              "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    return sdpa_kernel([forced[backend]]) if backend in forced else contextlib.nullcontext()


def run_call(call: AttentionCall, inp: Inputs) -> None:
    """One call per contract §1 step 4; the output is dropped before returning."""
    structured = call.mask.startswith(("window:", "document:"))  # causality is inside the mask
    kwargs = {"attn_mask": inp.mask, "dropout_p": call.dropout, "is_causal": call.causal and not structured}
    with sdpa_context(call.backend), (contextlib.nullcontext() if call.training else torch.no_grad()):
        if call.backend == "flex":
            out = flex.attention(inp.q, inp.k, inp.v, inp.extra.get("block_mask"),
                                 enable_gqa=call.kv_heads != call.q_heads, dropout=call.dropout)
        elif call.backend == "flash-attn":
            out = flex.flash_attn(call, inp.q, inp.k, inp.v)
        elif call.backend == "eager":
            out = eager_attention(inp.q, inp.k, inp.v, **kwargs)
        else:
            out = F.scaled_dot_product_attention(inp.q, inp.k, inp.v, enable_gqa=call.kv_heads != call.q_heads,
                                                 **kwargs)
        if call.training:
            out.backward(inp.grad_out)
    del out
    for t in (inp.q, inp.k, inp.v):
        t.grad = None


def cuda_peak_extra_bytes(call: AttentionCall, inp: Inputs) -> int:
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run_call(call, inp)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def cpu_peak_bytes(fn) -> int:
    """Running maximum of live CPU bytes from the profiler's [memory] events while `fn()` runs
    (the default CPU allocator does not cache, so this is the live-tensor peak)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == DeviceType.CPU]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def cpu_peak_extra_bytes(call: AttentionCall, inp: Inputs) -> int:
    return cpu_peak_bytes(lambda: run_call(call, inp))


def ran_backend_and_kernels(call: AttentionCall, inp: Inputs, device: str) -> tuple[str, int]:
    """Which backend really ran (from aten op names) and how many GPU kernels the call launched."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        run_call(call, inp)
        if device == "cuda":
            torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    ran = call.backend if call.backend in ("eager", "flex") else "unknown"  # flex: compiled Triton kernels
    if call.backend not in ("eager", "flex"):
        for op, backend in BACKEND_OPS:
            if any(n == op for n in names):
                ran = backend
                break
    n_kernels = 0
    if device == "cuda":
        n_kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                        and not e.name.startswith(("Memcpy", "Memset", "[memory]")))
    return ran, n_kernels


def torch_flops(call: AttentionCall, inp: Inputs) -> int | None:
    """What FlopCounterMode counts for the call (None where PyTorch's counter itself fails). Not tried for flex:
    under FlopCounterMode TorchDynamo fails to trace compiled flex_attention and then marks it as skipped, which
    breaks every later call of it in the process (seen on the H200, torch 2.11)."""
    if call.backend == "flex":
        return None
    from torch.utils.flop_counter import FlopCounterMode
    try:
        with FlopCounterMode(display=False) as counter:
            run_call(call, inp)
        return int(counter.get_total_flops())
    except Exception:  # noqa: BLE001 - 2.11's counter asserts on GQA for fused ops
        return None


def time_call_ms(call: AttentionCall, inp: Inputs, device: str, repeats: int) -> float:
    """Median duration of the call over `repeats` warm runs (CUDA events on a GPU, wall clock on a CPU)."""
    samples = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run_call(call, inp)
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            run_call(call, inp)
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def is_no_kernel_error(exc: BaseException) -> bool:
    return "No available kernel" in str(exc)


def measure(call: AttentionCall, device: str | None = None, *, repeats: int = 5, seed: int = 0) -> dict:
    """Measure one call by contract §1; never raises for OOM or an ineligible backend.

    Returns status (ok | oom | unsupported | error), measured_peak_extra_bytes, measured_time_ms,
    ran_backend, n_kernels, torch_flops and error (a one-line reason for anything but ok).
    """
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    result = {"status": "ok", "measured_peak_extra_bytes": None, "measured_time_ms": None,
              "ran_backend": None, "n_kernels": None, "torch_flops": None, "first_call_ms": None, "error": ""}
    inp = None
    try:
        inp = make_inputs(call, device, seed)
        t0 = time.perf_counter()
        run_call(call, inp)  # warm-up: library workspaces, cuBLAS handles, cuDNN plans, flex's compilation
        if device == "cuda":
            torch.cuda.synchronize()
        result["first_call_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
        if device == "cuda":
            peak = cuda_peak_extra_bytes(call, inp)
        else:
            peak = cpu_peak_extra_bytes(call, inp)
        result["measured_peak_extra_bytes"] = int(peak)
        result["ran_backend"], result["n_kernels"] = ran_backend_and_kernels(call, inp, device)
        result["torch_flops"] = torch_flops(call, inp)
        result["measured_time_ms"] = time_call_ms(call, inp, device, repeats)
    except (torch.cuda.OutOfMemoryError, MemoryError) as exc:
        result.update(status="oom", error=first_line(exc, 200))
    except RuntimeError as exc:
        if is_no_kernel_error(exc):
            result.update(status="unsupported", error="No available kernel")
        elif is_oom(exc):
            result.update(status="oom", error=first_line(exc, 200))
        else:
            result.update(status="error", error=first_line(exc, 200))
    finally:
        del inp
        if device == "cuda":
            torch.cuda.empty_cache()
    return result


def environment(device: str | None = None) -> dict:
    """torch version, device name and (on CUDA) driver and cuDNN versions, for the CSV provenance."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    info = {"torch_version": torch.__version__, "device_name": "cpu", "driver": "", "cudnn": ""}
    if device == "cuda":
        info["device_name"] = torch.cuda.get_device_name()
        info["cudnn"] = str(torch.backends.cudnn.version())
        with contextlib.suppress(Exception):
            import subprocess
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=10).stdout.strip()
    return info
