"""One training step of a state-space / hybrid decoder (`estimator.model.hybrid.HybridSpec`) through transformers
5.17's torch fallback: the forward's saved tensors and the backward's gradients replayed by
estimator/model/autograd_replay.py, layer by layer (the Mamba2 mixer: estimator/model/ssm_train.py; RMSNorm,
residual adds, attention and the gated MLP as their modeling_*.py write them), the loss over every position
(ForCausalLMLoss: the logits' fp32 copy, log_softmax saved), the parameter gradients as each node's backward
makes them, and the optimizer state as the rest of the planner prices it (estimator/model/recipes.py).

The recipe priced is the one the H200 runs measure (validation/model/hf_runs.py): bf16-true (the model in
bfloat16, its AdamW/SGD state in the parameters' dtype), no activation checkpointing, the loss kept and the model
output dropped before backward. The step's peak is the largest of the forward + backward replay (above the
weights and the optimizer state, which exist from the first step on) and the optimizer step (every gradient plus
its temporaries).
"""

from __future__ import annotations

from dataclasses import replace

from estimator.call.attention import estimate_call
from estimator.call.config import AttentionCall
from estimator.model.autograd_replay import MUL, NEW, VIEW, Graph
from estimator.model.hybrid import HybridSpec
from estimator.model.ssm_mamba2 import F32
from estimator.model.ssm_train import _rms_core, mixer_train


def _norm(g: Graph, x: str, out: str, rows: int, H: int, in_bytes: int, es: int, pname: str) -> None:
    """RMSNorm (Llama's, Mamba2RMSNorm): x.to(float32), x · rsqrt(mean(x²) + eps), .to(input dtype), weight · x.
    The input dtype is `in_bytes` (fp32 residual: no casts, the product stays fp32)."""
    if in_bytes != F32:
        g.op("n32", rows * H * F32, (x,), kind=NEW, grad_bytes={x: rows * H * in_bytes})
        src = "n32"
    else:
        src = x
    _rms_core(g, src, "nh", rows, H)
    g.drop("n32")
    if in_bytes != F32:
        g.op("nh16", rows * H * in_bytes, ("nh",), kind=NEW, grad_bytes={"nh": rows * H * F32})
        g.drop("nh")
        g.rename("nh16", "nh")
    g.op(out, rows * H * in_bytes, ("nh",), kind=NEW, saves=("nh",), params=((pname, H * es),))
    g.drop("nh")


def _linear(g: Graph, out: str, x: str, rows: int, fan_in: int, fan_out: int, es: int, pname: str) -> None:
    g.op(out, rows * fan_out * es, (x,), kind=NEW, saves=(x,), params=((pname, fan_in * fan_out * es),),
         gemm=(rows, fan_out, fan_in))


def _mlp(g: Graph, spec: HybridSpec, x: str, T: int, es: int, i: int) -> str:
    """down(act(gate(x)) · up(x)) (Falcon-H1: up(x) · act(gate(x) · gate_multiplier), · down_multiplier)."""
    H, Fw = spec.hidden, spec.ffn
    F = T * Fw * es
    _linear(g, "gate", x, T, H, Fw, es, f"l{i}.gate")
    if spec.multipliers:
        g.op("gm", F, ("gate",), kind=NEW)
        g.drop("gate")
        g.rename("gm", "gate")
    g.op("act", F, ("gate",), kind=NEW, saves=("gate",))
    g.drop("gate")
    _linear(g, "up", x, T, H, Fw, es, f"l{i}.up")
    g.op("prod", F, ("act", "up"), kind=MUL, saves=("act", "up"))
    g.drop("act", "up")
    _linear(g, "down", "prod", T, Fw, H, es, f"l{i}.down")
    g.drop("prod")
    if spec.multipliers:
        g.op("down2", T * H * es, ("down",), kind=NEW)
        g.drop("down")
        g.rename("down2", "down")
    return "down"


