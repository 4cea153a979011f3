"""The web side's readers: an upload is bytes, never a path; one config reader for the command line and the web
(a byte-order mark accepted by both); a gemma3 `text_config` read with Gemma3TextConfig's defaults and said to be
text-only; absurd numbers refused naming the field; user text escaped in every chart label."""

from __future__ import annotations

import json
import os
import threading

import pandas as pd
import pytest

from estimator.model import hf_config
from estimator.model.hf_config import from_hf_config
from ui import figures
from ui.state import spec_from_config_bytes

LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
         "intermediate_size": 128, "vocab_size": 100}


def test_a_json_string_upload_is_not_a_path(tmp_path):
    """An upload whose content is the JSON string of a server path must not plan that file, and the error must
    not depend on whether the path exists."""
    real = tmp_path / "config.json"
    real.write_text(json.dumps(LLAMA))
    errors = []
    for target in (str(real), str(tmp_path / "missing.json"), "/dev/zero"):
        with pytest.raises(ValueError) as exc:
            spec_from_config_bytes(json.dumps(target).encode(), name="upload")
        errors.append(str(exc.value))
    assert errors[0] == errors[1] == errors[2] == "config: expected a JSON object at the top level, got a string"


def test_a_fifo_named_by_an_upload_is_never_opened(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    result: list = []

    def upload() -> None:
        try:
            spec_from_config_bytes(json.dumps(str(fifo)).encode())
        except ValueError as exc:
            result.append(str(exc))

    worker = threading.Thread(target=upload, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the reader so that the test process can exit, then fail
        with open(fifo, "wb"):
            pass
        pytest.fail("the upload opened the FIFO it named")
    assert result and "expected a JSON object" in result[0]


@pytest.mark.parametrize("data, kind", [(b"[1, 2]", "an array"), (b"12", "a number"), (b"null", "null"),
                                        (b"true", "true or false")])
def test_a_document_that_is_not_an_object_is_one_line(data, kind):
    with pytest.raises(ValueError, match=f"^config: expected a JSON object at the top level, got {kind}$"):
        hf_config.from_hf_config_bytes(data)


def test_a_bom_config_is_read_alike_on_the_web_and_the_command_line(tmp_path):
    data = b"\xef\xbb\xbf" + json.dumps(LLAMA).encode()
    path = tmp_path / "bom" / "config.json"
    path.parent.mkdir()
    path.write_bytes(data)
    web = spec_from_config_bytes(data, name="bom")
    cli = from_hf_config(path)
    assert (web.layers, web.hidden, web.vocab) == (cli.layers, cli.hidden, cli.vocab) == (2, 64, 100)


def test_a_5000_digit_integer_names_its_field_not_pythons_limit():
    data = b'{"model_type": "llama", "num_hidden_layers": ' + b"9" * 5000 + b"}"
    with pytest.raises(ValueError) as exc:
        spec_from_config_bytes(data)
    text = str(exc.value)
    assert text == "config num_hidden_layers: an integer of 5,000 digits; expected at most 30"
    assert "set_int_max_str_digits" not in text and "\n" not in text


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_non_finite_numbers_are_refused_by_name(literal):
    with pytest.raises(ValueError, match="^config rope_theta: .*expected a finite number$"):
        hf_config.parse_hf_config_bytes(b'{"rope_theta": ' + literal + b"}")


def test_a_long_integer_inside_a_list_names_its_key():
    with pytest.raises(ValueError, match="^config eos_token_id: an integer of 40 digits"):
        hf_config.parse_hf_config_bytes(b'{"eos_token_id": [1, ' + b"7" * 40 + b"]}")


def test_gemma3_multimodal_config_reads_its_text_config_and_says_text_only():
    """google/gemma-3-4b-it's config.json lists in text_config only what differs from Gemma3TextConfig's defaults
    (no head counts); the vision tower is not planned, and the spec says so."""
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
           "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                           "num_hidden_layers": 34, "sliding_window": 1024},
           "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}}
    spec = hf_config.from_hf_config_bytes(json.dumps(cfg).encode(), name="gemma-3-4b-it")
    assert (spec.layers, spec.hidden, spec.q_heads, spec.kv_heads, spec.head_dim) == (34, 2560, 8, 4, 256)
    assert hf_config.TEXT_ONLY_NOTE in spec.source
    bare = hf_config.from_hf_config_bytes(json.dumps({"model_type": "gemma3", "text_config": {}}).encode())
    assert bare.layers == 26 and hf_config.TEXT_ONLY_NOTE not in bare.source  # no vision_config: nothing left out


def test_a_text_only_config_says_nothing_of_a_vision_tower():
    assert hf_config.TEXT_ONLY_NOTE not in hf_config.from_hf_config_bytes(json.dumps(LLAMA).encode()).source


# --- chart labels ------------------------------------------------------------------------------------------------

LINK = '<a href="https://evil.example/">click</a>'


def _labels(fig) -> list[str]:
    out = [fig.layout.title.text or ""]
    for trace in fig.data:
        out += [str(trace.name or ""), str(getattr(trace, "hovertemplate", "") or "")]
        out += [str(v) for v in (getattr(trace, "labels", None) or ())]
        out += [str(v) for v in (trace.x if trace.type == "bar" else ())]
    return out


def _assert_inert(fig) -> None:
    for text in _labels(fig):
        assert "<a" not in text and "href=" not in text.replace("href=&quot;", ""), text
        assert "%{user" not in text, text


def test_a_csv_backend_cell_is_not_a_live_link_in_the_legend():
    table = pd.DataFrame({"backend": [LINK, "%{user}"], "measured_peak_extra_bytes": [2 << 20, 3 << 20],
                          "peak_extra_bytes": [2 << 20, 3 << 20]})
    fig = figures.measured_vs_predicted(table)
    _assert_inert(fig)
    assert "&lt;a href=&quot;https://evil.example/&quot;&gt;click&lt;/a&gt;" in [t.name for t in fig.data]
    assert "&#37;{user}" in [t.name for t in fig.data]


def test_every_figure_escapes_the_text_it_is_given():
    sweep = pd.DataFrame({"n": [1024, 2048], "backend": [LINK, LINK], "total_bytes": [1 << 30, None],
                          "error": [None, f"cannot run: {LINK}"]})
    _assert_inert(figures.memory_vs_n(sweep, capacity_bytes=80 << 30, capacity_label=LINK, title=LINK))
    _assert_inert(figures.budget_breakdown([(LINK, 1 << 30)], capacity_bytes=80 << 30, capacity_label=LINK,
                                           title=LINK))
    _assert_inert(figures.shares({LINK: 0.5}, title=LINK))
    _assert_inert(figures.percentile_bars(pd.DataFrame({"percentile": [LINK], "v": [1.0]}), value="v", title=LINK,
                                          unit=LINK))
