"""The GPU catalog: every row has units, a source, and sane, dense (not with-sparsity) peaks."""

from __future__ import annotations

import pytest

from estimator.hardware import CATALOG, get_gpu

REQUIRED = ("h100-sxm", "h100-pcie", "h200", "a100-80gb", "a100-40gb", "l40s", "l4", "a10g", "rtx-4090",
            "rtx-3090", "t4", "v100")


@pytest.mark.parametrize("name", REQUIRED)
def test_catalog_rows(name):
    gpu = get_gpu(name)
    assert gpu.memory_source and gpu.source
    assert 8 * 2**30 < gpu.memory_bytes < 200 * 2**30
    assert gpu.peak_flops_per_s["float32"] < gpu.peak_flops_per_s["float16"]
    assert gpu.peak_flops_per_s["float16"] < 1.2e15  # dense: H100's with-sparsity 1979 TFLOPS would fail


def test_h200_reports_what_pytorch_reports():
    assert get_gpu("h200").memory_bytes == 150_109_880_320
    assert get_gpu("H200").sm == 90 and get_gpu("t4").sm == 75


def test_catalog_covers_the_contract():
    assert set(REQUIRED) <= set(CATALOG)
