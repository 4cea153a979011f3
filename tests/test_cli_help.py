"""CLI help that works at every level, no Kineto start/stop lines on stderr, and a config's model named after its
file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from estimator.model.hf_config import from_hf_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args, timeout=300):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_estimator_help_exits_0_and_describes_every_subcommand():
    out = run("-m", "estimator", "--help")
    assert out.returncode == 0, out.stderr
    for command in ("predict", "plan", "advise", "serve"):
        assert any(line.strip().startswith(command + " ") for line in out.stdout.splitlines()), command
    bad = run("-m", "estimator", "bogus")
    assert bad.returncode == 2 and "unknown command 'bogus'" in bad.stderr


def test_validation_help_describes_all_its_subcommands():
    out = run("-m", "validation", "--help")
    assert out.returncode == 0
    description = out.stdout.split("positional arguments")[0]
    for command in ("run", "grid", "report", "model", "calibrate", "serve"):
        assert any(line.startswith(command + " ") for line in description.splitlines()), command


def test_filtered_stderr_drops_kineto_lines_and_keeps_the_rest():
    code = ("import os, sys\nfrom validation.native_stderr import filtered_stderr\n"
            "with filtered_stderr():\n"
            "    os.write(2, b'USDT:2026 SyncActivityProfilerHandler.cpp:52] profiler_start\\n')\n"
            "    print('kept', file=sys.stderr)\n"
            "    os.write(2, b'STAGE:2026 Completed Stage: Warm Up\\n')\n"
            "print('after', file=sys.stderr)\n")
    out = run("-c", code)
    assert out.returncode == 0 and out.stderr.split() == ["kept", "after"], out.stderr


@pytest.mark.slow
def test_validation_run_on_cpu_has_no_profiler_start_stop_lines(tmp_path):
    cases = tmp_path / "cases.csv"
    assert run("-m", "validation", "grid", "--kind", "cpu", "--out", str(cases)).returncode == 0
    lines = cases.read_text().splitlines()
    cases.write_text("\n".join(lines[:2]) + "\n")
    out = run("-m", "validation", "run", "--in", str(cases), "--out", str(tmp_path / "out.csv"), "--device", "cpu",
              timeout=600)
    assert out.returncode == 0, out.stderr
    assert "USDT" not in out.stderr and "profiler_start" not in out.stderr and "wrote" in out.stderr


def test_config_model_is_named_after_its_file(tmp_path):
    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100}
    folder = tmp_path / "some" / "dir"
    folder.mkdir(parents=True)
    (folder / "x.json").write_text(json.dumps(config))
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tiny.config.json").write_text(json.dumps(config))
    assert from_hf_config(folder / "x.json").name == "x"
    assert from_hf_config(folder / "tiny.config.json").name == "tiny"
    assert from_hf_config(folder / "config.json").name == "dir"  # a Hub checkout: the folder is the model
