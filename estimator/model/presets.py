"""Named presets: real models with their exact parameter counts and the public source each count was read from
(tests/test_models.py and tests/test_specs_hf.py check every one), and a case-insensitive lookup."""

from __future__ import annotations

from estimator.model.specs import ModelSpec


def _llama(name, layers, hidden, heads, kv_heads, ffn, vocab, source, **kw) -> ModelSpec:
    return ModelSpec(name=name, layers=layers, hidden=hidden, q_heads=heads, kv_heads=kv_heads,
                     head_dim=kw.pop("head_dim", hidden // heads), ffn=ffn, vocab=vocab, source=source, **kw)


_HF = "https://huggingface.co/{}/blob/main/config.json; total = safetensors parameter count on the model page"
_TV = ("torchvision.models.{} weights meta num_params (IMAGENET1K, 224 px); arithmetic: patch conv + cls + "
       "positions + layers + final LayerNorm + 1000-class head")

PRESETS: dict[str, ModelSpec] = {m.name: m for m in (
    _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, _HF.format("meta-llama/Llama-2-7b-hf") + " 6,738,415,616",
           max_positions=4096),
    _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000,
           _HF.format("meta-llama/Llama-2-13b-hf") + " 13,015,864,320", max_positions=4096),
    _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000,
           _HF.format("meta-llama/Llama-2-70b-hf") + " 68,976,648,192", max_positions=4096),
    _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256,
           _HF.format("meta-llama/Meta-Llama-3-8B") + " 8,030,261,248", max_positions=8192),
    _llama("llama-3-70b", 80, 8192, 64, 8, 28672, 128256,
           _HF.format("meta-llama/Meta-Llama-3-70B") + " 70,553,706,496", max_positions=8192),
    # v0.1: the config sets sliding_window 4096 on every layer (v0.2/v0.3 drop it; v0.3 has vocab 32768).
    _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000,
           _HF.format("mistralai/Mistral-7B-v0.1") + " 7,241,732,096", window_per_layer=(4096,) * 32,
           max_positions=32768),
    # q/k/v biases, untied embeddings (tie_word_embeddings false for the 7B).
    _llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064,
           _HF.format("Qwen/Qwen2.5-7B") + " 7,615,616,512", qkv_bias=True, max_positions=131072),
    # head_dim 256 (explicit, not hidden/heads = 224), tied embeddings, 4 norms per layer, GeGLU,
    # sliding window 4096 on even layers (modeling_gemma2: is_sliding = not layer_idx % 2).
    _llama("gemma-2-9b", 42, 3584, 16, 8, 14336, 256000,
           _HF.format("google/gemma-2-9b") + " 9,241,705,984", head_dim=256, tied_embeddings=True,
           norms_per_layer=4, window_per_layer=tuple(4096 if i % 2 == 0 else None for i in range(42)),
           max_positions=8192, attn_logit_softcap=50.0),
    ModelSpec(name="vit-l-16", kind="encoder", layers=24, hidden=1024, q_heads=16, kv_heads=16, head_dim=64,
              ffn=4096, vocab=1000, gated_ffn=False, norm="layernorm", qkv_bias=True, out_bias=True,
              mlp_bias=True, image_size=224, patch_size=16, source=_TV.format("vit_l_16") + ": 304,326,632"),
    ModelSpec(name="vit-h-14", kind="encoder", layers=32, hidden=1280, q_heads=16, kv_heads=16, head_dim=80,
              ffn=5120, vocab=1000, gated_ffn=False, norm="layernorm", qkv_bias=True, out_bias=True,
              mlp_bias=True, image_size=224, patch_size=14,
              source=_TV.format("vit_h_14") + " (SWAG_LINEAR_V1): 632,045,800"),
    # --- added with the MoE / MLA / family fields (docs/architectures.md) ---
    # Llama 3.1: the Llama 3 shapes with a 131,072-token context (rope_scaling llama3, factor 8).
    _llama("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256,
           _HF.format("meta-llama/Llama-3.1-8B") + " 8,030,261,248", max_positions=131072),
    _llama("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256,
           _HF.format("meta-llama/Llama-3.1-70B") + " 70,553,706,496", max_positions=131072),
    _llama("llama-3.1-405b", 126, 16384, 128, 8, 53248, 128256,
           _HF.format("meta-llama/Llama-3.1-405B") + " 405,853,388,800", max_positions=131072),
    _llama("qwen2.5-72b", 80, 8192, 64, 8, 29568, 152064,
           _HF.format("Qwen/Qwen2.5-72B") + " 72,706,203,648", qkv_bias=True, max_positions=131072),
    # Phi-3: fused qkv_proj and gate_up_proj (same count as separate matrices); the 4k config's sliding_window
    # 2047 is applied by HF's Phi3Attention on every layer.
    _llama("phi-3-mini", 32, 3072, 32, 32, 8192, 32064,
           _HF.format("microsoft/Phi-3-mini-4k-instruct") + " 3,821,079,552", fused_qkv=True, fused_gate_up=True,
           window_per_layer=(2047,) * 32, max_positions=4096),
    # Gemma 3 language models (text_config of Gemma3ForConditionalGeneration; Gemma3TextConfig defaults for the
    # keys the file leaves out: vocab 262208, head_dim 256, query_pre_attn_scalar 256, sliding_window_pattern 6).
    # The hub totals include the SigLIP vision tower + projector (12b: 12,187,325,040; 27b: 27,432,406,640);
    # the text-only totals are keras-hub's gemma3_12b_text / gemma3_27b_text (vocab 262144) + 64·hidden.
    _llama("gemma-3-12b", 48, 3840, 16, 8, 15360, 262208,
           _HF.format("google/gemma-3-12b-it") + " 12,187,325,040 with the vision tower; language model "
           "11,766,034,176 = keras-hub gemma3_12b_text 11,765,788,416 + 64·3840", head_dim=256,
           tied_embeddings=True, norms_per_layer=4, qk_norm=True, query_pre_attn_scalar=256,
           window_per_layer=tuple(None if (i + 1) % 6 == 0 else 1024 for i in range(48)), max_positions=131072),
    _llama("gemma-3-27b", 62, 5376, 32, 16, 21504, 262208,
           _HF.format("google/gemma-3-27b-it") + " 27,432,406,640 with the vision tower; language model "
           "27,009,346,304 = keras-hub gemma3_27b_text 27,009,002,240 + 64·5376", head_dim=128,
           tied_embeddings=True, norms_per_layer=4, qk_norm=True, query_pre_attn_scalar=168,
           window_per_layer=tuple(None if (i + 1) % 6 == 0 else 1024 for i in range(62)), max_positions=131072),
    # Mixture of experts.
    _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000,
           _HF.format("mistralai/Mixtral-8x7B-v0.1") + " 46,702,792,704 (12.9B active)", experts=8,
           experts_per_token=2, moe_ffn=14336, max_positions=32768),
    _llama("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936,
           _HF.format("Qwen/Qwen3-30B-A3B") + " 30,532,122,624 (3.3B active)", head_dim=128, qk_norm=True,
           experts=128, experts_per_token=8, moe_ffn=768, max_positions=40960),
    # MLA (q_lora_rank null: q_proj straight from hidden) + MoE with 2 shared experts, layer 0 dense.
    _llama("deepseek-v2-lite", 27, 2048, 16, 16, 10944, 102400,
           _HF.format("deepseek-ai/DeepSeek-V2-Lite") + " 15,706,484,224", head_dim=192, v_head_dim=128,
           kv_lora_rank=512, qk_rope_head_dim=64, experts=64, experts_per_token=6, moe_ffn=1408,
           shared_experts_ffn=2 * 1408, dense_layers=(0,), max_positions=163840),
    # V3: q through a 1536 latent, 256 experts (top 8) + 1 shared, first 3 layers dense. The published main-model
    # count (671B; the 14B multi-token-prediction layer not included) is the checkpoint's, whose 58 router
    # e_score_correction_bias vectors HF keeps as buffers: params = 671,026,404,352, state_params the total.
    _llama("deepseek-v3", 61, 7168, 128, 128, 18432, 129280,
           _HF.format("deepseek-ai/DeepSeek-V3") + "; main model (README: 671B + 14B MTP) 671,026,419,200 "
           "tensor elements (state_params)", head_dim=192, v_head_dim=128, kv_lora_rank=512, q_lora_rank=1536,
           qk_rope_head_dim=64, experts=256, experts_per_token=8, moe_ffn=2048, shared_experts_ffn=2048,
           dense_layers=(0, 1, 2), router_score_bias=True, max_positions=163840),
    # Qwen2-MoE: q/k/v biases, 60 experts (top 4) + a shared expert (5632) behind a sigmoid gate.
    _llama("qwen1.5-moe-a2.7b", 24, 2048, 16, 16, 5632, 151936,
           _HF.format("Qwen/Qwen1.5-MoE-A2.7B") + " 14,315,784,192 (model card: 14.3B, 2.7B activated)",
           qkv_bias=True, experts=60, experts_per_token=4, moe_ffn=1408, shared_experts_ffn=5632,
           shared_expert_gate=True, max_positions=8192),
    # gpt-oss: attention biases (q, k, v, o), a sink per head, 128-token windows on even layers, experts with
    # biases, router with bias. Totals: bf16-equivalent counts (the hub stores the experts as MXFP4 blocks).
    _llama("gpt-oss-20b", 24, 2880, 64, 8, 2880, 201088,
           _HF.format("openai/gpt-oss-20b") + "; model card 20.9B (3.6B active); exact 20,914,757,184 "
           "(GGUF general.parameter_count)", head_dim=64, qkv_bias=True, out_bias=True, attention_sinks=True,
           experts=32, experts_per_token=4, moe_ffn=2880, router_bias=True, expert_bias=True,
           window_per_layer=tuple(128 if i % 2 == 0 else None for i in range(24)), max_positions=131072),
    _llama("gpt-oss-120b", 36, 2880, 64, 8, 2880, 201088,
           _HF.format("openai/gpt-oss-120b") + "; model card 117B (5.1B active); exact 116,829,156,672 "
           "(GGUF general.parameter_count)", head_dim=64, qkv_bias=True, out_bias=True, attention_sinks=True,
           experts=128, experts_per_token=4, moe_ffn=2880, router_bias=True, expert_bias=True,
           window_per_layer=tuple(128 if i % 2 == 0 else None for i in range(36)), max_positions=131072),
)}

