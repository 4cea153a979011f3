"""Mixture of experts, latent attention, sinks: the plan against the committed H200 measurements of real Hugging Face
models (validation/data/h200_hf_archs.csv, transformers 5.17), and the pure formulas behind it. No torch."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from estimator.call.attention import CUDA_CONTEXT_BYTES
from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.presets import get_preset
from estimator.model.time import ffn_matmul_params

ARCHS = Path(__file__).resolve().parents[1] / "validation" / "data" / "h200_hf_archs.csv"
# rows modelled here (prefill and training of MoE, MLA and gpt-oss; gemma-3 and phi-3 training), within
# max(3%, 2 MiB) of the measured peak; the others are reported by validation.model.model_report
WITHIN = {("mixtral-8x7b", m) for m in ("prefill", "train")} | {("qwen3-30b-a3b", m) for m in ("prefill", "train")} \
    | {("deepseek-v2-lite", m) for m in ("prefill", "train")} | {("gpt-oss-20b", "prefill"),
                                                                 ("gemma-3-12b", "train"), ("phi-3-mini-4k", "train"),
                                                                 ("gemma-2-9b", "train")}


def _rows():
    with ARCHS.open(newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["status"] in ("ok", "oom")]


def _plan(row):
    pytest.importorskip("pandas")
    from validation.model.model_report import plan_row
    return plan_row(row)


@pytest.mark.parametrize("row", [r for r in _rows() if (r["family"], r["mode"]) in WITHIN and r["status"] == "ok"],
                         ids=lambda r: f"{r['family']}-{r['mode']}-{r['seq_len']}")
def test_archs_rows_within_tolerance(row):
    from validation.call.schema import tolerance_bytes
    measured = int(float(row["peak_bytes"]))
    planned = _plan(row).total_bytes - CUDA_CONTEXT_BYTES
    assert abs(planned - measured) <= tolerance_bytes(measured), (planned, measured)


@pytest.mark.parametrize("row", [r for r in _rows() if r["status"] == "oom" and r["mode"] == "prefill"],
                         ids=lambda r: f"{r['family']}-{r['mode']}-{r['seq_len']}")
def test_archs_oom_rows_do_not_fit(row):
    assert not _plan(row).fits


def test_moe_active_flops():
    m = get_preset("mixtral-8x7b")
    dense, moe = ffn_matmul_params(m)
    assert moe == 8 * 4096 + 2 * 3 * 4096 * 14336  # router + top-2 experts
    plan = make_plan(PlanInputs(model=m, seq_len=1024, gpu="h200"), solve=False)
    # forward FLOPs of the 32 layers = 2 per multiply-add over the active matmul weights, + the attention core
    core = 32 * 4 * 32 * 1024 * 1024 * 128
    assert plan.prefill_flops == 2 * m.matmul_params * 1024 + core + 2 * 4096 * 32000
    assert plan.flops_shares["ffn"] == 0 and plan.flops_shares["expert_ffn"] > 0.8
    assert plan.expert_ffn_share > 0.5 and plan.ffn_share == 0
    lite = get_preset("deepseek-v2-lite")  # dense first layer stays dense, shared experts are active
    dense, moe = ffn_matmul_params(lite)
    assert dense == 3 * 2048 * 10944 and moe == 64 * 2048 + 6 * 3 * 2048 * 1408 + 3 * 2048 * 2816


def test_mla_cache_per_token_in_both_layouts():
    lite = get_preset("deepseek-v2-lite")
    latent = lite.kv_cache_bytes_per_token(16, "latent")
    assert latent == 27 * (512 + 64) * 2 == lite.kv_cache_bytes_per_token(16, "hf")  # transformers 5.17 caches it
    assert lite.kv_cache_bytes_per_token(16, "per-head") == 27 * 16 * (192 + 128) * 2
    base = PlanInputs(model=lite, seq_len=4096, gpu="h200")
    for layout, per_token in (("hf", latent), ("per-head", 27 * 16 * 320 * 2)):
        plan = make_plan(PlanInputs(model=lite, seq_len=4096, gpu="h200", kv_layout=layout), solve=False)
        assert plan.kv_cache_bytes_per_token == per_token and plan.kv_cache_bytes == per_token * 4096
    with pytest.raises(ValueError, match="kv_layout"):
        PlanInputs(model=lite, seq_len=8, kv_layout="compressed")
    assert base.kv_layout == "hf"


def test_expert_parallel_splits_the_experts_only():
    m = get_preset("mixtral-8x7b")
    assert m.params - m.params_per_gpu(1, 8) == m.expert_params * 7 // 8
    one = make_plan(PlanInputs(model=m, seq_len=4096, gpu="h200"), solve=False)
    ep = make_plan(PlanInputs(model=m, seq_len=4096, gpu="h200", gpus=8, ep=8), solve=False)
    assert one.weights_bytes - ep.weights_bytes == m.expert_params * 7 // 8 * 2
    with pytest.raises(ValueError, match="ep"):
        PlanInputs(model=get_preset("llama-3-8b"), seq_len=8, ep=2, gpus=2)


@pytest.mark.xfail(strict=True, reason="gpt-oss-20b eager training at 8192 ran out of memory with 113.2 GiB allocated "
                   "asking for 16 GiB (129 GiB < the H200's 139.8): the caching allocator held 11 GiB reserved but "
                   "unusable (fragmentation by 16 GiB score-sized blocks), which the whole-model plan does not replay")
def test_archs_gpt_oss_training_oom_is_called():
    row = next(r for r in _rows() if r["status"] == "oom" and r["mode"] == "train")
    assert not _plan(row).fits
