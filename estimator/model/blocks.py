"""Tensor accounting of the blocks that are not a Llama layer, as Hugging Face transformers 5.17 runs them:
mixture-of-experts MLPs (the default `grouped_mm` experts implementation), multi-head latent attention (MLA,
DeepSeek-V2/V3) and attention sinks through eager (gpt-oss). Pure arithmetic, bytes, per GPU.

Each function replays, in program order, the tensors the module's forward allocates and frees (read from
transformers/integrations/moe.py `grouped_mm_experts_forward` and the models' modeling_*.py) and returns the
running peak, or sums what autograd saves. Notation: T tokens on the GPU (b·n), H hidden, F one expert's
intermediate (/ tp), k top-k, E experts, S = T·k routed rows.

Dtypes that matter (and are easy to miss):
- the routing weights are fp32 in Mixtral (softmax of `router_logits.float()`, never cast back) and DeepSeek
  (router GEMM in fp32), the model dtype in Qwen-MoE (`.to(router_logits.dtype)`) and gpt-oss; the weighted
  expert output `proj_out * sample_weights` takes the wider of the two;
- `torch.nn.functional.grouped_mm` is not autocast-enabled: HF casts its input to the *weight* dtype, so under
  bf16-mixed (fp32 weights) every expert tensor is fp32, and the expert weights get no 16-bit copies.
"""

from __future__ import annotations

from dataclasses import dataclass

ROUTERS = ("mixtral", "qwen", "deepseek", "gpt_oss")


class Replay:
    """Running live bytes and their peak over a sequence of allocations and frees."""

    def __init__(self) -> None:
        self.live: dict[str, int] = {}
        self.peak = 0

    def add(self, name: str, nbytes: int) -> None:
        self.live[name] = self.live.get(name, 0) + nbytes
        self.peak = max(self.peak, sum(self.live.values()))

    def free(self, *names: str) -> None:
        for name in names:
            self.live.pop(name, None)

    @property
    def now(self) -> int:
        return sum(self.live.values())


@dataclass(frozen=True)
class MoeShape:
    T: int  # tokens on this GPU
    H: int  # hidden
    F: int  # one routed expert's intermediate width on this GPU
    k: int  # experts per token
    E: int  # routed experts (resident on this GPU)
    router: str  # mixtral | qwen | deepseek | gpt_oss (router_style of the spec)
    bias: bool = False  # gpt-oss expert biases
    shared_F: int = 0  # shared expert intermediate on this GPU (DeepSeek, Qwen2-MoE)
    shared_gate: bool = False  # Qwen2-MoE shared_expert_gate


def _route_bytes(s: MoeShape, es: int) -> int:
    """Element bytes of the top-k routing weights the experts multiply by."""
    return 4 if s.router in ("mixtral", "deepseek") else es


