"""One pass over a layer's kernels, priced from the measured kernel classes (estimator/model/kernel_prices.py):
`Pass` accumulates GPU ms by kernel class, host ms and launches; `layer_forward` builds one decoder or encoder
layer's forward as HF eager runs it (norms, projections, RoPE, the attention core, the MLP or the MoE block op by
op), `backward_of` its backward. estimator/model/step_time.py assembles prefill, decode and the training step from
these passes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from estimator.call.config import DTYPE_BITS
from estimator.model.kernel_prices import Kernels
from estimator.units import cdiv

if TYPE_CHECKING:
    from estimator.model.inputs import PlanInputs

# Backward of a memory-bound op relative to its forward: read the saved input(s) and the incoming gradient, write
# the outgoing gradient (RMSNorm backward re-reads its fp32 input too). An assumption, checked by the step rows.
BACKWARD_MEMORY_FACTOR = 2.0


class Pass:
    """Accumulates one pass's kernels: GPU ms by class, host ms, kernel count."""

    def __init__(self) -> None:
        self.gpu: dict[str, float] = {}
        self.cpu = 0.0
        self.python = 0.0  # host time the device waits for (HF's eager Python between the layers' kernels)
        self.kernels = 0

    def add(self, cls: str, gpu_ms: float, cpu_ms: float, kernels: int = 1, times: float = 1.0) -> None:
        if cls == "python":  # host time the device waits for: not overlapped
            self.python += cpu_ms * times
            return
        if cls == "host":  # host time that overlaps queued device work
            self.cpu += cpu_ms * times
            return
        self.gpu[cls] = self.gpu.get(cls, 0.0) + gpu_ms * times
        self.cpu += cpu_ms * times
        self.kernels += round(kernels * times)

    def merge(self, other: Pass, times: float = 1.0) -> None:
        for k, v in other.gpu.items():
            self.gpu[k] = self.gpu.get(k, 0.0) + v * times
        self.cpu += other.cpu * times
        self.python += other.python * times
        self.kernels += round(other.kernels * times)

    def total(self, sync_ms: float) -> float:
        return max(sum(self.gpu.values()), self.cpu) + self.python + sync_ms

    def split(self, sync_ms: float) -> dict[str, float]:
        """GPU ms per class, plus the host time the GPU waited for (launch and Python overhead) and the sync."""
        out = {k: round(v, 4) for k, v in sorted(self.gpu.items())}
        out["launch_overhead"] = round(max(0.0, self.cpu - sum(self.gpu.values())) + sync_ms, 4)
        out["python_overhead"] = round(self.python, 4)
        return out



# ---------------------------------------------------------------------------------------------- the layer's ops

def element_bytes(dtype: str) -> int:
    return DTYPE_BITS[dtype] // 8


def gemm(p: Pass, kern: Kernels, m, n, k, dtype, *, cast_weight: bool = False, count: int = 1) -> None:
    """A linear layer forward: the GEMM (+ autocast's cast of its fp32 weight)."""
    p.add("gemm", kern.gemm_ms(m, n, k, dtype), kern.k.matmul_floor_ms, 1, count)
    if cast_weight:
        g, kn = kern.mem_ms("cast_bf16_fp32", n * k)
        p.add("memory_bound", g, kern.k.launch_floor_ms * kn, kn, count)


def mem(p: Pass, kern: Kernels, op: str, elements: float, dtype: str = "bfloat16", count: float = 1.0) -> None:
    g, kn = kern.mem_ms(op, elements, dtype)
    p.add("memory_bound", g, kern.k.launch_floor_ms * kn, kn, count)


