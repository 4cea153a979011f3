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
