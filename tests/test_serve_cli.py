"""`python -m estimator serve` (docs/contract.md §6): the keys, the targets and sizing, one-line errors (exit 2)."""

from __future__ import annotations

import json

import pytest

from estimator.__main__ import main

KEYS = ("kv_cache_bytes", "kv_cache_tokens", "num_blocks", "block_size", "max_batch_tokens", "peak_bytes",
        "throughput_output_tokens_per_s", "throughput_tokens_per_s", "ttft_ms", "tpot_ms", "e2e_ms")
SYNTH = ["--rate", "6", "--requests", "60", "--prompt-tokens", "uniform:64:800", "--output-tokens", "32"]


def run(capsys, *argv):
    code = main(["serve", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("engine", ["hf-cb", "vllm", "sglang", "trtllm"])
def test_json_has_every_contract_key(capsys, engine):
    code, out, _ = run(capsys, "--preset", "llama-3-8b", "--gpu", "h200", "--engine", engine, *SYNTH, "--json")
    assert code == 0
    data = json.loads(out)
    for key in KEYS:
        assert key in data
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert set(data[key]) == {"p50", "p90", "p99"}
    assert "meets_targets" not in data


def test_targets_add_meets_targets_and_sizing(capsys):
    code, out, _ = run(capsys, "--preset", "llama-3-8b", "--gpu", "h200", "--engine", "vllm", *SYNTH,
                       "--ttft-p99-ms", "2000", "--tpot-p99-ms", "100", "--price-per-gpu-hour", "3.5", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["meets_targets"] is True
    sizing = data["sizing"]
    assert sizing["gpus"] >= 1 and sizing["max_rate_per_replica"] >= 6
    assert sizing["cost_per_million_output_tokens"] > 0


def test_no_price_no_cost(capsys):
    code, out, _ = run(capsys, "--preset", "llama-3-8b", "--gpu", "h200", "--engine", "vllm", *SYNTH,
                       "--ttft-p99-ms", "2000", "--json")
    assert "cost_per_million_output_tokens" not in json.loads(out)["sizing"]


def test_a_target_below_the_floor_says_so(capsys):
    code, out, _ = run(capsys, "--preset", "llama-3-8b", "--gpu", "h200", "--engine", "vllm", *SYNTH,
                       "--ttft-p99-ms", "0.01", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["meets_targets"] is False
    assert data["sizing"]["verdict"] == "no configuration of this GPU and tp meets the targets"


def test_workload_csv_and_requests_csv(capsys, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,5\n0.1,200,3\n0.2,50,1\n")
    rows = tmp_path / "rows.csv"
    code, out, _ = run(capsys, "--preset", "llama-3-8b", "--gpu", "h200", "--workload", str(trace),
                       "--requests-csv", str(rows), "--json")
    assert code == 0
    lines = rows.read_text().splitlines()
    assert lines[0].startswith("request,arrival_s,prompt_tokens,output_tokens,first_token_s,finish_s")
    assert len(lines) == 4
    assert "requests" not in json.loads(out)


@pytest.mark.parametrize("argv, flag", [
    (["--rate", "0", "--prompt-tokens", "10", "--output-tokens", "5"], "--rate"),
    (["--rate", "1", "--prompt-tokens", "-10", "--output-tokens", "5"], "--prompt-tokens"),
    (["--rate", "1", "--prompt-tokens", "10"], "--workload"),
    (["--rate", "1", "--prompt-tokens", "10", "--output-tokens", "5", "--engine", "tgi"], "--engine"),
    (["--rate", "1", "--prompt-tokens", "10", "--output-tokens", "5", "--memory-fraction", "1.5"],
     "--memory-fraction"),
    (["--rate", "1", "--prompt-tokens", "10", "--output-tokens", "5", "--scheduler", "lpm"], "--scheduler"),
    (["--rate", "1", "--prompt-tokens", "10", "--output-tokens", "5", "--ttft-p99-ms", "-3"], "--ttft-p99-ms"),
    (["--rate", "1", "--prompt-tokens", "10", "--output-tokens", "5", "--max-model-len", "8"], "--max-model-len"),
    (["--rate", "1", "--prompt-tokens", "10", "--output-tokens", "5", "--price-per-gpu-hour", "x"],
     "--price-per-gpu-hour"),
    (["--rate", "1", "--prompt-tokens", "10", "--output-tokens", "5", "--block-size", "2"], "--block-size"),
    (["--rate", "1", "--prompt-tokens", "10", "--output-tokens", "5", "--kv-dtype", "float8"], "--kv-dtype"),
])
def test_bad_input_is_one_line_naming_the_flag(capsys, argv, flag):
    code, out, err = run(capsys, "--preset", "llama-3-8b", "--gpu", "h200", *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {flag}:"), err


def test_unsorted_csv_names_the_line(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n1,100,5\n0.5,200,3\n")
    code, _, err = run(capsys, "--preset", "llama-3-8b", "--workload", str(trace))
    assert code == 2 and "line 3: arrival_s" in err and err.count("\n") == 1


def test_weights_too_big_for_the_gpu(capsys):
    code, _, err = run(capsys, "--preset", "llama-3-70b", "--gpu", "l4", *SYNTH)
    assert code == 2 and err.startswith("error: --gpu:") and err.count("\n") == 1
