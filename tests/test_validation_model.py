"""`python -m validation model --config/--preset` on the CPU path: a user's own config.json (families outside
validation/model/hf_configs.py), the plan's flags, the layer cut planned the same, the guard, refusals by flag,
rows equal to validation.hf_models', and the report that explains a miss."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from estimator.model.hf_config import from_hf_config
from estimator.model.presets import PRESETS, get_preset
from validation.cli import main as cli_main
from validation.model import own_model, own_plan, own_report
from validation.model.hf_configs import FAMILIES, dump_config
from validation.model.spec_configs import config_for_spec

# written as a user would: a small Qwen3 (q/k norms), a model_type no built-in family has
QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "vocab_size": 512, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
         "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
# a family transformers builds but the planner does not model
OLMO2 = {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 512,
         "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "pad_token_id": None, "bos_token_id": None,
         "eos_token_id": None}


def _write(tmp_path, cfg, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(cfg, indent=2))
    return str(path)


def _row(path):
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1
    return rows[0]


def test_user_config_outside_the_families_trains_cut_and_planned_for_the_cut(tmp_path, capsys):
    assert "qwen3" not in {c["model_type"] for c in FAMILIES.values()}
    out = tmp_path / "out.csv"
    rc = cli_main(["model", "--config", _write(tmp_path, QWEN3), "--layers", "2", "--seq-len", "32",
                   "--mode", "training", "--precision", "32-true", "--optimizer", "sgd", "--out", str(out)])
    row = _row(out)
    assert rc == 0, row.get("reason")
    assert row["status"] == "ok" and row["mode"] == "train" and row["model_type"] == "qwen3"
    assert row["layers"] == "2" and row["layers_cut_from"] == "3"
    cut = dict(QWEN3, num_hidden_layers=2)
    assert int(row["plan_params"]) == from_hf_config(cut).params == int(row["n_params"])
    assert float(row["params_err"]) == 0.0
    assert row["plan_state_bytes"] != "" and row["plan_step_ms"] != ""
    err = capsys.readouterr().err
    assert "cut from 3; planned for the same cut" in err and "phase: backward" in err


def test_inference_with_a_forced_backend_and_decode_steps(tmp_path):
    out = tmp_path / "out.csv"
    rc = cli_main(["model", "--config", _write(tmp_path, QWEN3), "--seq-len", "32", "--mode", "inference",
                   "--backend", "math", "--decode-tokens", "2", "--out", str(out)])
    row = _row(out)
    assert rc == 0 and row["status"] == "ok" and row["mode"] == "prefill"
    assert row["sdpa_backend"] == "math" and row["decode_tokens"] == "2"
    assert float(row["decode_ms_per_token"]) > 0 and row["plan_kv_cache_bytes"] != ""


def test_a_config_the_planner_refuses_is_guarded_then_measured_with_force(tmp_path):
    path = _write(tmp_path, OLMO2)
    out = tmp_path / "out.csv"
    assert cli_main(["model", "--config", path, "--seq-len", "32", "--out", str(out)]) == 1
    row = _row(out)
    assert row["status"] == "skipped_guard" and "olmo2" in row["plan_error"] and "--force" in row["reason"]
    assert cli_main(["model", "--config", path, "--seq-len", "32", "--force", "--decode-tokens", "0",
                     "--out", str(out)]) == 0
    row = _row(out)
    assert row["status"] == "ok" and row["model_type"] == "olmo2" and int(row["n_params"]) > 0


def test_rows_equal_validation_hf_models_for_the_same_case(tmp_path):
    """The same case through hf_models --cases and through validation model --config (the dumped config)."""
    from validation.model import hf_models

    cfg_path = dump_config("llama-3.1-8b", str(tmp_path / "llama.json"), layers=2, tiny=True)
    cases = tmp_path / "cases.csv"
    with open(cases, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=hf_models.CASE_COLUMNS)
        w.writeheader()
        w.writerow({"family": "llama", "layers": 2, "attn_implementation": "sdpa", "mode": "train",
                    "precision": "32-true", "optimizer": "adamw", "checkpointing": "none", "seq_len": 32,
                    "batch": 1, "decode_tokens": 0, "overrides": "", "no_reset": 0})
    # hf_models builds families by name: measure the family, then compare on the case columns and bytes
    ref_out = tmp_path / "hf.csv"
    with open(cases) as fh:
        text = fh.read().replace("llama,2", "llama-3.1-8b,2")
    cases.write_text(text)
    assert hf_models.main(["--cases", str(cases), "--out", str(ref_out), "--tiny", "--device", "cpu"]) == 0
    out = tmp_path / "own.csv"
    assert cli_main(["model", "--config", cfg_path, "--seq-len", "32", "--mode", "training", "--precision",
                     "32-true", "--out", str(out)]) == 0
    row = _row(out)
    with open(ref_out, newline="") as fh:
        ref = list(csv.DictReader(fh))
    ref[0]["family"] = row["family"]  # the dumped config carries model_type llama; the family is the same dict
    assert own_report.same_as(row, ref) == []
    assert row["n_params"] == ref[0]["n_params"] and ref[0]["status"] == "ok"
    bad = [dict(ref[0], n_params=str(int(ref[0]["n_params"]) + 1))]
    assert own_report.same_as(row, bad) == [f"n_params: {row['n_params']} here, {bad[0]['n_params']} in hf_models"]


@pytest.mark.parametrize(("flags", "needle"), [
    (["--gpus", "2"], "--gpus:"), (["--mode", "training", "--checkpointing", "full"], "--checkpointing:"),
    (["--dtype", "float16"], "--dtype:"), (["--hidden", "128"], "--hidden:"), (["--window", "16"], "--window:"),
    (["--kv-dtype", "int8"], "--kv-dtype:"), (["--preset", "llama-3-8b"], "--config:"),
    (["--backend", "flash-attn"], "--backend:"), (["--timeout-s", "-1"], "--timeout-s:"),
    (["--mode", "training", "--micro-batch", "1", "--batch", "2"], "--micro-batch:"),
    (["--mode", "training", "--persistent-grads"], "--persistent-grads:"),
    (["--trainable", "projector"], "--trainable:"),
])
def test_what_one_gpu_cannot_run_as_planned_is_one_line_naming_the_flag(tmp_path, flags, needle):
    proc = subprocess.run([sys.executable, "-m", "validation", "model", "--config", _write(tmp_path, QWEN3),
                           "--seq-len", "32", "--out", str(tmp_path / "o.csv"), *flags],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + needle), proc.stderr
    assert not (tmp_path / "o.csv").exists()


def test_a_config_without_model_type_is_refused_by_name(tmp_path):
    cfg = {k: v for k, v in QWEN3.items() if k != "model_type"}
    with pytest.raises(ValueError, match="model_type"):
        own_model.flat_config(cfg)


def test_torchrun_path_keeps_its_flags_and_its_message(tmp_path, capsys):
    rc = cli_main(["model", "--family", "llama-3.1-8b", "--seq-len", "64", "--out", str(tmp_path / "x.csv")])
    assert rc == 2 and "runs under torchrun" in capsys.readouterr().err


def _prep(tmp_path, *flags):
    args = own_model.parser().parse_args(["--config", _write(tmp_path, QWEN3), "--seq-len", "64",
                                          "--out", str(tmp_path / "o.csv"), "--device", "cpu", *flags])
    return args


def test_guard_refuses_on_memory_and_on_time(tmp_path):
    args = _prep(tmp_path, "--mode", "training")
    cfg = own_model.flat_config(QWEN3)
    inputs = own_model.plan_inputs(args, cfg, "qwen3", "h200")
    case, _ = own_plan.case_of(inputs, cfg, None, 16, "qwen3")
    plan, err = own_plan.make(inputs)
    need = own_plan.planned_peak(plan)
    assert own_plan.guard_reason(plan, err, case, int(need * 1.1) + (512 << 20) + 1, 600) == ""
    assert "does not fit" in own_plan.guard_reason(plan, err, case, need, 600)
    assert "--timeout-s" in own_plan.guard_reason(plan, err, case, None, 4 * plan.step_time_ms / 1e3 / 2)


def test_fit_layers_cuts_to_the_most_layers_the_guard_allows(tmp_path):
    from estimator.model.plan import make_plan

    cfg = config_for_spec(get_preset("llama-3-8b"), "llama-3-8b")
    args = own_model.parser().parse_args(["--preset", "llama-3-8b", "--seq-len", "4096", "--out", "o.csv"])

    def need(n):
        return own_plan.planned_peak(make_plan(own_model.plan_inputs(args, own_model.cut(cfg, n), "x", "h200"),
                                               solve=False))
    free = int(need(5) * 1.1) + (512 << 20) + 1  # room for 5 layers, not 6
    assert need(6) * 1.1 + (512 << 20) > free
    assert own_model.fit_layers(args, cfg, "x", "h200", free) == 5
    with pytest.raises(ValueError, match="--fit-layers"):
        own_model.fit_layers(args, cfg, "x", "h200", 1 << 20)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_a_config_the_plan_reads_back_as_the_preset(name):
    spec = get_preset(name)
    try:
        cfg = config_for_spec(spec, name)
    except ValueError as exc:
        assert str(exc).startswith("config:") and "--config" in str(exc)
        return
    assert from_hf_config(cfg).params == spec.params


def test_explain_names_the_phase_and_component_of_a_miss():
    row = {"status": "ok", "mode": "train", "family": "x", "layers": "2", "precision": "bf16-mixed", "seq_len": "8",
           "batch": "1", "device_name": "NVIDIA H200", "plan_band": "step -0.09..+0.03",
           "baseline_bytes": 64 << 20, "plan_workspace_bytes": 64 << 20, "weights_bytes": 1 << 30,
           "plan_weights_bytes": 1 << 30, "state_bytes": 2 << 30, "plan_state_bytes": 3 << 30,
           "peak_bytes": 4 << 30, "plan_peak_bytes": 5 << 30, "time_step_ms": 100.0, "plan_step_ms": 101.0}
    row.update(own_plan.compare(row))
    assert row["worst_part"] == "state" and row["peak_within_tolerance"] is False and row["time_within_band"]
    text = "\n".join(own_report.explain(row))
    assert "miss: step 1, optimizer state, fp32 masters (kept): planned 3.000 GiB, measured 2.000 GiB, off by " \
           "1.000 GiB (+50.0%)" in text
    assert "whole step time: measured 100.00 ms, planned 101.00 ms (+1.0%) - within the plan's band" in text


# --- the app's side: ui/own_model.py and the Validate page ---------------------------------------------------------

TINY_SPEC = dict(name="custom", layers=2, hidden=64, q_heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=512)


def _tiny_inputs(**kw):
    from estimator.model.inputs import PlanInputs
    from estimator.model.specs import ModelSpec

    return PlanInputs(model=ModelSpec(**TINY_SPEC), seq_len=32, gpu="h200", **kw)


@pytest.mark.parametrize("kw", [{}, {"mode": "training", "precision": "bf16-true", "optimizer": "sgd",
                                      "checkpointing": "hf", "batch": 2}])
def test_the_page_command_plans_what_the_page_shows(tmp_path, kw):
    """The argv the page runs, parsed by the command, plans the same inputs as the page's (model aside)."""
    from dataclasses import replace

    from ui import own_model as page

    inputs = _tiny_inputs(**kw)
    cfg = page.config_for_plan(inputs, None)
    argv = page.command(inputs, "config.json", "out.csv", layers=None, timeout_s=60)
    args = own_model.parser().parse_args(argv[4:])
    again = own_model.plan_inputs(args, cfg, inputs.model.name, inputs.gpu)
    assert replace(again, model=inputs.model) == inputs
    assert from_hf_config(cfg).params == inputs.model.params


