"""Uploaded files, read defensively: a size limit per kind of file (below the server's 5 MiB cap), and every
failure of a reader (bad encoding, malformed JSON, nesting too deep, an integer too long, a field too large)
turned into one ValueError line that the page shows. Pure apart from the uploaded object's getvalue()/name/size.
"""

from __future__ import annotations

from ui.text import one_line

CONFIG_MAX_BYTES = 1 << 20  # a Hugging Face config.json is a few KiB
CSV_MAX_BYTES = 5 << 20  # traces and validation results (the server's own limit, .streamlit/config.toml)
_READ_ERRORS = (ValueError, TypeError, OverflowError, RecursionError, KeyError, IndexError, AttributeError)


def read_bytes(uploaded, limit: int, what: str) -> bytes:
    """The file's bytes, or ValueError when it is larger than `limit`."""
    size = getattr(uploaded, "size", None)
    data = uploaded.getvalue()
    size = len(data) if size is None else size
    if size > limit or len(data) > limit:
        raise ValueError(f"{what}: the file is {len(data) / 2**20:,.2f} MiB; the limit is {limit / 2**20:,.0f} MiB")
    return data


def config_name(file_name: str) -> str:
    """A model name from a file name: the stem, printable characters only, at most 80."""
    stem = file_name.rsplit("/", 1)[-1].removesuffix(".json")
    return "".join(ch for ch in stem if ch.isprintable())[:80] or "config"


def config_spec(uploaded):
    """A ModelSpec from an uploaded config.json; ValueError (one line, naming `config`) on anything wrong."""
    from ui.state import spec_from_config_bytes

    data = read_bytes(uploaded, CONFIG_MAX_BYTES, "config")
    try:
        return spec_from_config_bytes(data, name=config_name(uploaded.name))
    except _READ_ERRORS as exc:
        text = one_line(exc)
        if isinstance(exc, RecursionError):
            text = "the JSON is nested too deeply"
        raise ValueError(text if text.startswith("config") else f"config: {text}") from None


def config_dict(uploaded) -> dict:
    """The uploaded config.json as a dict (after `config_spec` has read it: the same bytes, the same limit)."""
    import json

    data = read_bytes(uploaded, CONFIG_MAX_BYTES, "config")
    try:
        value = json.loads(data.decode("utf-8-sig"))  # a BOM is accepted, as estimator/model/hf_config.py does
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"config: {one_line(exc)}") from None
    if not isinstance(value, dict):
        raise ValueError("config: expected a JSON object at the top level")
    return value


def config_dict_or_none(uploaded) -> dict | None:
    """`config_dict`, or None where the upload cannot be read as a JSON object (the ordinary upload path then
    reports why in one line): how the image and hybrid views look at an upload to see whether it is theirs."""
    try:
        return config_dict(uploaded)
    except (*_READ_ERRORS, ValueError):
        return None
