"""Measure what one Hugging Face Llama decoder layer saves for backward, to check plan.py's per-layer
training activations (the Korthikanti et al. 2022 terms generalised to RMSNorm, GQA and SwiGLU).

    pip install transformers   # any environment; not a project dependency
    python -m bench.bench_plan_activations --out tests/data/hf_layer_saved_bytes.csv

    python -m bench.bench_plan_activations --inference --out tests/data/hf_layer_inference_peak.csv
    python -m bench.bench_plan_activations --loss --out tests/data/hf_loss_peak.csv
    python -m bench.bench_plan_activations --model --out tests/data/hf_model_prefill_peak.csv
    python -m bench.bench_plan_activations --train --out tests/data/hf_model_train_peak.csv

Runs on the CPU in bf16 (saved tensors do not depend on the device, except inside the attention kernel).
Walks the autograd graph after one layer's forward and sums the storages that nodes saved, each storage once,
leaving out the parameters, the layer input (the previous layer owns it) and the RoPE cos/sin tables (computed
once per forward and shared by every layer). `core_bytes` is what the SDPA node saved (q, k, v, out,
logsumexp); `other_bytes` the rest (norms, projection inputs, FFN).
With `--inference`: the peak live bytes above the layer input during one forward under `torch.no_grad()`,
from the profiler's memory events (validation's CPU protocol), at shapes where the FFN phase is the peak, and
with SDPA forced to the math backend at shapes where attention is (the CPU math path allocates what the GPU one
does, sdpa-internals.md §1).
"""

from __future__ import annotations

import argparse
import csv
import sys

from validation.call.protocol import cpu_peak_bytes

CASES = [  # name, batch, seq_len, hidden, q_heads, kv_heads, head_dim, ffn
    ("gqa-small", 2, 128, 256, 8, 2, 32, 688),
    ("mha-small", 2, 128, 256, 8, 8, 32, 688),
    ("gqa-long", 1, 512, 512, 8, 1, 64, 1376),
]


