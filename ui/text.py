"""Text as the pages show it: escaping of anything user-supplied, human field names, times, plurals.

Pure functions (no Streamlit). Streamlit renders Markdown (links, images, `:red[...]` directives, LaTeX) in
st.markdown, st.error, st.warning, st.success, st.info, st.caption and widget labels, so every string that can
carry user input (URL parameters, file names, a config's values echoed in an error) goes through `md` first.
"""

from __future__ import annotations

import html
import re

from validation.errors import first_line as one_line  # noqa: F401 - the pages' name for it; its home is validation/errors.py

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&=\"'^%@])")


_AUTOLINK = re.compile(r"(?i)(://|www\.|@)")
_ZWSP = "\u200b"  # zero-width space: GFM's autolink literals (https://..., www., e-mail) cannot form across it


def md(text: object) -> str:
    """Plain text that Streamlit's Markdown shows literally: every Markdown/HTML punctuation backslash-escaped
    (a link, an image, a directive or a tag cannot form), bare URLs and e-mail addresses broken by a zero-width
    space (GFM would autolink them despite the escapes), newlines kept as spaces."""
    plain = " ".join(str(text).split())
    plain = _AUTOLINK.sub(lambda m: m.group(1)[0] + _ZWSP + m.group(1)[1:], plain)
    return _MD_SPECIAL.sub(r"\\\1", plain)


def html_text(text: object) -> str:
    """For the few places that take HTML (graph labels): entities."""
    return html.escape(str(text), quote=True)


def chart_text(text: object) -> str:
    """Text for a Plotly label, legend entry, title or hover template, shown literally: Plotly renders a subset of
    HTML in them (<a href>, <b>, <br>, <span style>) and decodes entities after it has split the tags, so `<`, `>`,
    `&` and quotes become entities; `%` becomes &#37; so that a hover template does not read `%{...}` in it as a
    field (plotly.js src/lib/svg_text_utils.js and hovertemplateString)."""
    return html_text(text).replace("%", "&#37;")


def plural(count: int, word: str, plural_word: str | None = None) -> str:
    """'1 request', '2 requests', '1,024 requests'."""
    return f"{count:,} {word if count == 1 else (plural_word or word + 's')}"


def duration(ms: float | None) -> str:
    """Milliseconds as people read them: '0.052 ms', '12.3 ms', '4,567 ms', '12.3 s' past 10 s, '3.1 min'
    past 10 minutes, '2.5 h' past 2 hours."""
    if ms is None or ms != ms:
        return "—"
    if ms >= 2 * 3600e3:
        return f"{ms / 3600e3:,.1f} h"
    if ms >= 600e3:
        return f"{ms / 60e3:,.1f} min"
    if ms >= 10e3:
        return f"{ms / 1e3:,.1f} s"
    if ms >= 1:
        return f"{ms:,.1f} ms"
    return f"{ms:,.3f} ms"


FIELD_NAMES = {
    "decode_time_ms_per_token": "decode time per token", "prefill_time_ms": "prefill time",
    "step_time_ms": "training step time", "total_bytes": "total memory per GPU", "kv_cache_bytes": "KV cache",
    "activation_bytes": "activations", "weights_bytes": "weights", "gradient_bytes": "gradients",
    "optimizer_bytes": "optimizer state", "attention_scores_bytes": "attention scores",
    "peak_extra_bytes": "peak extra memory", "max_seq_len": "largest n that fits", "max_batch": "largest batch",
    "seq_len": "sequence length n", "kv_dtype": "KV-cache dtype", "micro_batch": "micro-batch",
    "time_ms": "time", "q_len": "query length", "kv_len": "key length", "head_dim": "head dimension",
}
_FIELD = re.compile(r"\b(" + "|".join(sorted(map(re.escape, FIELD_NAMES), key=len, reverse=True)) + r")\b")
_SAME = re.compile(r"(\d[\d,]*(?:\.\d+)?\s?(?:GiB|MiB|ms|s|min|h|bytes|tokens)?)\s*(?:→|->)\s*\1(?![\d.,])")


def human(text: str) -> str:
    """Field identifiers replaced by their names; 'X → X' (no change) written as 'unchanged at X'."""
    text = _FIELD.sub(lambda m: FIELD_NAMES[m.group(1)], str(text))
    text = re.sub(r"\bper GPU(?: per GPU)+\b", "per GPU", text)  # 'total_bytes per GPU' names its unit twice
    return _SAME.sub(r"unchanged at \1", text)


def changed(before, after) -> bool:
    """Whether a before/after pair shows a change worth printing."""
    return before is not None and after is not None and before != after
