"""The query-string round trip: every plan survives values → URL → values; bad parameters are named."""


from hypothesis import given, settings
from hypothesis import strategies as st

from ui import state

PRESETS = ("llama-3-8b", "llama-2-70b", "mistral-7b")


def test_defaults_round_trip():
    query = state.query_from_values(state.PLAN_DEFAULTS)
    assert "layers" not in query  # a preset plan carries the preset name, not the architecture
    values, errors = state.values_from_query(query, presets=PRESETS)
    assert errors == []
    assert values == state.PLAN_DEFAULTS


@settings(max_examples=60, deadline=None)
@given(seq_len=st.integers(1, 1 << 24), batch=st.integers(1, 4096), window=st.integers(0, 1 << 20),
       dtype=st.sampled_from(["float16", "bfloat16", "float32"]),
       kv_dtype=st.sampled_from(["bfloat16", "float8", "int8", "int4"]),
       mode=st.sampled_from(state.PLAN_MODES), backend=st.sampled_from(["auto", "math", "flash", "eager"]),
       layers=st.integers(1, 200), kv_heads=st.sampled_from([1, 2, 4, 8]), gated=st.booleans(),
       gpu=st.sampled_from(["h200", "a100-80gb", "l4"]), tp=st.integers(1, 8), zero=st.sampled_from([0, 1, 2, 3]),
       micro_batch=st.integers(0, 64), sp=st.booleans())
def test_custom_plan_round_trips(seq_len, batch, window, dtype, kv_dtype, mode, backend, layers, kv_heads, gated,
                                 gpu, tp, zero, micro_batch, sp):
    values = {**state.PLAN_DEFAULTS, "source": "custom", "seq_len": seq_len, "batch": batch, "window": window,
              "dtype": dtype, "kv_dtype": kv_dtype, "mode": mode, "backend": backend, "layers": layers,
              "kv_heads": kv_heads, "gated_ffn": gated, "gpu": gpu, "tp": tp, "zero": zero,
              "micro_batch": micro_batch, "sequence_parallel": sp}
    query = state.query_from_values(values)
    assert all(isinstance(v, str) for v in query.values())
    back, errors = state.values_from_query(query, presets=PRESETS)
    assert errors == []
    expected = {k: v for k, v in values.items() if k != "preset"}
    assert {k: v for k, v in back.items() if k != "preset"} == expected


def test_uploaded_config_travels_as_custom_architecture():
    values = {**state.PLAN_DEFAULTS, "source": "hf-config", "layers": 7}
    query = state.query_from_values(values)
    assert query["source"] == "custom" and query["layers"] == "7"


def test_bad_parameters_are_named_and_defaults_stand():
    values, errors = state.values_from_query({"seq_len": "lots", "gpu": "h300", "dtype": "fp8", "batch": "0",
                                              "preset": "gpt-9", "mode": "serving", "unrelated": "x", "zero": "4",
                                              "micro_batch": "-1"},
                                             presets=PRESETS)
    joined = "\n".join(errors)
    for key in ("seq_len", "gpu", "dtype", "batch", "preset", "mode", "zero", "micro_batch"):
        assert key in joined
    assert len(errors) == 8
    assert values["seq_len"] == state.PLAN_DEFAULTS["seq_len"] and values["gpu"] == "h200"


def test_aliases_are_normalised():
    values, errors = state.values_from_query({"dtype": "bf16", "gpu": "H100", "window": "none", "gated_ffn": "0"})
    assert errors == []
    assert (values["dtype"], values["gpu"], values["window"], values["gated_ffn"]) == ("bfloat16", "h100-sxm", 0,
                                                                                      False)


def test_call_round_trip_and_errors():
    values = {**state.CALL_DEFAULTS, "q_len": 1, "kv_len": 131072, "causal": False, "mask": "bool", "dropout": 0.1}
    back, errors = state.call_values_from_query(state.call_query_from_values(values))
    assert errors == [] and back == values
    _, errors = state.call_values_from_query({"dropout": "1.5", "mask": "sparse", "head_dim": "-3"})
    assert len(errors) == 3 and "dropout" in errors[0] + errors[1] + errors[2]


def test_form_defaults_are_the_plan_inputs_defaults_on_the_preset():
    """The form's defaults plan exactly PlanInputs' defaults for the default preset at its context, on the GPU
    the app opens with."""
    from estimator.model.inputs import PlanInputs
    from estimator.model.presets import get_preset

    preset = get_preset(state.DEFAULT_PRESET)
    assert state.plan_inputs(state.PLAN_DEFAULTS) == PlanInputs(model=preset, seq_len=preset.max_positions,
                                                                 gpu=state.DEFAULT_GPU)
    assert {k: state.PLAN_DEFAULTS[k] for k in state.ARCH_FIELDS} == state.arch_values(preset)
