"""What a transformers model's loaded weights occupy in PyTorch's caching allocator on one GPU: the parameter
tensors in registration order (`parameter_tensor_bytes`) and the allocated and reserved bytes their one-by-one
allocation leaves (`weights_allocator_bytes`, replayed by estimator/call/allocator.py). The engines' pool rules
(estimator/serve/memory.py) take the free memory after loading from it."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from estimator.call.config import DTYPE_BITS
from estimator.call.shapes import cdiv
from estimator.model.inputs import PlanInputs
from estimator.model.state import model_state


def weights_bytes(inputs: PlanInputs) -> int:
    return model_state(replace(inputs, mode="inference"))[0]


def parameter_tensor_bytes(inputs: PlanInputs) -> list[int] | None:
    """The parameter tensors of a dense transformers decoder on one GPU, in the order the model registers (and
    `.to(device)` moves) them: the embedding, per layer the attention projections (weight then bias), q/k norms,
    the MLP, the layer norms, then the final norm and the LM head (absent when tied). Shapes from
    estimator/model/layer_passes.py `linear_shapes`. A mixture of experts whose every layer is one routed block
    without shared experts or biases (Mixtral, Qwen3-MoE) holds, in place of the MLP, the router's (experts, hidden)
    weight and two fused 3-D expert tensors, (experts, 2·moe_ffn, hidden) gate_up_proj and (experts, hidden,
    moe_ffn) down_proj (transformers 5.17 models/mixtral/modeling_mixtral.py `MixtralExperts`,
    models/qwen3_moe/modeling_qwen3_moe.py `Qwen3MoeExperts`; the router comes after the experts in Qwen3-MoE, which
    changes no segment: it is under 1 MiB, a small-pool block, and the expert tensors are large ones). None for
    latent-attention models and other expert layouts (shared experts, biases, dense layers)."""
    from estimator.model.layer_passes import linear_shapes

    m = inputs.model
    routed = bool(m.experts) and not (m.shared_experts_ffn or m.router_bias or m.expert_bias or m.dense_layers
                                       or m.moe_layers != m.layers)
    if m.mla or (m.experts and not routed):
        return None
    es = DTYPE_BITS[inputs.dtype] // 8
    V, H = cdiv(m.vocab, inputs.tp), m.hidden
    attn, mlp, _ = linear_shapes(inputs)
    norm = H * (2 if m.norm == "layernorm" else 1)
    layer: list[int] = []
    for index, (n, k, count) in enumerate(attn):
        for _ in range(count):
            layer.append(n * k * es)
            if (m.qkv_bias and index < len(attn) - 1) or (m.out_bias and index == len(attn) - 1):
                layer.append(n * es)
    if m.qk_norm:
        layer += [m.head_dim * es, m.head_dim * es]
    if routed:
        E, Fe = cdiv(m.experts, inputs.ep), cdiv(m.moe_ffn, inputs.tp)
        layer += [m.experts * H * es, E * 2 * Fe * H * es, E * H * Fe * es]
    else:
        for n, k, count in mlp:
            for _ in range(count):
                layer.append(n * k * es)
                if m.mlp_bias:
                    layer.append(n * es)
    layer += [norm * es] * m.norms_per_layer
    tensors = [V * H * es] + layer * m.layers + [norm * es]
    if not m.tied_embeddings:
        tensors.append(V * H * es)
    return tensors


@lru_cache(maxsize=64)
def weights_allocator_bytes(inputs: PlanInputs) -> tuple[int, int]:
    """(allocated, reserved) bytes PyTorch's caching allocator holds for the weights: the parameter tensors
    allocated one by one in registration order, replayed by estimator/call/allocator.py. Allocated counts each
    block as the allocator keeps it (a tensor's remainder of 1 MiB or less in its segment is not split off);
    reserved counts the segments (tensors of 1-10 MiB share 20 MiB segments, small ones 2 MiB segments). The
    weights' bytes for both where the layout is not known (parameter_tensor_bytes is None). On the H200
    (validation/data/h200_serve_heldout_summary.csv, `reserved_before_bytes - weights_bytes` with weights_bytes
    torch.cuda.memory_allocated after loading): 129.5 MiB for llama-3.1-8b, mistral-7b and qwen2.5-7b, 65.7 MiB for
    llama-3.1-8b at 16 layers, 1.6 MiB for phi-3-mini, 0.8 MiB for gemma-2-9b; the replay gives 129.5, 129.5,
    129.4, 65.5, 1.9 and 0.8 MiB (tests/test_serve_memory.py)."""
    from estimator.call.allocator import CachingAllocator

    weights = weights_bytes(inputs)
    tensors = parameter_tensor_bytes(inputs)
    if tensors is None:
        return weights, weights
    alloc = CachingAllocator(capacity_bytes=1 << 62)
    allocated = sum(alloc.malloc(size).size for size in tensors)
    return max(allocated, weights), max(alloc.reserved_bytes, allocated, weights)
