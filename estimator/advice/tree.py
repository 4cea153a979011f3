"""The long-context attention decision tree, as data, and a plain-text rendering of it.

Source: the usual long-context attention practice (profile first, then choose kernel, architecture or
parallelism, never skip steps), checked against PyTorch 2.11
(docs/sdpa-internals.md). Each node names the advice ids (contract §4) that the rules in
`estimator/advice/*_rules.py` produce at that step. The pre-order walk of the tree is the advisor's order of
importance (`ADVICE_ORDER`), so the printed tree and the advice list never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Node:
    """One step: a question or an action, the advice ids it can yield, and its branches (label, node)."""

    key: str
    text: str
    advice: tuple[str, ...] = ()
    branches: tuple[tuple[str, Node], ...] = ()

    def __post_init__(self) -> None:
        if not self.key or not self.text:
            raise ValueError("key: a decision-tree node needs a key and a text")
        for label, child in self.branches:
            if not isinstance(child, Node) or not label:
                raise ValueError(f"branches: node {self.key!r} has a malformed branch {label!r}")


def _leaf(key: str, text: str, *advice: str) -> Node:
    return Node(key=key, text=text, advice=advice)


TREE = Node(
    key="start",
    text="Start from the estimator's plan for the workload (python -m estimator plan).",
    branches=(
        ("it fits", _leaf("fits", "Say so, with the headroom (capacity minus total bytes per GPU).", "fits")),
        ("before any change below", Node(
            key="profile",
            text="Profile before changing anything: attention / FFN / embedding share of forward time "
                 "(torch.profiler, sort by cuda_time_total).",
            advice=("profile-first",),
            branches=(
                ("attention < 40% of forward time", _leaf(
                    "not-bottleneck", "The kernel is not the bottleneck: look at the FFN and the embedding first.",
                    "attention-not-bottleneck")),
                ("attention runs hand-written (eager)", _leaf(
                    "eager", "Move to SDPA; until then, in inference only, fill the causal mask in place "
                             "(masked_fill_ breaks autograd).",
                    "eager-to-sdpa", "inplace-masked-fill")),
                ("a sliding window runs through SDPA or eager (a dense mask: nothing saved)", _leaf(
                    "window-kernel", "Run the window through a kernel that skips masked blocks: FlexAttention "
                                     "(keep it compiled: past the recompile limit it runs unfused).",
                    "flex-window", "flex-recompile")),
                ("attention runs the math path (n² scores materialised), or flash cannot run", Node(
                    key="math",
                    text="Use a fused kernel. Why can't flash (or cuDNN/efficient) run now?",
                    advice=("use-fused-kernel",),
                    branches=(
                        ("fp32", _leaf("dtype", "Train/serve in bf16 or fp16: flash and cuDNN need 16-bit.",
                                       "flash-ineligible-dtype")),
                        ("head_dim > 256 or not a multiple of 8", _leaf(
                            "head-dim", "flash takes any head_dim ≤ 256 (it pads to a multiple of 8 itself); "
                                        "efficient and cuDNN need head_dim % 8 == 0 (cuDNN also ≤ 128): pad it.",
                            "flash-ineligible-head-dim", "pad-head-dim")),
                        ("a dense mask", _leaf(
                            "mask", "Replace a causal dense mask by is_causal=True (drop a padding-only mask).",
                            "flash-ineligible-mask")),
                        ("GPU older than sm80", _leaf("gpu", "No flash before Ampere: efficient, or another GPU.",
                                                      "flash-ineligible-gpu")),
                        ("causal with q_len ≠ kv_len", _leaf(
                            "causal-shape", "Flash's is_causal needs q_len == kv_len: pass the offset mask "
                                            "another way or use efficient/cuDNN.",
                            "flash-ineligible-causal")),
                        ("GQA (kv_heads < q_heads)", _leaf(
                            "math-gqa", "The math path copies K and V to q_heads (repeat_interleave).",
                            "math-gqa-expansion")),
                    ))),
            ))),
        ("it does not fit", Node(
            key="over-budget",
            text="Which term is over budget?",
            branches=(
                ("model state (weights, gradients, optimizer) exceeds one GPU, or fills over half of it "
                 "while batch 1 is still over", _leaf(
                    "model-state", "Shard the weights: tensor parallel over more GPUs.", "tensor-parallel")),
                ("routed experts hold most of the model state (mixture of experts)", _leaf(
                    "experts", "Shard the experts: expert parallel (each GPU holds experts/ep of every MoE layer).",
                    "moe-expert-parallel")),
                ("training: the precision recipe or the optimizer holds the bytes", _leaf(
                    "recipe", "A leaner recipe: bf16-true instead of fp32 weights and moments (say the trade), "
                              "fused or 8-bit AdamW.",
                    "precision", "optimizer")),
                ("fine-tuning: full weights, gradients and moments of every parameter", _leaf(
                    "finetune", "Climb the fine-tuning ladder: LoRA, QLoRA, checkpointing, 8-bit AdamW, a smaller "
                                "micro-batch, each re-planned.",
                    "finetune-ladder")),
                ("images: the vision tower or its image tokens hold the bytes", _leaf(
                    "images", "Count the tokens of each modality first; then fewer pixels (a smaller max-pixels "
                              "bound), fewer images, a frozen tower, a fused kernel in the tower.",
                    "vision-memory-split", "vision-max-pixels", "vision-fewer-pixels", "vision-freeze-tower",
                    "vision-fused-tower")),
                ("a state-space / hybrid model on transformers' torch fallback (no mamba-ssm)", _leaf(
                    "ssm-fallback", "Install the fused kernels (mamba-ssm, causal-conv1d); until then a smaller "
                                    "chunk_size shrinks the chunked scan's fp32 products (same result).",
                    "mamba-fast-kernels", "mamba-chunk-size")),
                ("fits at batch 1, not at this batch", _leaf("batch", "Reduce the batch first.", "reduce-batch")),
                ("training activations", _leaf(
                    "activations", "Activation checkpointing where the activations are (FFN or attention); "
                                   "+20–30% step time.",
                    "activation-checkpointing")),
                ("KV cache dominates decode (inference; advised even when it fits)", _leaf(
                    "kv-cache", "Shrink the cache: MLA's latent instead of per-head k, v; a quantised KV cache; "
                              "fewer KV heads (GQA/MQA).",
                    "mla-latent-cache", "kv-cache-quantization", "gqa")),
                ("still over budget at batch 1", _leaf(
                    "architecture", "Change the architecture: window attention O(n·w) through a kernel that "
                                    "skips blocks (FlexAttention), a shorter n (patch merging).",
                    "window-attention", "reduce-seq-len")),
                ("attention dominates and a window is not enough (inference)", _leaf(
                    "linear", "Replace softmax attention: linear attention (Performer's fixed state for a decoder, "
                              "Linformer's k projected keys for an encoder), or a hybrid keeping softmax in a few "
                              "layers (a state-space or DeltaNet layer in the others); it changes the model: "
                              "retrain and measure the quality.",
                    "linear-attention", "hybrid-architecture")),
                ("the sequence itself is beyond one GPU", _leaf(
                    "sequence", "Shard the sequence: context parallel (ring attention) over more GPUs.",
                    "context-parallel")),
            ))),
        ("in production", Node(
            key="operate",
            text="Operate it.",
            branches=(
                ("serving", _leaf("serving", "Measure prefill and decode separately; hold the SLA on P99 decode; "
                                             "warm decode up past per-length library caches.",
                                  "split-prefill-decode", "decode-graph-warmup")),
                ("every run", _leaf("log", "Log the attention backend name at step 0 (no silent math fallback).",
                                    "log-backend")),
            ))),
    ),
)


def walk(node: Node = TREE):
    """Pre-order walk: yields (depth, branch label, node)."""
    stack = [(0, "", node)]
    while stack:
        depth, label, current = stack.pop()
        yield depth, label, current
        for child_label, child in reversed(current.branches):
            stack.append((depth + 1, child_label, child))


def advice_order(node: Node = TREE) -> tuple[str, ...]:
    """Every advice id in the tree, in pre-order: the advisor's order of importance."""
    seen: list[str] = []
    for _, _, current in walk(node):
        seen.extend(a for a in current.advice if a not in seen)
    return tuple(seen)


ADVICE_ORDER = advice_order()


def render_tree(node: Node = TREE) -> str:
    """The tree as indented text with box-drawing branches, advice ids in brackets."""
    lines: list[str] = []

    def visit(current: Node, prefix: str, label: str, last: bool, root: bool) -> None:
        ids = f"  [{', '.join(current.advice)}]" if current.advice else ""
        if root:
            lines.append(f"{current.text}{ids}")
            child_prefix = ""
        else:
            lines.append(f"{prefix}{'└── ' if last else '├── '}{label}: {current.text}{ids}")
            child_prefix = prefix + ("    " if last else "│   ")
        for i, (child_label, child) in enumerate(current.branches):
            visit(child, child_prefix, child_label, i == len(current.branches) - 1, False)

    visit(node, "", "", True, True)
    return "\n".join(lines)
