"""Measure whole-model memory against the plan: a torch-only replica of Hugging Face's Llama (RMSNorm with the
fp32 upcast, RoPE, SDPA with GQA, SwiGLU, the same tensor lifetimes) so that it runs where transformers is not
installed (the GPU machine has torch and pandas only).

    python -m bench.bench_plan_model --gpu h200 --out bench_plan_model.csv      # on a CUDA GPU
    python -m bench.bench_plan_model --device cpu                             # CPU, profiler memory events

Two measurements per configuration, each as contract §1 measures one call (inputs and weights allocated
first, one warm-up so library workspaces exist, then the peak above that baseline):
- prefill: a no-grad forward that keeps the KV cache and computes last-position logits → compared with the
  plan's kv_cache_bytes + activation_bytes (inference);
- train: forward + cross-entropy over every position + backward with gradients preallocated (no optimizer
  step) → compared with the plan's activation_bytes (training, checkpointing none).
On the CPU the replica reproduces the Hugging Face measurements in tests/data/hf_model_prefill_peak.csv.
"""

from __future__ import annotations

import argparse
import csv
import sys

from estimator.model.budget import budget
from estimator.model.inputs import PlanInputs
from estimator.model.specs import ModelSpec
from validation.call.protocol import cpu_peak_bytes

CASES = [  # name, layers, batch, seq_len, hidden, q_heads, kv_heads, head_dim, ffn, vocab, backend
    ("ffn-bound", 4, 2, 128, 512, 8, 2, 64, 2048, 1000, "auto"),
    ("math-bound", 3, 1, 1024, 256, 4, 4, 64, 512, 1000, "math"),
    ("mqa-vocab", 2, 2, 64, 256, 4, 1, 64, 1024, 32000, "auto"),
    ("llama-ish-4k", 4, 1, 4096, 1024, 8, 2, 128, 3584, 32000, "auto"),
    ("llama-ish-4k-math", 2, 1, 4096, 1024, 8, 2, 128, 3584, 32000, "math"),
]