def moe_forward_peak(s: MoeShape, act: int, weight: int, es: int) -> int:
    """Peak bytes a MoE block allocates above its input (the normed hidden states, owned by the caller) during one
    forward without autograd. `act`: element bytes of the block input (the residual stream), `weight`: of the expert
    weights (grouped_mm runs in that dtype), `es`: of the 16-bit compute (router GEMM output under autocast)."""
    r = _route_bytes(s, es)
    S, H, F, T = s.T * s.k, s.H, s.F, s.T
    p = Replay()
    if s.router == "qwen" and s.shared_F:  # Qwen2-MoE runs the shared expert first and keeps its output
        _dense_mlp(p, T, H, s.shared_F, es, keep="shared_out")
    # --- router: logits, probabilities, top-k (values + int64 indices) ---
    if s.router == "deepseek":
        if act != 4:
            p.add("x32", T * H * 4)
        p.add("logits", T * s.E * 4)
        p.free("x32")
        p.add("probs", T * s.E * 4)
    else:
        p.add("logits", T * s.E * es)
        if s.router != "gpt_oss":
            if s.router == "mixtral":
                p.add("logits32", T * s.E * 4)
            p.add("probs", T * s.E * 4)
            p.free("logits32")
    p.add("topk", T * s.k * (4 if s.router != "gpt_oss" else es) + T * s.k * 8)
    p.add("weights", T * s.k * r)  # normalised / scaled / cast top-k weights (a new tensor in every family)
    p.free("probs", "logits")
    # --- experts, grouped_mm_experts_forward ---
    p.add("sort", S * 8 * 2)  # expert_ids_g, perm
    p.add("div", S * 8)
    p.add("sel", S * H * act)  # hidden_states[perm // top_k]
    p.free("div")
    p.add("small", S * r + S * 4 + S)  # sample_weights_g, histc input (int32), sentinel mask
    if s.bias:
        p.add("bias_up", S * 2 * F * weight)
    if act != weight:
        p.add("sel_cast", S * H * weight)
    p.add("up", S * 2 * F * weight)
    p.free("sel_cast")
    p.add("up_masked", S * 2 * F * weight)
    p.free("up")
    if s.router == "gpt_oss":  # clamp(gate), clamp(up), sigmoid(gate·alpha), glu, up + 1, (up + 1)·glu
        for name in ("g", "u", "ga"):
            p.add(name, S * F * weight)
        p.add("sig", S * F * weight)
        p.free("ga")
        p.add("glu", S * F * weight)
        p.free("sig")
        p.add("u1", S * F * weight)
        p.add("gated", S * F * weight)
        p.free("u1", "g", "u", "glu")
    else:  # act(gate) · up
        p.add("a", S * F * weight)
        p.add("gated", S * F * weight)
        p.free("a")
    p.free("up_masked")
    if s.bias:
        p.add("bias_down", S * H * weight)
        p.free("bias_up")
    p.add("down", S * H * weight)
    p.free("gated")
    p.add("down_masked", S * H * weight)
    p.free("down")
    wr = max(weight, r)
    p.add("weighted", S * H * wr)
    p.add("inv_perm", S * 8)
    p.add("arange", S * 8)
    p.free("arange")
    p.add("weighted_perm", S * H * wr)
    p.free("weighted")
    p.add("sum", T * H * wr)
    p.free("sort", "sel", "small", "bias_down", "down_masked", "inv_perm", "weighted_perm", "weights", "topk")
    if wr != act:
        p.add("out", T * H * act)
        p.free("sum")
    if s.router == "deepseek" and s.shared_F:  # hidden + shared_experts(residuals)
        _dense_mlp(p, T, H, s.shared_F, es, keep="shared_out")
        p.add("moe_out", T * H * act)
    elif s.shared_F:  # Qwen2-MoE: sigmoid(gate(x)) · shared, then the sum
        p.add("gate", T * es * 2)
        p.add("gated_shared", T * H * es)
        p.free("shared_out")
        p.add("moe_out", T * H * act)
    return p.peak


def _dense_mlp(p: Replay, T: int, H: int, F: int, es: int, keep: str) -> None:
    """down(act(gate(x)) · up(x)): gate, act, up, product, down; leaves `keep` (T·H) alive."""
    p.add("m_gate", T * F * es)
    p.add("m_act", T * F * es)
    p.free("m_gate")
    p.add("m_up", T * F * es)
    p.add("m_prod", T * F * es)
    p.free("m_act", "m_up")
    p.add(keep, T * H * es)
    p.free("m_prod")


def moe_saved_bytes(s: MoeShape, act: int, weight: int, es: int, autocast: bool) -> int:
    """Bytes autograd saves for backward in one MoE block (grouped_mm path), the block input aside.
    Router: its GEMM's input (a 16-bit cast of its own under autocast), the softmax output, the int64 top-k
    indices. Experts: the gathered rows (grouped_mm input), the up projection (saved by the activation through its
    views), act(gate) and the product (mul, down grouped_mm), the masked down output (mul with the routing
    weights), plus index tensors and masks. Shared experts: as a dense MLP."""
    r = _route_bytes(s, es)
    S, H, F, T = s.T * s.k, s.H, s.F, s.T
    lin_in = T * H * (es if autocast else act)  # the router GEMM's saved input
    router = lin_in + (T * s.E * 4 if s.router != "gpt_oss" else T * s.k * es) + T * s.k * 8
    gate = 2 * F if s.router != "gpt_oss" else 5 * F  # act + product, or gpt-oss' clamped gate, sigmoid, glu, up+1, out
    experts = S * (H * act if act == weight else H * weight) + S * weight * (2 * F + gate) + S * H * weight
    experts += S * (8 + 8 + 1 + 8 + r)  # gather index, perm, sentinel mask, inv_perm, routing weights
    shared = 0
    if s.shared_F:
        shared = 2 * T * H * es + 4 * T * s.shared_F * es if autocast else T * H * act + 4 * T * s.shared_F * es
        if s.shared_gate:
            shared += T * H * es + T * H * es + T * 2 * es  # gate's input cast, the shared output, sigmoid
    return router + experts + shared


