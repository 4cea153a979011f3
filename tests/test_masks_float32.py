"""Structured masks (window:W, document:K) reach the call page and its share URL; a float32 KV cache reaches the
plan page and `?kv_dtype=float32` is planned as float32, like the CLI."""

from __future__ import annotations

import pytest

from estimator.call.attention import estimate_call
from estimator.call.config import AttentionCall
from estimator.hardware import get_gpu
from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.presets import get_preset
from estimator.units import gib
from ui import state


def test_structured_masks_round_trip_through_the_call_url():
    values, errors = state.call_values_from_query({"mask": "window:49", "causal": "1"})
    assert not errors and values["mask"] == "window" and values["mask_size"] == 49
    assert state.call_kwargs(values)["mask"] == "window:49"
    assert state.call_query_from_values(values)["mask"] == "window:49" and "mask_size" not in \
        state.call_query_from_values(values)
    docs, errors = state.call_values_from_query({"mask": "document:4"})
    assert not errors and state.call_kwargs(docs)["mask"] == "document:4"
    _, errors = state.call_values_from_query({"mask": "window:0"})
    assert errors and "mask" in errors[0]
    with pytest.raises(ValueError, match="mask_size"):
        state.call_kwargs({**state.CALL_DEFAULTS, "mask": "window", "mask_size": 0})


def page(path: str, query: dict):
    from tests.test_app_pages import page_alone

    return page_alone(path, query)


def test_call_page_estimates_a_window_mask_from_the_url():
    at = page("pages/call.py", {"mask": "window:49", "causal": "1", "backend": "flex", "q_len": "4096",
                                "kv_len": "4096"})
    assert not at.error and not at.warning, ([e.value for e in at.error], [w.value for w in at.warning])
    assert at.selectbox(key="call_mask").value == "window" and at.number_input(key="call_mask_size").value == 49
    expected = estimate_call(AttentionCall(**{**state.call_kwargs({**state.CALL_DEFAULTS, "mask": "window",
                                                                    "mask_size": 49, "backend": "flex"}),
                                             "q_len": 4096, "kv_len": 4096}), get_gpu("h200"), "2.11")
    assert next(m.value for m in at.metric if m.label == "backend that runs") == expected.selected_backend
    assert at.query_params["mask"] in ("window:49", ["window:49"])


def test_flex_why_not_names_only_what_the_call_page_offers():
    at = page("pages/call.py", {"mask": "bool", "causal": "0"})
    mask_options = at.selectbox(key="call_mask").options
    text = " ".join(str(v) for t in at.table for v in t.value.to_numpy().ravel())
    assert "window:W" in text  # the flex row's reason points at the structured masks, and the page offers both
    assert {"window", "document"} <= set(mask_options)


def test_plan_page_offers_and_honours_a_float32_kv_cache():
    query = {"preset": "qwen2.5-7b", "dtype": "float32", "kv_dtype": "float32", "gpu": "rtx-4090", "seq_len": "1000",
             "batch": "3"}
    from tests.test_app_pages import app

    at = app(query=query)
    assert "float32" in at.selectbox(key="plan_kv_dtype").options
    assert at.selectbox(key="plan_kv_dtype").value == "float32"
    cli = make_plan(PlanInputs(model=get_preset("qwen2.5-7b"), dtype="float32", gpu="rtx-4090", seq_len=1000,
                               batch=3), solve=False)
    assert cli.inputs.kv_dtype == "float32"
    assert next(m.value for m in at.metric if m.label == "total per GPU") == gib(cli.total_bytes,
                                                                                  mib_below_1gib=False)


@pytest.mark.parametrize("preset, n, batch, window, backend", [("vit-l-16", 4096, 8, 49, "auto"),
                                                               ("mistral-7b", 8192, 1, 4096, "auto"),
                                                               ("mistral-7b", 8192, 1, 4096, "flex"),
                                                               ("llama-3-8b", 8192, 1, None, "auto")])
def test_the_call_the_plan_page_shows_is_the_one_the_plan_prices(preset, n, batch, window, backend):
    """A window through SDPA is the dense bool-masked (n x n) call: the page shows that call, whose backend is the
    plan's, not a (n x window) band that another backend would run."""
    from estimator.model.layer_attention import priced_attention_call

    inputs = PlanInputs(model=get_preset(preset), seq_len=n, batch=batch, window=window, backend=backend, gpu="h200")
    plan = make_plan(inputs, solve=False)
    call = priced_attention_call(inputs)
    assert estimate_call(call, get_gpu("h200"), inputs.torch_version).selected_backend == plan.selected_backend


def test_plan_page_window_call_is_the_masked_one():
    from tests.test_app_pages import app, plain

    at = app(query={"preset": "vit-l-16", "seq_len": "4096", "batch": "8", "window": "49", "gpu": "h200"})
    text = " ".join(plain(m.value) for m in at.markdown)
    assert "k/v (8, 16, 4096, 64)" in text and "bool mask" in text
