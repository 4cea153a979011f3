"""One-line errors (exit 2) and per-row errors for the inputs that used to give tracebacks or wrong answers:
predict's reader (property tests), bounded file reads, HF config booleans, streaming, the replay memo."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from estimator.call import attention
from estimator.call.shapes import Calls
from estimator.cli.predict import MAX_FIELD_CHARS, main, predict_file
from estimator.hardware import get_gpu
from estimator.model.hf_config import from_hf_config
from estimator.model.trace import load_trace
from estimator.textfile import json_depth, parse_json_limited

HEADER = "id,backend,dtype,batch,q_heads,kv_heads,head_dim,q_len,kv_len,causal,mask,dropout,mode"
GOOD = "a,auto,bfloat16,2,16,16,128,1024,1024,0,none,0.0,forward"
UNSUPPORTED = "u,flash,float32,1,8,8,64,128,128,0,none,0.0,forward"


def run(tmp_path, capsys, data: bytes, *extra):
    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_bytes(data)
    rc = main([str(src), "-o", str(dst), "--gpu", "h200", *extra])
    return rc, capsys.readouterr().err, (dst.read_bytes() if dst.exists() else b"")


def rows_of(out: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(out.decode())))


def one_line_error(rc, err, needle):
    assert rc == 2 and err.startswith("error:") and err.strip().count("\n") == 0 and needle in err, err


def test_duplicate_columns_are_one_line_error(tmp_path, capsys):
    one_line_error(*run(tmp_path, capsys, f"{HEADER},batch\n{GOOD},3\n".encode())[:2], "duplicate column")


def test_overlong_field_is_that_rows_error(tmp_path, capsys):
    rc, _, out = run(tmp_path, capsys, f"{HEADER}\n{GOOD}\nb{'x' * (MAX_FIELD_CHARS + 1)},{GOOD[2:]}\n".encode())
    rows = rows_of(out)
    assert rc == 0 and rows[0]["error"] == "" and "longer than" in rows[1]["error"]


@pytest.mark.parametrize("target", ["missing/out.csv", "."])
def test_output_to_a_missing_folder_or_a_folder(tmp_path, capsys, target):
    (tmp_path / "in.csv").write_text(f"{HEADER}\n{GOOD}\n")
    rc = main([str(tmp_path / "in.csv"), "-o", str(tmp_path / target), "--gpu", "h200"])
    one_line_error(rc, capsys.readouterr().err, "-o")


def test_output_to_a_full_disk(tmp_path, capsys):
    (tmp_path / "in.csv").write_text(f"{HEADER}\n{GOOD}\n")
    one_line_error(main([str(tmp_path / "in.csv"), "-o", "/dev/full", "--gpu", "h200"]), capsys.readouterr().err,
                   "No space left")


def test_endless_input_stops_at_the_line_limit(capsys):
    one_line_error(main(["/dev/zero", "-o", "/dev/null", "--gpu", "h200"]), capsys.readouterr().err, "longer than")


def test_non_utf8_byte_is_that_rows_error(tmp_path, capsys):
    rc, _, out = run(tmp_path, capsys, f"{HEADER}\n{GOOD}\n".encode() + b"b\xff,auto" + GOOD[6:].encode() + b"\n")
    rows = rows_of(out)
    assert rc == 0 and rows[0]["error"] == "" and rows[0]["supported"] == "true"
    assert "not UTF-8" in rows[1]["error"] and rows[1]["id"] == "b\ufffd"


def test_bom_with_a_bad_row_keeps_the_columns(tmp_path, capsys):
    rc, _, out = run(tmp_path, capsys, f"\ufeff{HEADER}\n{GOOD}\nshort,row\n".encode())
    rows = rows_of(out)
    assert rc == 0 and rows[0]["supported"] == "true" and "expected 13 fields" in rows[1]["error"]


def test_user_column_named_like_an_internal_one_is_copied(tmp_path, capsys):
    rc, _, out = run(tmp_path, capsys, f"{HEADER},__row_error__\n{GOOD},mine\n".encode())
    assert rc == 0 and rows_of(out)[0]["__row_error__"] == "mine"


def test_lf_throughout_and_unsupported_rows_have_empty_flops(tmp_path, capsys):
    rc, _, out = run(tmp_path, capsys, f"{HEADER}\n{GOOD}\n{UNSUPPORTED}\n".encode())
    assert rc == 0 and b"\r" not in out
    rows = rows_of(out)
    assert rows[0]["flops"] != "" and rows[1]["supported"] == "false" and rows[1]["flops"] == ""


def test_streaming_in_chunks_gives_the_same_rows(tmp_path):
    lines = [GOOD.replace("1024,1024", f"{n},{n}") for n in range(1000, 1100)] + ["bad,row"]
    src = tmp_path / "in.csv"
    src.write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    predict_file(src, tmp_path / "one.csv", "h200", chunk_rows=10_000)
    predict_file(src, tmp_path / "many.csv", "h200", chunk_rows=7)
    one, many = rows_of((tmp_path / "one.csv").read_bytes()), rows_of((tmp_path / "many.csv").read_bytes())
    assert one == many and len(one) == 101 and "expected 13 fields" in one[-1]["error"]


cells = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@given(rows=st.lists(st.lists(cells, min_size=0, max_size=16), max_size=6), bom=st.booleans())
def test_predict_never_raises_and_keeps_every_row(tmp_path_factory, rows, bom):
    tmp = tmp_path_factory.mktemp("p")
    buffer = io.StringIO()
    writer = csv.writer(buffer)  # \r\n line ends: a cell holding \r or \n is quoted
    writer.writerow(HEADER.split(","))
    writer.writerows(rows)
    src, dst = tmp / "in.csv", tmp / "out.csv"
    src.write_bytes((b"\xef\xbb\xbf" if bom else b"") + buffer.getvalue().encode())
    assert main([str(src), "-o", str(dst), "--gpu", "h200"]) == 0
    out = list(csv.reader(io.StringIO(dst.read_bytes().decode(), newline="")))
    body = [r for r in rows if r != []]  # csv writes an empty row as an empty line, which readers skip
    assert len(out) == len(body) + 1 and out[0][:13] == HEADER.split(",")
    assert all(len(r) == len(out[0]) for r in out)


@given(data=st.binary(max_size=300))
def test_predict_on_arbitrary_bytes_is_rows_or_one_line_error(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("b")
    src = tmp / "in.csv"
    src.write_bytes(HEADER.encode() + b"\n" + data)
    try:
        rc = main([str(src), "-o", str(tmp / "out.csv"), "--gpu", "h200"])
    except SystemExit as exc:  # pragma: no cover - argparse only
        rc = exc.code
    assert rc in (0, 2)


# --- bounded reads and JSON -----------------------------------------------------------------------------------


def test_config_and_trace_from_an_endless_file_are_refused():
    with pytest.raises(ValueError, match="not a regular file"):  # refused before a byte is read
        from_hf_config("/dev/zero")
    with pytest.raises(ValueError, match="not a regular file|larger than"):
        load_trace("/dev/zero")


@given(depth=st.integers(min_value=1, max_value=3000))
def test_json_depth_is_checked_before_parsing(depth):
    text = "[" * depth + "]" * depth
    assert json_depth(text) == depth
    if depth > 64:
        with pytest.raises(ValueError, match="nested deeper"):
            parse_json_limited(text, "config")
    else:
        parse_json_limited(text, "config")


@given(st.text(max_size=40))
def test_brackets_inside_strings_do_not_count(s):
    assert json_depth('{"k": ' + __import__("json").dumps(s) + "}") == 1


# --- HF config booleans ---------------------------------------------------------------------------------------

LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
         "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000}


@given(value=st.sampled_from([True, False, "true", "false", "True", "FALSE", " false "]))
def test_tie_and_bias_booleans_read_as_written(value):
    truth = value if isinstance(value, bool) else value.strip().lower() == "true"
    spec = from_hf_config({**LLAMA, "tie_word_embeddings": value, "attention_bias": value})
    assert spec.tied_embeddings is truth and spec.qkv_bias is truth and spec.out_bias is truth


@given(value=st.one_of(st.integers(), st.text().filter(lambda t: t.strip().lower() not in ("true", "false")),
                       st.lists(st.booleans(), max_size=2)))
def test_other_boolean_spellings_are_refused_by_name(value):
    with pytest.raises(ValueError, match="tie_word_embeddings: expected true or false"):
        from_hf_config({**LLAMA, "tie_word_embeddings": value})


# --- the replay memo ------------------------------------------------------------------------------------------


def test_replay_memo_gives_the_same_verdicts():
    n = 64
    i = np.int64
    c = Calls(B=np.full(n, 1, i), Hq=np.full(n, 8, i), Hk=np.full(n, 8, i), D=np.full(n, 128, i),
              L=np.array([1 << 17, 3 << 15] * (n // 2), dtype=i), S=np.array([1 << 17, 3 << 15] * (n // 2), dtype=i),
              bits=np.full(n, 16, i), bf16=np.ones(n, bool), causal=np.zeros(n, bool), mask_bool=np.zeros(n, bool),
              mask_float=np.zeros(n, bool), dropout=np.zeros(n), grad=np.zeros(n, bool))
    gpu = get_gpu("h200")
    attention._REPLAY_MEMO.clear()
    memo = attention.replay_fits_rows(c, "math", gpu)
    assert len(attention._REPLAY_MEMO) == 2
    attention._REPLAY_MEMO.clear()
    fresh = [attention.replay_fits_rows(c.take(np.array([r])), "math", gpu)[0] for r in (0, 1)]
    assert list(memo) == fresh * (n // 2)