def moe_backward_transient(s: MoeShape, weight: int) -> int:
    """Peak of one MoE block's backward above its saved tensors and the incoming gradient: at the up-projection's
    grouped_mm backward, the gradient of the up output (S·2F) and of its masked copy, and the gradient of the
    gathered rows (S·H), in the expert dtype (weight gradients are counted as gradients)."""
    S = s.T * s.k
    return S * 2 * s.F * weight * 2 + S * s.H * weight * 2


# --- MLA (DeepSeek-V2/V3 in transformers 5.17) ---------------------------------------------------------------

def mla_attention_live(T: int, heads: int, nope: int, rope: int, v: int, latent: int, es: int) -> int:
    """Bytes DeepseekV2Attention (transformers 5.17) holds when it calls the attention kernel, prefill without
    autograd, its input and the cache aside: the q projection (T·h·(nope+rope); q_nope is a view of it), the rotated
    q_pe (T·h·rope), the concatenated query_states (T·h·(nope+rope)), kv_a's output c_kv + k_pe (T·(latent+rope),
    alive through the kv_nope view), kv_b's decompression (T·h·(nope+v); the values are a view of it) and the new
    per-head key_states (T·h·(nope+rope)). The cache has copied the normed latent and the rotated k_pe
    (DynamicLayer.update concatenates), so those are the KV cache, not here. (With q_lora_rank the q latent is
    freed before the call.)"""
    d = nope + rope
    return T * es * (heads * d + heads * rope + heads * d + (latent + rope) + heads * (nope + v) + heads * d)


# --- attention sinks through eager (gpt-oss) ------------------------------------------------------------------

def sinks_eager_peak(b: int, heads: int, q: int, kv: int, es: int) -> int:
    """Peak bytes of gpt-oss' eager attention core (transformers 5.17 `eager_attention_forward` of gpt_oss), without
    autograd: the scores (q·kᵀ·scaling + mask, one (b,h,q,kv) tensor in the model dtype), the sink column
    concatenated (b,h,q,kv+1), the max subtracted (a new tensor), and the softmax in the model dtype (not fp32); the
    scores with the mask added are alive until the sink column is dropped. Three score-sized tensors at the peak
    (two with the extra column), plus the row max (values and int64 indices)."""
    scores = b * heads * q * kv * es
    combined = b * heads * q * (kv + 1) * es
    rows = b * heads * q * (es + 8)
    return scores + 2 * combined + rows


def sinks_eager_saved(b: int, heads: int, q: int, kv: int, d: int, es: int, autocast: bool) -> int:
    """What gpt-oss' eager attention saves for backward per layer. Under autocast the float mask (built in the fp32
    residual dtype) promotes the scores to fp32, so the softmax output autograd keeps is fp32 (b,h,q,kv+1) and the
    probabilities cast back for the value matmul are a second, 16-bit copy (b,h,q,kv); in a 16-bit model the
    softmax output (model dtype) is saved once, its sliced view feeding the matmul. Plus the row max' int64 indices
    and the matmuls' q, repeated k and repeated v (16-bit)."""
    p1 = b * heads * q * (kv + 1)
    probs = p1 * (4 if autocast else es) + (b * heads * q * kv * es if autocast else 0)
    return probs + b * heads * q * 8 + 3 * b * heads * max(q, kv) * d * es


def sinks_eager_backward(b: int, heads: int, q: int, kv: int, es: int, autocast: bool) -> int:
    """gpt-oss eager attention backward, above what it saved: at the softmax backward the gradient of the
    probabilities (the sliced gradient scattered into a (b,h,q,kv+1) zero tensor) and the softmax's input gradient,
    both in the softmax dtype (fp32 under autocast: one 16 GiB tensor each at 64 heads × 8192²)."""
    return 2 * b * heads * q * (kv + 1) * (4 if autocast else es)