PRESET_ALIASES = {"llama2-7b": "llama-2-7b", "llama2-13b": "llama-2-13b", "llama2-70b": "llama-2-70b",
                  "llama3-8b": "llama-3-8b", "llama3-70b": "llama-3-70b", "llama3.1-8b": "llama-3.1-8b",
                  "llama3.1-70b": "llama-3.1-70b", "llama3.1-405b": "llama-3.1-405b",
                  "qwen2.5-7b-instruct": "qwen2.5-7b", "gemma2-9b": "gemma-2-9b",
                  "vit-large-16": "vit-l-16", "vit-huge-14": "vit-h-14", "mistral-7b-v0.1": "mistral-7b",
                  "phi-3-mini-4k": "phi-3-mini", "phi-3-mini-4k-instruct": "phi-3-mini",
                  "mixtral-8x7b-v0.1": "mixtral-8x7b", "qwen2.5-72b-instruct": "qwen2.5-72b",
                  "gemma-3-12b-it": "gemma-3-12b", "gemma-3-27b-it": "gemma-3-27b",
                  "gemma3-12b": "gemma-3-12b", "gemma3-27b": "gemma-3-27b",
                  "qwen2-moe-a2.7b": "qwen1.5-moe-a2.7b"}


def get_preset(name: str) -> ModelSpec:
    """Look a preset up by name (case-insensitive); ValueError listing the known names otherwise."""
    key = str(name).strip().lower().replace("_", "-")
    key = PRESET_ALIASES.get(key, key)
    if key not in PRESETS:
        raise ValueError(f"preset: unknown model {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[key]