def _attention(g: Graph, spec: HybridSpec, x: str, b: int, L: int, es: int, gpu, i: int) -> str:
    """q, k, v projections (Falcon-H1: k · key_multiplier), RoPE (q·cos + rotate_half(q)·sin), SDPA in training
    (the attention estimator's forward_backward call: what it keeps and its backward's peak), o_proj."""
    T, hq, hk, d, H = b * L, spec.q_heads, spec.kv_heads, spec.head_dim, spec.hidden
    _linear(g, "q", x, T, H, hq * d, es, f"l{i}.q")
    _linear(g, "k", x, T, H, hk * d, es, f"l{i}.k")
    if spec.multipliers:
        g.op("k2", T * hk * d * es, ("k",), kind=NEW)
        g.drop("k")
        g.rename("k2", "k")
    _linear(g, "v", x, T, H, hk * d, es, f"l{i}.v")
    for name, heads in (("q", hq), ("k", hk)):
        full = T * heads * d * es
        g.op(name + "cos", full, (name,), kind=MUL)
        g.op(name + "neg", full // 2, (name,), kind=NEW)
        g.op(name + "rot", full, (name + "neg", name), kind=VIEW)
        g.drop(name + "neg")
        g.op(name + "sin", full, (name + "rot",), kind=MUL)
        g.drop(name + "rot")
        g.op(name + "e", full, (name + "cos", name + "sin"), kind=VIEW)
        g.drop(name + "cos", name + "sin", name)
    call = AttentionCall(batch=b, q_heads=hq, kv_heads=hk, head_dim=d, q_len=L, kv_len=L,
                         dtype="bfloat16" if es == 2 else "float32", causal=True, mode="forward_backward",
                         backend="auto")
    est = estimate_call(call, gpu)
    fwd = estimate_call(replace(call, mode="forward"), gpu)
    fwd_ms = float(fwd.time_ms or 0.0)
    bwd_ms = max(0.0, float(est.time_ms or 0.0) - fwd_ms)
    if not est.supported:
        raise ValueError(f"seq_len: SDPA cannot run the attention call ({'; '.join(est.reasons.get('auto', ()))})")
    out_bytes = T * hq * d * es
    qkv_grads = T * (hq + 2 * hk) * d * es
    kept = max(0, int(est.forward_retained_bytes or 0) - out_bytes)  # the logsumexp and the like
    g.tensor("attn_kept", kept)
    g.op("attn", out_bytes, ("qe", "ke", "v"), kind=NEW, saves=("qe", "ke", "v", "attn_kept"),
         transient=max(0, int(est.peak_extra_bytes or 0) - int(est.forward_retained_bytes or 0) - qkv_grads),
         fixed_ms=(fwd_ms, bwd_ms))
    g.drop("attn_kept", "qe", "ke", "v")
    g.op("attn_c", out_bytes, ("attn",), kind=NEW)  # transpose(1, 2).reshape(...).contiguous()
    g.drop("attn")
    _linear(g, "attn_out", "attn_c", T, hq * d, H, es, f"l{i}.o")
    g.drop("attn_c")
    return "attn_out"


def train_graph(spec: HybridSpec, b: int, L: int, es: int, gpu, *, backward: bool = True) -> Graph:
    """The forward (loss kept, output dropped) and backward of one step; returns the replayed graph. Without
    `backward`, the forward of a prefill (its kernels price the prefill's time: the same ops, the logits of the
    last position only; its memory is ssm_mamba2.prefill_replay's, not this graph's)."""
    g = Graph()
    T, H, V = b * L, spec.hidden, spec.vocab
    g.tensor("ids", T * 8)  # input_ids, labels = ids
    g.op("embeds", T * H * es, (), kind=NEW, params=(("embed", V * H * es),))
    if spec.multipliers:  # embed_tokens(ids) * embedding_multiplier
        g.op("emb2", T * H * es, ("embeds",), kind=NEW)
        g.rename("emb2", "embeds")
    if spec.attention_layers:  # rotary cos and sin (b, L, head_dim) in dtype, position ids
        g.tensor("rope", 2 * T * spec.head_dim * es + L * 8)
    x, xb = "embeds", es
    g.rename("embeds", "x")
    x = "x"
    for i, kind in enumerate(spec.layer_kinds):
        if spec.model_type == "mamba2":
            src = x
            if xb != es:  # hidden_states.to(norm.weight.dtype)
                g.op("xcast", T * H * es, (x,), kind=NEW, grad_bytes={x: T * H * xb})
                src = "xcast"
            _norm(g, src, "normed", T, H, es, es, f"l{i}.norm")
            g.drop("xcast")
            res = x
            if spec.residual_fp32 and xb != F32:
                g.op("res32", T * H * F32, (x,), kind=NEW, grad_bytes={x: T * H * xb})
                res = "res32"
            mo = mixer_train(g, spec.mixer, b, L, es, "normed", i)
            g.drop("normed")
            rb = F32 if spec.residual_fp32 else es
            g.op("x_new", T * H * rb, (res, mo), kind=VIEW, kinds={mo: NEW} if rb != es else None,
                 grad_bytes={mo: T * H * es})
            g.drop(mo, "res32")
            g.drop(x)
            g.rename("x_new", "x")
            xb = rb
            continue
        _norm(g, x, "normed", T, H, es, es, f"l{i}.in_norm")
        parts = []
        if kind in ("mamba", "parallel"):
            parts.append(mixer_train(g, spec.mixer, b, L, es, "normed", i))
        if kind in ("attention", "parallel"):
            src = "normed"
            if spec.multipliers:  # hidden_states * attention_in_multiplier
                g.op("attn_in", T * H * es, ("normed",), kind=NEW)
                src = "attn_in"
            a = _attention(g, spec, src, b, L, es, gpu, i)
            g.drop("attn_in")
            if spec.multipliers:
                g.op("attn_scaled", T * H * es, (a,), kind=NEW)
                g.drop(a)
                a = "attn_scaled"
            parts.append(a)
        g.drop("normed")
        if len(parts) == 2:
            g.op("mixed", T * H * es, tuple(parts), kind=VIEW)
            g.drop(*parts)
            parts = ["mixed"]
        g.op("x_mid", T * H * es, (x, parts[0]), kind=VIEW)
        g.drop(parts[0], x)
        _norm(g, "x_mid", "normed", T, H, es, es, f"l{i}.ff_norm")
        down = _mlp(g, spec, "normed", T, es, i)
        g.drop("normed")
        g.op("x", T * H * es, ("x_mid", down), kind=VIEW)
        g.drop("x_mid", down)
    _norm(g, "x", "final", T, H, xb, es, "norm_f")
    g.drop("x", "rope")
    src = "final"
    if xb != es:  # hidden_states.to(lm_head.weight.dtype)
        g.op("fcast", T * H * es, ("final",), kind=NEW, grad_bytes={"final": T * H * xb})
        g.drop("final")
        src = "fcast"
    heads = 0 if spec.tied_embeddings else V * H * es
    if not backward:  # logits_to_keep=1: the last position's logits, then .float()
        g.op("logits", b * V * es, (src,), kind=NEW, gemm=(b, V, H))
        g.op("logits32", b * V * F32, ("logits",), kind=NEW)
        return g
    g.op("logits", T * V * es, (src,), kind=NEW, saves=(src,), params=(("lm_head", heads),) if heads else (),
         gemm=(T, V, H))
    g.drop(src)
    g.op("logits32", T * V * F32, ("logits",), kind=NEW, grad_bytes={"logits": T * V * es})  # .float()
    g.tensor("labels", b * (L + 1) * 8 + T * 8)  # pad(labels, (0, 1)), [..., 1:].contiguous()
    g.op("logp", T * V * F32, ("logits32",), kind=NEW)  # log_softmax saves its result
    g.save_result("logp")
    g.op("loss", 4, ("logp",), kind=NEW, saves=("labels",))  # nll_loss
    g.drop("logp", "labels", "logits", "logits32")  # the loop keeps the loss only (the output is dropped)
    g.backward("loss")
    return g


OPTIMIZERS = ("adamw", "adamw-fused", "sgd")


def train_step_bytes(spec: HybridSpec, *, seq_len: int, batch: int, es: int, gpu, optimizer: str = "adamw") -> dict:
    """The step's components (bytes): weights, optimizer state, the forward + backward replay's peak above them
    (saved tensors, gradient buffers and parameter gradients as they appear; the ids included), the optimizer
    step's (every gradient + its temporaries), and the replayed graph."""
    from estimator.model.recipes import optimizer_state_bytes, optimizer_step_transient_bytes

    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer: unknown value {optimizer!r} for a hybrid model; expected one of "
                         f"{', '.join(OPTIMIZERS)}")
    params = spec.params
    g = train_graph(spec, batch, seq_len, es, gpu)
    grads = params * es
    step = grads + optimizer_step_transient_bytes(optimizer, params, es) + batch * seq_len * 8
    return {"optimizer_bytes": optimizer_state_bytes(optimizer, params, es), "graph_peak_bytes": g.trace.peak,
            "optimizer_step_bytes": step, "gradient_bytes": grads, "graph": g}