def linear_shapes(inputs: PlanInputs) -> tuple[list, list, list]:
    """Per-layer (N, K, count) of the attention projections, the dense MLP and one MoE layer's dense parts."""
    m, tp = inputs.model, inputs.tp
    H, d = m.hidden, m.head_dim
    hq, hk = inputs.q_heads_per_gpu, inputs.kv_heads_per_gpu
    dv = m.v_head_dim or d
    if m.kv_lora_rank:  # MLA: its down/up projections as one equivalent GEMM of the same weights (5 launches)
        attn = [(max(1, cdiv(m._attention_matmul_params(), tp) // H), H, 1)]
        attn += [(1, 1, 4)]  # the other four launches (their FLOPs are in the equivalent GEMM)
    elif m.fused_qkv:
        attn = [((hq + 2 * hk) * d, H, 1), (H, hq * dv, 1)]
    else:
        attn = [(hq * d, H, 1), (hk * d, H, 1), (hk * dv, H, 1), (H, hq * dv, 1)]
    F = cdiv(m.ffn, tp)
    if m.gated_ffn:
        mlp = [(2 * F, H, 1), (H, F, 1)] if m.fused_gate_up else [(F, H, 2), (H, F, 1)]
    else:
        mlp = [(F, H, 1), (H, F, 1)]
    shared = []
    if m.shared_experts_ffn:
        Fs = cdiv(m.shared_experts_ffn, tp)
        shared = [(Fs, H, 2), (H, Fs, 1)]
    return attn, mlp, shared


def layer_forward(inputs: PlanInputs, kern: Kernels, T: int, dtype: str, autocast: bool, moe: bool,
                  core_ms: float, attention_backend: str, core_kernels: int = 3) -> Pass:
    """One decoder (or encoder) layer's forward over T tokens of one GPU, HF eager."""
    m = inputs.model
    p = Pass()
    H, d = m.hidden, m.head_dim
    hq, hk = inputs.q_heads_per_gpu, inputs.kv_heads_per_gpu
    rdt = "float32" if autocast else dtype  # residual stream dtype
    norm_op = "rmsnorm" if m.norm == "rmsnorm" else "layernorm"
    attn, mlp, shared = linear_shapes(inputs)
    # attention block: norm, projections, (q/k norms), RoPE, core, o_proj, residual add
    norm(p, kern, norm_op, T * H, rdt)
    for n_, k_, c in attn:
        if n_ > 1:
            gemm(p, kern, T, n_, k_, dtype, cast_weight=autocast, count=c)
        else:
            p.add("gemm", 0.0, kern.k.matmul_floor_ms, 1, c)
    if m.qk_norm:
        norm(p, kern, "rmsnorm", T * (hq + hk) * d, dtype)
    if m.kind == "decoder":
        mem(p, kern, "rope", T * hq * d, dtype)
        mem(p, kern, "rope", T * hk * d, dtype)
    p.add("attention", core_ms, kern.k.launch_floor_ms * core_kernels, core_kernels)
    if attention_backend == "eager" and hk < hq:  # repeat_kv: k and v expanded to every query head
        mem(p, kern, "copy", 2 * T * hq * d, dtype)
    mem(p, kern, "add", T * H, rdt)
    if m.norms_per_layer >= 4:
        norm(p, kern, norm_op, T * H, rdt)
    # MLP block
    norm(p, kern, norm_op, T * H, rdt)
    if norm_op == "layernorm" and m.kind != "decoder":
        pass
    if moe:
        moe_block(p, kern, inputs, T, dtype, autocast, shared)
    else:
        for n_, k_, c in mlp:
            gemm(p, kern, T, n_, k_, dtype, cast_weight=autocast, count=c)
        F = cdiv(m.ffn, inputs.tp)
        mem(p, kern, "silu_mul" if m.gated_ffn else "copy", T * F, dtype)
    if m.norms_per_layer >= 4:
        norm(p, kern, norm_op, T * H, rdt)
    mem(p, kern, "add", T * H, rdt)
    return p


def norm(p: Pass, kern: Kernels, op: str, elements: float, dtype: str) -> None:
    if op == "rmsnorm":
        mem(p, kern, "rmsnorm", elements, dtype)
    else:  # LayerNorm: one fused kernel, read + write (+ the fp32 statistics)
        mem(p, kern, "copy", elements, dtype)


def moe_block(p: Pass, kern: Kernels, inputs: PlanInputs, T: int, dtype: str, autocast: bool, shared: list) -> None:
    """transformers 5.17 grouped_mm experts (integrations/moe.py `grouped_mm_experts_forward`), op by op: router
    GEMM + softmax/top-k; sort of the expert ids, gather of the routed rows (rows = T·k), the pre-mask
    (masked_fill_ over rows×H); gate_up as one grouped GEMM over the local experts (per-expert M = rows/E), its
    masked_fill (out of place, rows×2F); act(gate)·up on the chunked (strided) halves; down (grouped), its
    masked_fill; × routing weight per row; the inverse-permutation gather; the sum over the k rows of a token.
    The masked_fills, the row-broadcast multiply and the strided act·mul run PyTorch's non-vectorised elementwise
    kernel: priced at their own measured rates (calibration ops masked_fill_rows, mul_rows, silu_mul_chunked,
    gather_rows). gpt-oss: per-row expert biases gathered and added after each grouped GEMM, and its clamped
    SwiGLU (two clamps, α·x, sigmoid, two muls, +1 on the strided halves: ~1.6x the bytes of act·mul)."""
    m = inputs.model
    H, E, k = m.hidden, m.experts, m.experts_per_token
    Fe = cdiv(m.moe_ffn, inputs.tp)
    local_e = cdiv(E, inputs.ep)
    rows = T * k
    gemm(p, kern, T, E, H, dtype, cast_weight=autocast)
    mem(p, kern, "softmax", T * E, "float32", 3)  # softmax, top-k, normalise
    p.add("memory_bound", 0.0, kern.k.launch_floor_ms * 6, 6)  # sort, histc, cumsum, weights gather, clamp
    mem(p, kern, "gather_rows", rows * H, dtype)  # hidden_states[perm // k]
    mem(p, kern, "masked_fill_rows", rows * H, dtype)  # the pre-mask, in place
    # the kernel visits only experts with rows (offsets): a decode step's few rows touch at most `rows` experts
    active = max(1, min(local_e, rows))
    per_expert = max(1, rows // active)
    # torch's grouped_mm is not on autocast's lists: under autocast the experts run in their fp32 weights' dtype
    edt = "float32" if autocast else dtype
    for n_, k_ in ((2 * Fe, H), (H, Fe)):
        p.add("gemm", kern.grouped_gemm_ms(active, per_expert, n_, k_, edt), kern.k.matmul_floor_ms, 1)
        mem(p, kern, "masked_fill_rows", rows * n_, edt)
        if m.expert_bias:  # bias[expert_ids_g] (a gathered rows×n tensor), then out.add_(bias)
            mem(p, kern, "copy", rows * n_ / 2, edt)
            mem(p, kern, "add", rows * n_, edt)
        if n_ == 2 * Fe:
            mem(p, kern, "silu_mul_chunked", rows * Fe, edt, 1.6 if m.expert_bias else 1.0)
    mem(p, kern, "mul_rows", rows * H, edt)  # × routing weight
    mem(p, kern, "gather_rows", rows * H, edt)  # weighted_out[inv_perm]
    mem(p, kern, "copy", (rows + T) * H / 2, edt)  # .view(T, k, H).sum(1): read rows×H, write T×H
    for n_, k_, c in shared:
        gemm(p, kern, T, n_, k_, dtype, cast_weight=autocast, count=c)
    if shared:
        mem(p, kern, "silu_mul", T * cdiv(m.shared_experts_ffn, inputs.tp), dtype)


def sinks_eager(p: Pass, kern: Kernels, call, dtype: str) -> None:
    """gpt-oss's eager attention beyond the plain eager call (transformers 5.17 models/gpt_oss
    `eager_attention_forward`): torch.cat of the sink column onto the (b, h, q, kv) scores (a copy), the row max
    (a read), and the subtraction of that max broadcast over each row (PyTorch's non-vectorised elementwise kernel,
    priced at the measured masked_fill_rows rate, the same kernel class). The backward of these is counted with
    the layer's other memory-bound ops."""
    n = call.batch * call.q_heads * call.q_len * (call.kv_len + 1)
    mem(p, kern, "copy", n, dtype)  # cat
    mem(p, kern, "copy", n / 2, dtype)  # max: one read
    mem(p, kern, "masked_fill_rows", n, dtype)  # - max, broadcast


def backward_of(fwd: Pass, kern: Kernels, gemm_bwd_ms: float, core_bwd_ms: float) -> Pass:
    """A layer's backward from its forward: two GEMMs per forward GEMM (priced by the caller), memory-bound ops ×
    BACKWARD_MEMORY_FACTOR, the attention core's backward."""
    b = Pass()
    b.add("gemm", gemm_bwd_ms, 0.0, 0)
    b.add("memory_bound", fwd.gpu.get("memory_bound", 0.0) * BACKWARD_MEMORY_FACTOR, 0.0, 0)
    b.add("attention", core_bwd_ms, 0.0, 0)
    b.cpu = fwd.cpu * 2  # every forward launch has about two backward launches (autograd: C++, no Python)
    b.python = 0.0
    b.kernels = fwd.kernels * 2
    return b


def gemm_backward_ms(inputs: PlanInputs, kern: Kernels, T: int, dtype: str, moe: bool,
                      autocast: bool = False) -> float:
    attn, mlp, shared = linear_shapes(inputs)
    shapes = [s for s in attn if s[0] > 1]
    if moe:
        m = inputs.model
        Fe = cdiv(m.moe_ffn, inputs.tp)
        active = max(1, min(cdiv(m.experts, inputs.ep), T * m.experts_per_token))  # see _moe
        per_expert = max(1, T * m.experts_per_token // active)
        edt = "float32" if autocast else dtype  # see _moe
        total = sum(kern.grouped_gemm_ms(active, per_expert, n_, k_, edt, "backward")
                    for n_, k_ in ((2 * Fe, m.hidden), (m.hidden, Fe)))
        shapes += shared + [(m.experts, m.hidden, 1)]
    else:
        total = 0.0
        shapes += mlp
    for n_, k_, c in shapes:
        total += c * (kern.gemm_ms(T, n_, k_, dtype, "grad_input") + kern.gemm_ms(T, n_, k_, dtype, "grad_weight"))
    return total
