"""The Mamba2 torch-fallback replay and the hybrid prefill plan against the tensors transformers 5.17 really
allocates, on CPU (validation/model/live_bytes.py tracks every storage), and the parameter counts and cache
state bytes against the models transformers builds. Small shapes: seconds."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from estimator.model.hybrid import hybrid_from_hf_config  # noqa: E402
from estimator.model.hybrid_plan import hybrid_plan  # noqa: E402
from estimator.model.ssm_mamba2 import MambaMixerShape, prefill_peak_bytes  # noqa: E402
from validation.model.hf_configs import family_config, to_hf_config  # noqa: E402
from validation.model.hf_hybrid import HYBRID_FAMILIES, cache_of  # noqa: E402
from validation.model.live_bytes import LiveBytes  # noqa: E402


@pytest.mark.parametrize("h,P,n,g,chunk,b,L", [(8, 16, 32, 2, 32, 1, 100), (8, 16, 32, 2, 32, 1, 128),
                                               (4, 8, 16, 1, 16, 2, 50), (6, 8, 8, 3, 16, 1, 200)])
def test_mixer_replay_matches_the_tracked_forward(h, P, n, g, chunk, b, L):
    from transformers import Mamba2Config
    from transformers.cache_utils import DynamicCache
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    cfg = Mamba2Config(num_heads=h, head_dim=P, hidden_size=h * P // 2, expand=2, state_size=n, n_groups=g,
                       num_hidden_layers=1, vocab_size=64, chunk_size=chunk)
    mixer = Mamba2Mixer(cfg, 0).to(torch.bfloat16).eval()
    x = torch.randn(b, L, cfg.hidden_size, dtype=torch.bfloat16)
    with torch.no_grad(), LiveBytes() as lb:
        mixer(x, cache_params=DynamicCache(config=cfg))
    shape = MambaMixerShape(hidden=cfg.hidden_size, heads=h, head_dim=P, groups=g, state=n, conv_kernel=4,
                            chunk=chunk)
    planned = prefill_peak_bytes(shape, b, L, 2)
    assert abs(planned - lb.peak) <= 64, (planned, lb.peak, lb.peak_op)  # A's (heads,) fp32 temporaries


@pytest.mark.parametrize("family,layers,L,b", [("mamba2-codestral", 2, 100, 1), ("mamba2-codestral", 2, 50, 2),
                                               ("falcon-h1", 2, 100, 1), ("bamba", 3, 64, 2)])
def test_whole_model_prefill_and_cache_state(family, layers, L, b):
    from transformers import AutoModelForCausalLM

    cfg = family_config(family, layers, None, tiny=True)
    impl = "eager" if cfg["model_type"] == "mamba2" else "sdpa"
    model = AutoModelForCausalLM.from_config(to_hf_config(cfg), attn_implementation=impl,
                                             dtype=torch.bfloat16).eval()
    ids = torch.randint(0, cfg["vocab_size"], (b, L))
    with torch.no_grad(), LiveBytes() as lb:
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    spec = hybrid_from_hf_config(cfg)
    plan = hybrid_plan(spec, seq_len=L, batch=b)
    planned = plan.detail["peak_above_weights_bytes"] - 8 * b * L  # the ids were made before the mode
    assert abs(planned / lb.peak - 1) < 0.005, (planned, lb.peak, lb.peak_op)
    cache = cache_of(out)
    state = sum(t.numel() * t.element_size() for layer in cache.layers
                for t in list(getattr(layer, "conv_states", {}).values())
                + list(getattr(layer, "recurrent_states", {}).values()) if isinstance(t, torch.Tensor))
    kv = sum(t.numel() * t.element_size() for layer in cache.layers
             for t in (getattr(layer, "keys", None), getattr(layer, "values", None)) if isinstance(t, torch.Tensor))
    assert state == plan.state_bytes
    assert kv == plan.kv_cache_bytes


@pytest.mark.parametrize("family", sorted(HYBRID_FAMILIES))
def test_params_exact_at_published_widths(family):
    from transformers import AutoModelForCausalLM

    cfg = family_config(family, 4)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(to_hf_config(cfg))
    assert sum(p.numel() for p in model.parameters()) == hybrid_from_hf_config(cfg).params


def test_qwen3_next_cache_bytes_are_what_its_cache_holds():
    from transformers import AutoModelForCausalLM, Qwen3NextConfig

    from estimator.model.hybrid import hybrid_from_hf_config
    from estimator.model.ssm_deltanet import deltanet_cache_from_hf_config

    kw = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=16,
              intermediate_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=4,
              num_experts_per_tok=2, vocab_size=128)
    model = AutoModelForCausalLM.from_config(Qwen3NextConfig(**kw), dtype=torch.bfloat16).eval()
    b, L = 2, 37
    with torch.no_grad():
        out = model(input_ids=torch.randint(0, 128, (b, L)), use_cache=True, logits_to_keep=1)
    held = 0
    for layer in out.past_key_values.layers:
        for name in ("keys", "values", "conv_states", "recurrent_states"):
            value = getattr(layer, name, None)
            for t in (value.values() if isinstance(value, dict) else (value,)):
                if isinstance(t, torch.Tensor):
                    held += t.numel() * t.element_size()
    cache = deltanet_cache_from_hf_config({"model_type": "qwen3_next", **kw})
    assert cache.cache_bytes(batch=b, seq_len=L, es=2) == held
    default = deltanet_cache_from_hf_config({"model_type": "qwen3_next"})  # the issue's ~74 MiB + 24 KiB/token
    assert default.state_bytes_per_sequence(2) == 77_856_768 and default.kv_bytes_per_token(2) == 24_576
    with pytest.raises(ValueError, match=r"^model_type: .*74\.25 MiB per sequence \+ 24\.0 KiB per token"):
        hybrid_from_hf_config({"model_type": "qwen3_next"})
