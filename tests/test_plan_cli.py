"""`python -m estimator plan`: contract §3 keys, the table, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from estimator.cli.plan import main

DATA = Path(__file__).parent / "data"
CONTRACT_KEYS = ("params weights_bytes kv_cache_bytes kv_cache_bytes_per_token attention_scores_bytes "
                 "activation_bytes gradient_bytes optimizer_bytes total_bytes capacity_bytes fits max_seq_len "
                 "max_batch prefill_flops decode_flops_per_token prefill_time_ms decode_time_ms_per_token "
                 "attention_share ffn_share embedding_share selected_backend").split()
BYTE_KEYS = [k for k in CONTRACT_KEYS if k.endswith("_bytes") or k.endswith("_per_token") and "bytes" in k]


def run_json(capsys, *argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_every_contract_key(capsys):
    out = run_json(capsys, "--preset", "llama-3-8b", "--seq-len", "8192", "--batch", "4", "--gpu", "h100-sxm")
    missing = [k for k in CONTRACT_KEYS if k not in out]
    assert not missing
    for key in BYTE_KEYS + ["params", "max_seq_len", "max_batch", "prefill_flops"]:
        assert isinstance(out[key], int) and not isinstance(out[key], bool), key
    assert out["kv_cache_bytes_per_token"] == 131_072
    assert out["kv_cache_bytes"] == 131_072 * 8192 * 4
    assert out["params"] == 8_030_261_248
    assert out["fits"] is True and out["max_seq_len"] >= 8192 and out["max_batch"] >= 4


@pytest.mark.parametrize("argv", [
    ["--preset", "llama-2-70b", "--seq-len", "4096", "--kv-dtype", "int4", "--gpus", "8", "--tp", "8"],
    ["--preset", "mistral-7b", "--seq-len", "65536", "--cp", "2", "--gpu", "a100-80gb"],
    ["--preset", "vit-l-16", "--seq-len", "4097", "--batch", "16", "--backend", "math", "--gpu", "a100-40gb"],
    ["--preset", "llama-2-7b", "--seq-len", "4096", "--mode", "training", "--checkpointing", "selective"],
    ["--preset", "llama-3-70b", "--seq-len", "8192", "--batch", "64", "--mode", "training", "--checkpointing",
     "selective", "--gpu", "h100-sxm", "--gpus", "64", "--tp", "8", "--sequence-parallel", "--zero", "1",
     "--micro-batch", "1"],
    ["--layers", "12", "--hidden", "768", "--heads", "12", "--ffn", "3072", "--vocab", "50257", "--plain-ffn",
     "--tied", "--seq-len", "1024"],
    ["--config", str(DATA / "gemma-2-9b.config.json"), "--seq-len", "8192", "--window", "1024"],
])
def test_varied_plans_produce_the_contract(capsys, argv):
    out = run_json(capsys, *argv)
    assert all(k in out for k in CONTRACT_KEYS)
    assert out["total_bytes"] == sum(c["bytes"] for c in out["components"])


def test_architecture_flags_count_parameters(capsys):
    # GPT-2-small-like shape from flags: tied embedding + 12·(attention 4·768² + MLP 2·768·3072 + 2 RMSNorm) + final
    # norm. (The real GPT-2 adds biases, LayerNorm biases and a learned position table: 124,439,808.)
    out = run_json(capsys, "--layers", "12", "--hidden", "768", "--heads", "12", "--ffn", "3072", "--vocab", "50257",
                   "--plain-ffn", "--tied", "--seq-len", "1024")
    assert out["params"] == 50257 * 768 + 12 * (4 * 768**2 + 2 * 768 * 3072 + 2 * 768) + 768


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_table_output(capsys):
    assert main(["--preset", "llama-3-8b", "--seq-len", "8192", "--smallest-gpu",
                 "--trace", str(DATA / "trace.csv")]) == 0
    text = capsys.readouterr().out
    for needle in ("memory per GPU", "kv cache", "capacity", "GiB", "decode", "largest seq_len", "P99",
                   "assumptions", "fits on"):
        assert needle in text, needle


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_json_with_trace_and_gpu_choices(capsys):
    out = run_json(capsys, "--preset", "llama-3-8b", "--seq-len", "8192", "--trace", str(DATA / "trace.csv"),
                   "--smallest-gpu")
    assert out["trace"]["percentiles"]["p99"]["seq_len"] == 9900
    assert out["gpu_choices"] and out["gpu_choices"][0]["gpus"] >= 1


@pytest.mark.parametrize("argv, message", [
    (["--preset", "gpt-9", "--seq-len", "10"], "--preset: unknown model 'gpt-9'"),
    (["--preset", "llama-2-7b", "--seq-len", "ten"], "--seq-len: expected a positive integer"),
    (["--preset", "llama-2-7b"], "--seq-len: required"),
    (["--preset", "llama-2-7b", "--seq-len", "10", "--tp", "3"], "--tp: 3 does not divide the 32 query heads"),
    (["--preset", "llama-2-7b", "--seq-len", "10", "--kv-heads", "5"], "--kv-heads: q_heads (32) must be divisible"),
    (["--preset", "llama-2-7b", "--seq-len", "10", "--gpu", "h300"], "--gpu: unknown GPU 'h300'"),
    (["--preset", "llama-2-7b", "--seq-len", "10", "--kv-dtype", "int3"], "--kv-dtype: unknown dtype"),
    (["--layers", "2", "--hidden", "64", "--seq-len", "10"], "missing --heads, --ffn, --vocab"),
    (["--config", str(DATA / "malformed.config.json"), "--seq-len", "10"], "is not valid JSON"),
    (["--preset", "llama-2-7b", "--seq-len", "10", "--trace", str(DATA / "trace_bad_column.csv")], "no column"),
    (["--preset", "llama-2-7b", "--seq-len", "10", "--mode", "serve"], "--mode: unknown value 'serve'"),
    (["--preset", "llama-2-7b", "--seq-len", "10", "--no-such-flag"], "unrecognized arguments"),
    (["--preset", "llama-2-7b", "--seq-len", "10", "--torch", "1.0"], "--torch: unknown version '1.0'"),
    (["--preset", "llama-2-7b", "--seq-len", "10", "--zero", "5"], "--zero: expected a ZeRO stage"),
    (["--preset", "llama-2-7b", "--seq-len", "10", "--micro-batch", "0"], "--micro-batch: must be at least 1"),
    (["--preset", "llama-2-7b", "--seq-len", "10", "--gpus", "3", "--tp", "2"], "--gpus: 3 is not a multiple"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        code = main(argv)
        raise SystemExit(code)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_contract_command_runs_in_a_fresh_interpreter():
    root = Path(__file__).parent.parent
    result = subprocess.run([sys.executable, "-m", "estimator", "plan", "--preset", "llama-3-8b", "--seq-len", "4096",
                             "--json"], capture_output=True, text=True, cwd=root, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["kv_cache_bytes_per_token"] == 131_072
    bad = subprocess.run([sys.executable, "-m", "estimator", "plan", "--preset", "nope", "--seq-len", "1"],
                         capture_output=True, text=True, cwd=root, timeout=120)
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1


def test_plan_modules_import_no_torch_or_ui():
    code = ("import sys, estimator.model.plan, estimator.cli.plan, estimator.model.solve, estimator.model.trace; "
            "print(sorted(m for m in ('torch', 'streamlit', 'plotly') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=Path(__file__).parent.parent, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_encoder_config_defaults_to_its_native_tokens(capsys):
    out = run_json(capsys, "--config", str(DATA / "vit-large-patch16-224.config.json"), "--batch", "4")
    assert out["inputs"]["seq_len"] == 197 and out["params"] == 304_326_632
    assert out["kv_cache_bytes"] == 0 and out["decode_time_ms_per_token"] is None


def test_vit_document_case_runs_out_on_math_but_not_on_a_fused_kernel(capsys):
    # a document-classification ViT at 4,096 patches OOMs in attention on the math path
    argv = ["--preset", "vit-l-16", "--seq-len", "4097", "--batch", "32", "--mode", "training", "--gpu", "a100-80gb"]
    math = run_json(capsys, *argv, "--backend", "math")
    fused = run_json(capsys, *argv)
    assert not math["fits"] and math["attention_scores_bytes"] > 0
    assert fused["attention_scores_bytes"] == 0 and fused["total_bytes"] < math["total_bytes"] / 5


def test_flag_defaults_are_the_plan_inputs_defaults():
    """Every PlanInputs default has one home: the parser's defaults are PlanInputs' own."""
    from estimator.cli.plan import build_parser
    from estimator.model.inputs import PLAN_INPUT_DEFAULTS

    args = vars(build_parser().parse_args([]))
    assert {name: args[name] for name in PLAN_INPUT_DEFAULTS} == PLAN_INPUT_DEFAULTS