def measure(batch, seq_len, hidden, q_heads, kv_heads, head_dim, ffn) -> tuple[int, int]:
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = LlamaConfig(hidden_size=hidden, num_attention_heads=q_heads, num_key_value_heads=kv_heads,
                      head_dim=head_dim, intermediate_size=ffn, num_hidden_layers=1, vocab_size=1000)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(cfg, layer_idx=0).to(torch.bfloat16)
    x = torch.randn(batch, seq_len, hidden, dtype=torch.bfloat16, requires_grad=True)
    pos = torch.arange(seq_len)[None].expand(batch, seq_len)
    cos, sin = LlamaRotaryEmbedding(cfg)(x, pos)
    out = layer(x, attention_mask=None, position_ids=pos, position_embeddings=(cos, sin))
    out = out[0] if isinstance(out, tuple) else out
    skip = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    skip |= {t.untyped_storage().data_ptr() for t in (x, cos, sin)}
    saved: dict[int, tuple[int, bool]] = {}
    stack, visited = [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                value = getattr(node, attr)
            except RuntimeError:
                continue
            if isinstance(value, torch.Tensor):
                ptr = value.untyped_storage().data_ptr()
                if ptr not in skip:
                    core = "ScaledDotProduct" in node.name()
                    size, was_core = saved.get(ptr, (value.untyped_storage().nbytes(), False))
                    saved[ptr] = (size, was_core or core)
        stack.extend(f for f, _ in node.next_functions)
    core = sum(size for size, is_core in saved.values() if is_core)
    other = sum(size for size, is_core in saved.values() if not is_core)
    return core, other


INFERENCE_CASES = [  # name, shape, SDPA backend: FFN-dominated shapes (default backend), then math-dominated ones
    ("gqa-ffn", 2, 64, 512, 8, 2, 64, 2048, "default"),
    ("mqa-ffn", 1, 256, 256, 4, 1, 64, 1024, "default"),
    ("mha-math", 1, 1024, 256, 4, 4, 64, 512, "math"),
    ("gqa-math", 2, 512, 256, 8, 2, 32, 512, "math"),
]


def _layer(batch, seq_len, hidden, q_heads, kv_heads, head_dim, ffn):
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = LlamaConfig(hidden_size=hidden, num_attention_heads=q_heads, num_key_value_heads=kv_heads,
                      head_dim=head_dim, intermediate_size=ffn, num_hidden_layers=1, vocab_size=1000)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(cfg, layer_idx=0).to(torch.bfloat16)
    x = torch.randn(batch, seq_len, hidden, dtype=torch.bfloat16)
    pos = torch.arange(seq_len)[None].expand(batch, seq_len)
    cos, sin = LlamaRotaryEmbedding(cfg)(x, pos)
    return layer, x, pos, (cos.to(torch.bfloat16), sin.to(torch.bfloat16))


def inference_peak(*shape, backend: str = "default") -> int:
    import contextlib

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    layer, x, pos, rope = _layer(*shape)
    forced = sdpa_kernel([SDPBackend.MATH]) if backend == "math" else contextlib.nullcontext()
    with torch.no_grad(), forced:
        layer(x, attention_mask=None, position_ids=pos, position_embeddings=rope)  # warm-up
        return cpu_peak_bytes(lambda: layer(x, attention_mask=None, position_ids=pos, position_embeddings=rope))


MODEL_CASES = [  # name, layers, batch, seq_len, hidden, q_heads, kv_heads, head_dim, ffn, vocab, SDPA backend
    ("ffn-bound", 4, 2, 128, 512, 8, 2, 64, 2048, 1000, "default"),
    ("math-bound", 3, 1, 1024, 256, 4, 4, 64, 512, 1000, "math"),
    ("mqa-vocab", 2, 2, 64, 256, 4, 1, 64, 1024, 32000, "default"),
]


def model_prefill_peak(layers, batch, seq_len, hidden, q_heads, kv_heads, head_dim, ffn, vocab, backend) -> int:
    """Peak live bytes above the weights of a whole LlamaForCausalLM prefill under no_grad that keeps its KV
    cache (DynamicCache) and computes the logits of the last position (`logits_to_keep=1`, as generate does)."""
    import contextlib

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=hidden, num_attention_heads=q_heads, num_key_value_heads=kv_heads,
                      head_dim=head_dim, intermediate_size=ffn, num_hidden_layers=layers, vocab_size=vocab)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    ids = torch.randint(0, vocab, (batch, seq_len))
    forced = sdpa_kernel([SDPBackend.MATH]) if backend == "math" else contextlib.nullcontext()
    with torch.no_grad(), forced:
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)  # warm-up
        del out

        def _profiled():
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            del out  # the cache stayed alive to the end of the measured call

        return cpu_peak_bytes(_profiled)


TRAIN_CASES = [  # whole-model training step, checkpointing none, default SDPA backend (CPU flash)
    ("ffn-bound", 4, 2, 128, 512, 8, 2, 64, 2048, 1000),
    ("ffn-bound-wide", 4, 2, 128, 512, 8, 2, 64, 4096, 1000),
    ("logits-bound", 2, 2, 64, 256, 4, 1, 64, 1024, 32000),
]