def build(layers, hidden, q_heads, kv_heads, head_dim, ffn, vocab, device, dtype):
    import torch
    from torch import nn
    from torch.nn import functional as F

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden))

        def forward(self, x):  # as transformers' LlamaRMSNorm
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
            return self.weight * h.to(x.dtype)

    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(), RMSNorm()
            self.q_proj = nn.Linear(hidden, q_heads * head_dim, bias=False)
            self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.o_proj = nn.Linear(q_heads * head_dim, hidden, bias=False)
            self.gate_proj = nn.Linear(hidden, ffn, bias=False)
            self.up_proj = nn.Linear(hidden, ffn, bias=False)
            self.down_proj = nn.Linear(ffn, hidden, bias=False)

        def attention(self, x, cos, sin, cache):
            b, n, _ = x.shape
            q = self.q_proj(x).view(b, n, q_heads, head_dim).transpose(1, 2)
            k = self.k_proj(x).view(b, n, kv_heads, head_dim).transpose(1, 2)
            v = self.v_proj(x).view(b, n, kv_heads, head_dim).transpose(1, 2)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            q, k = (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)
            if cache is not None:
                cache.append((k, v))
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q_heads != kv_heads)
            return self.o_proj(out.transpose(1, 2).reshape(b, n, q_heads * head_dim))

        def forward(self, x, cos, sin, cache):
            residual = x
            x = self.input_layernorm(x)
            x = self.attention(x, cos, sin, cache)
            x = residual + x
            residual = x
            x = self.post_attention_layernorm(x)
            x = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
            return residual + x

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab, hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(hidden, vocab, bias=False)
            self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)),
                                 persistent=False)

        def rotary(self, position, dtype):  # a function of its own, as LlamaRotaryEmbedding: its temporaries die
            freqs = (self.inv_freq[None, :, None].float() @ position[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(dtype), emb.sin().to(dtype)

        def forward(self, ids, cache=None, last_only=False, labels=None):
            inputs_embeds = self.embed_tokens(ids)
            hidden_states = inputs_embeds
            position_ids = torch.arange(ids.shape[1], device=ids.device)[None]  # HF keeps these alive too
            cos, sin = self.rotary(position_ids, hidden_states.dtype)
            for layer in self.layers:
                hidden_states = layer(hidden_states, cos, sin, cache)
            hidden_states = self.norm(hidden_states)
            logits = self.lm_head(hidden_states[:, -1:] if last_only else hidden_states)
            if labels is None:
                return logits[:, -1].to(torch.float32)  # as generate: the next-token logits in fp32
            return logits, F.cross_entropy(logits.float().view(-1, vocab), labels.view(-1))

    return Model().to(device=device, dtype=dtype)


def peak_extra_bytes(fn, device) -> int:
    """Protocol §1: warm-up, then the peak above the baseline (CUDA allocator, or CPU profiler events)."""
    import torch

    fn()
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    return cpu_peak_bytes(fn)


def measure(case, device: str) -> dict:
    import contextlib

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    name, layers, batch, seq_len, hidden, q_heads, kv_heads, head_dim, ffn, vocab, backend = case
    torch.manual_seed(0)
    model = build(layers, hidden, q_heads, kv_heads, head_dim, ffn, vocab, device, torch.bfloat16)
    ids = torch.randint(0, vocab, (batch, seq_len), device=device)

    def forced():
        return sdpa_kernel([SDPBackend.MATH]) if backend == "math" else contextlib.nullcontext()

    def prefill():
        with torch.no_grad(), forced():
            cache: list = []
            out = model(ids, cache=cache, last_only=True)
            del out, cache

    def train():
        with forced():
            logits, loss = model(ids, labels=ids)
            loss.backward()
            del logits, loss

    result = {"prefill_peak_extra_bytes": peak_extra_bytes(prefill, device)}
    for p in model.parameters():  # preallocate gradients so that they are part of the baseline
        p.grad = torch.zeros_like(p)
    result["train_peak_extra_bytes"] = peak_extra_bytes(train, device)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--gpu", default="h200", help="catalog GPU for the plan's prediction (default h200)")
    parser.add_argument("--out", default="bench_plan_model.csv")
    args = parser.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        torch.set_num_threads(2)
    rows = []
    for case in CASES:
        name, layers, batch, seq_len, hidden, q_heads, kv_heads, head_dim, ffn, vocab, backend = case
        if device == "cpu" and seq_len > 1024:
            continue
        measured = measure(case, device)
        spec = ModelSpec(name=name, layers=layers, hidden=hidden, q_heads=q_heads, kv_heads=kv_heads,
                         head_dim=head_dim, ffn=ffn, vocab=vocab)
        common = dict(model=spec, seq_len=seq_len, batch=batch, gpu=args.gpu, backend=backend)
        infer = budget(PlanInputs(**common))
        train = budget(PlanInputs(**common, mode="training", persistent_grads=True))  # gradients preallocated
        row = {"case": name, "device": device, "device_name": torch.cuda.get_device_name() if device == "cuda" else
               "cpu", "torch": torch.__version__, "backend": backend, "plan_backend": infer.selected_backend,
               **measured, "plan_prefill_bytes": infer.kv_cache_bytes + infer.activation_bytes,
               "plan_train_bytes": train.activation_bytes}
        row["prefill_rel_error"] = row["plan_prefill_bytes"] / row["prefill_peak_extra_bytes"] - 1
        row["train_rel_error"] = row["plan_train_bytes"] / row["train_peak_extra_bytes"] - 1
        rows.append(row)
        print(f"{name:<20} prefill {row['prefill_peak_extra_bytes']:>14,} plan {row['plan_prefill_bytes']:>14,} "
              f"({row['prefill_rel_error']:+.2%})   train {row['train_peak_extra_bytes']:>14,} "
              f"plan {row['plan_train_bytes']:>14,} ({row['train_rel_error']:+.2%})")
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
