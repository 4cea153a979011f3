"""Mixture-of-experts time: the grouped GEMM class and the grouped_mm experts' elementwise ops, measured on the H200
(validation/data/h200_calibration_kernels.json) and checked against whole MoE models (h200_hf_archs.csv)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from estimator.hardware import get_gpu
from estimator.model.calibration import constants_from_json, load_constants
from estimator.model.kernel_prices import Kernels
from validation.model.hf_profile import kind_of, parse_case
from validation.model.model_report import plan_row

DATA = Path(__file__).resolve().parents[1] / "validation" / "data"


def test_fp32_experts_run_far_below_the_16_bit_grouped_gemm():
    """torch's grouped GEMM has no fp32 tensor-core path: under autocast the fp32 experts cost ~10x (measured)."""
    kern = Kernels(load_constants(), get_gpu("h200"))
    bf16 = kern.grouped_gemm_ms(8, 4096, 28672, 4096, "bfloat16")
    fp32 = kern.grouped_gemm_ms(8, 4096, 28672, 4096, "float32")
    assert 8 < fp32 / bf16 < 20
    assert kern.grouped_gemm_ms(8, 4096, 28672, 4096, "bfloat16", "backward") > 1.5 * bf16


def test_without_grouped_rows_an_expert_gemm_is_priced_as_dense_gemms():
    kern = Kernels(dataclasses.replace(load_constants(), grouped_gemms=()), get_gpu("h200"))
    assert kern.grouped_gemm_ms(8, 2048, 4096, 4096, "bfloat16") == pytest.approx(
        8 * kern.gemm_ms(2048, 4096, 4096, "bfloat16"))


def test_masked_fill_of_a_row_mask_is_slower_than_a_vectorised_copy():
    """The grouped_mm experts' masked_fills run PyTorch's non-vectorised elementwise kernel (profiled on the H200:
    validation/data/h200_hf_profile.csv); the calibration measures it as its own op."""
    kern = Kernels(load_constants(), get_gpu("h200"))
    n = 32768 * 4096
    assert kern.mem_ms("masked_fill_rows", n)[0] > 2.5 * kern.mem_ms("copy", n)[0]


def test_bad_grouped_row_is_one_line():
    data = json.loads((DATA / "h200_calibration_kernels.json").read_text())
    data["grouped_gemm"][0]["kind"] = "sideways"
    with pytest.raises(ValueError, match="grouped_gemm row"):
        constants_from_json(data, "x.json")


@pytest.mark.parametrize("family", ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite"])
def test_moe_prefill_time_within_15_percent(family):
    """The three grouped_mm MoE families' prefills (fit set; before the elementwise ops were priced mixtral and
    qwen3-moe ran 20-25% over the plan at 16k-32k tokens)."""
    rows = pd.read_csv(DATA / "h200_hf_archs.csv", dtype=str, keep_default_na=False)
    rows = rows[(rows.family == family) & (rows["mode"] == "prefill") & (rows.status == "ok")]
    assert len(rows) == 3
    for r in rows.to_dict("records"):
        planned = plan_row(r).prefill_time_ms
        assert abs(planned / float(r["time_prefill_ms"]) - 1) < 0.15, (r["seq_len"], planned)


def test_profile_case_parsing():
    assert parse_case("mixtral-8x7b:2:sdpa:16384")["mode"] == "prefill"
    assert parse_case("mixtral-8x7b:2:sdpa:4096:train")["seq_len"] == 4096
    with pytest.raises(ValueError, match="--case"):
        parse_case("mixtral-8x7b:2:sdpa")
    assert parse_case("mixtral-8x7b:2:sdpa:4096")["batch"] == 1
    decode = parse_case("mixtral-8x7b:4:sdpa:8192:decode:b4")
    assert (decode["mode"], decode["batch"], decode["seq_len"]) == ("decode", 4, 8192)
    with pytest.raises(ValueError, match="--case"):
        parse_case("mixtral-8x7b:4:sdpa:8192:b0")
    assert kind_of("cutlass::device_kernel<GroupProblemShape>") == "grouped_gemm"
    assert kind_of("void at::native::elementwise_kernel<128, 4, masked_fill_kernel>") == "elementwise"