def test_the_page_preview_guards_and_fits_layers():
    from ui import own_model as page

    inputs = _tiny_inputs(mode="training")
    cfg = dict(page.config_for_plan(inputs, None), num_hidden_layers=8)
    need2 = page.preview(inputs, cfg, 2, None)["peak_bytes"]
    free = int(need2 * 1.25) + (5 << 30) // 4 + 1  # the app guard passes 1.25·need + 1.25 GiB <= free
    assert page.preview(inputs, cfg, 2, free)["reason"] == ""
    assert "guard allows" in page.preview(inputs, cfg, 3, free)["reason"]
    assert page.fit_layers(inputs, cfg, free) == 2
    with pytest.raises(ValueError, match="--gpus"):
        page.preview(_tiny_inputs(gpus=2), cfg, 2, None)


def test_progress_follows_the_phases():
    from ui import own_model as page

    assert page.progress_of("phase: backward (3.1 s)", "train") == (5 / 9, "backward")
    assert page.progress_of("phase: prefill (1.0 s)", "prefill") == (2 / 6, "prefill")
    assert page.progress_of("wrote x.csv", "train") is None


def test_validate_page_runs_the_model_and_shows_measured_beside_planned(monkeypatch):
    """The page on a 'GPU' server (the status faked; the child process runs the real command on this CPU)."""
    from streamlit.testing.v1 import AppTest

    from tests.test_app_pages import ROOT

    monkeypatch.setenv("PLANNER_ENABLE_GPU_JOBS", "true")
    monkeypatch.setattr("ui.gpu.cuda_status", lambda: {"name": "NVIDIA H200", "free_bytes": 64 << 30,
                                                       "total_bytes": 80 << 30})
    at = AppTest.from_file(str(ROOT / "pages" / "validate.py"), default_timeout=240)
    at.session_state["plan_inputs"] = _tiny_inputs()
    at.session_state["own_layers"] = 1  # as validation/cases/own_model/page_check.py picks the cut
    at.run()
    assert not at.exception
    at.button(key="own_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    text = " ".join(m.value for m in at.markdown)
    assert "ran on the CPU" in text and "every part within its tolerance" in text
    result = at.session_state["own_result"]
    assert result.iloc[0]["status"] == "ok" and result.iloc[0]["mode"] == "prefill"
    assert int(result.iloc[0]["n_params"]) == int(result.iloc[0]["plan_params"])
    assert result.iloc[0]["layers"] == "1" and result.iloc[0]["layers_cut_from"] == "2"
    assert "cut from 2; planned for the same cut" in text


def test_own_report_cli_writes_the_parts_and_checks_against_hf_models(tmp_path):
    row = {"status": "ok", "mode": "prefill", "family": "llama", "layers": "2", "attn_implementation": "sdpa",
           "precision": "bf16-true", "optimizer": "adamw", "checkpointing": "none", "seq_len": "8", "batch": "1",
           "decode_tokens": "0", "config_source": "c.json", "device_name": "NVIDIA H200", "plan_band": "",
           "n_params": "10", "plan_params": "10", "weights_bytes": str(1 << 30), "plan_weights_bytes": str(1 << 30),
           "peak_bytes": str(2 << 30), "plan_peak_bytes": str(2 << 30)}
    own, hf = tmp_path / "own.csv", tmp_path / "hf.csv"
    for path, rows in ((own, [row]), (hf, [dict(row, peak_bytes=str((2 << 30) + 1))])):
        with open(path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(row))
            w.writeheader()
            w.writerows(rows)
    md = tmp_path / "r.md"
    assert own_report.main([str(own), "--against", str(hf), "--md", str(md)]) == 1
    text = md.read_text()
    assert "| build | weights | 1.000 GiB | 1.000 GiB | +0.0% | yes |" in text
    assert f"NO: peak_bytes: {2 << 30} here, {(2 << 30) + 1} in hf_models" in text
    assert own_report.main([str(own), "--against", str(own), "--md", str(md)]) == 0


def test_a_vision_case_still_builds_with_its_trainable_after_the_own_config_key():
    """hf_models' model key gained our config; a vision-language training case keeps its `trainable` choice."""
    from validation.model import hf_models
    from validation.model.hf_runs import Dev

    slot = hf_models.ModelSlot(Dev("cpu"), tiny=True)
    case = hf_models.normalize_case({"family": "llava-1.5-7b", "layers": 1, "attn_implementation": "sdpa",
                                     "mode": "train", "precision": "32-true", "seq_len": 32, "batch": 1,
                                     "image_size": "", "images": 1, "trainable": "projector"})
    model, _info, built = slot.get(case)
    assert built
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert 0 < trainable < sum(p.numel() for p in model.parameters())
    slot.free()