def model_train_peak(layers, batch, seq_len, hidden, q_heads, kv_heads, head_dim, ffn, vocab) -> int:
    """Peak live bytes of forward + loss + backward of a whole LlamaForCausalLM, gradients preallocated,
    the loop holding the model output."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=hidden, num_attention_heads=q_heads, num_key_value_heads=kv_heads,
                      head_dim=head_dim, intermediate_size=ffn, num_hidden_layers=layers, vocab_size=vocab)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).train()
    ids = torch.randint(0, vocab, (batch, seq_len))

    def step():
        out = model(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()

    step()
    model.zero_grad(set_to_none=False)
    return cpu_peak_bytes(step)


LOSS_CASES = [  # keep_output: the loop holds the model output (and so the logits) during backward
    ("bf16-keep", 2, 256, 32000, 64, "bfloat16", True), ("fp32-keep", 2, 256, 32000, 64, "float32", True),
    ("bf16-drop", 2, 256, 32000, 64, "bfloat16", False), ("fp32-drop", 2, 256, 32000, 64, "float32", False),
]


def loss_step_peak(batch, seq_len, vocab, hidden, dtype, keep_output) -> int:
    """Peak live bytes of forward + cross-entropy + backward of a 1-layer LlamaForCausalLM whose logits dominate,
    with gradients preallocated (so only activations and the loss count). `keep_output`: `out = model(...);
    out.loss.backward()` (a typical loop); otherwise `model(...).loss.backward()` (as the HF Trainer does)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=hidden, num_attention_heads=2, num_key_value_heads=2, head_dim=hidden // 2,
                      intermediate_size=2 * hidden, num_hidden_layers=1, vocab_size=vocab)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(getattr(torch, dtype))
    ids = torch.randint(0, vocab, (batch, seq_len))

    def step():
        if keep_output:
            out = model(input_ids=ids, labels=ids)
            out.loss.backward()
        else:
            model(input_ids=ids, labels=ids).loss.backward()

    step()
    model.zero_grad(set_to_none=False)
    return cpu_peak_bytes(step)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="hf_layer_saved_bytes.csv")
    parser.add_argument("--inference", action="store_true", help="peak of a no-grad forward instead")
    parser.add_argument("--loss", action="store_true", help="peak of forward + loss + backward, logits-bound")
    parser.add_argument("--model", action="store_true", help="peak of a whole-model prefill keeping the KV cache")
    parser.add_argument("--train", action="store_true", help="peak of a whole-model training step (no optimizer)")
    args = parser.parse_args(argv)
    import torch
    import transformers

    if args.train:
        torch.set_num_threads(2)
        with open(args.out, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["case", "layers", "batch", "seq_len", "hidden", "q_heads", "kv_heads", "head_dim", "ffn",
                             "vocab", "dtype", "peak_extra_bytes", "torch", "transformers", "device", "command"])
            for case in TRAIN_CASES:
                peak = model_train_peak(*case[1:])
                writer.writerow([*case, "bfloat16", peak, torch.__version__, transformers.__version__, "cpu",
                                 "python -m bench.bench_plan_activations --train "
                                 "--out tests/data/hf_model_train_peak.csv"])
                print(case[0], peak)
        return 0
    if args.model:
        torch.set_num_threads(2)
        with open(args.out, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["case", "layers", "batch", "seq_len", "hidden", "q_heads", "kv_heads", "head_dim", "ffn",
                             "vocab", "sdpa_backend", "dtype", "peak_extra_bytes", "torch", "transformers", "device",
                             "command"])
            for case in MODEL_CASES:
                peak = model_prefill_peak(*case[1:])
                writer.writerow([*case, "bfloat16", peak, torch.__version__, transformers.__version__, "cpu",
                                 "python -m bench.bench_plan_activations --model "
                                 "--out tests/data/hf_model_prefill_peak.csv"])
                print(case[0], peak)
        return 0
    if args.loss:
        torch.set_num_threads(2)
        with open(args.out, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["case", "batch", "seq_len", "vocab", "hidden", "dtype", "keep_output", "peak_extra_bytes",
                             "torch", "transformers", "device", "command"])
            for case in LOSS_CASES:
                peak = loss_step_peak(*case[1:])
                writer.writerow([*case, peak, torch.__version__, transformers.__version__, "cpu",
                                 "python -m bench.bench_plan_activations --loss --out tests/data/hf_loss_peak.csv"])
                print(case[0], peak)
        return 0
    if args.inference:
        torch.set_num_threads(2)
        with open(args.out, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["case", "batch", "seq_len", "hidden", "q_heads", "kv_heads", "head_dim", "ffn",
                             "sdpa_backend", "dtype", "peak_extra_bytes", "torch", "transformers", "device", "command"])
            for case in INFERENCE_CASES:
                peak = inference_peak(*case[1:-1], backend=case[-1])
                writer.writerow([*case, "bfloat16", peak, torch.__version__, transformers.__version__, "cpu",
                                 "python -m bench.bench_plan_activations --inference "
                                 "--out tests/data/hf_layer_inference_peak.csv"])
                print(case[0], peak)
        return 0

    with open(args.out, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["case", "batch", "seq_len", "hidden", "q_heads", "kv_heads", "head_dim", "ffn", "dtype",
                         "core_bytes", "other_bytes", "torch", "transformers", "device",
                         "command"])
        for case in CASES:
            core, other = measure(*case[1:])
            writer.writerow([*case, "bfloat16", core, other, torch.__version__, transformers.__version__, "cpu",
                             "python -m bench.bench_plan_activations --out tests/data/hf_layer_saved_bytes.csv"])
            print(case[0], core, other)
    return 0


if __name__ == "__main__":
    sys.exit(main())
