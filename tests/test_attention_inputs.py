"""Bad input to the attention estimator: a clear one-line error that names the field."""

from __future__ import annotations

import pytest

from estimator import AttentionCall, get_gpu
from estimator.call.backends import check_torch_version

GOOD = dict(batch=1, q_heads=8, kv_heads=8, head_dim=64, q_len=128, kv_len=128)


@pytest.mark.parametrize("change, field", [
    ({"batch": 0}, "batch"), ({"q_heads": -1}, "q_heads"), ({"head_dim": 2.5}, "head_dim"),
    ({"q_len": "abc"}, "q_len"), ({"kv_heads": 3}, "kv_heads"), ({"dtype": "float64"}, "dtype"),
    ({"backend": "xformers"}, "backend"), ({"mask": "causal"}, "mask"), ({"mode": "train"}, "mode"),
    ({"dropout": 1.0}, "dropout"), ({"dropout": -0.1}, "dropout"), ({"causal": "maybe"}, "causal"),
    ({"q_len": 10**9}, "q_len"), ({"batch": 1 << 19, "q_heads": 1 << 12, "q_len": 1 << 20, "kv_len": 1 << 20}, "q_len"),
])
def test_bad_call_names_the_field(change, field):
    with pytest.raises(ValueError) as err:
        AttentionCall(**{**GOOD, **change})
    message = str(err.value)
    assert message.startswith(field) and "\n" not in message


def test_aliases_are_accepted():
    call = AttentionCall(**GOOD, dtype="torch.bf16", causal="1", backend="FLASH")
    assert (call.dtype, call.causal, call.backend) == ("bfloat16", True, "flash")


def test_unknown_gpu_lists_the_catalog():
    with pytest.raises(ValueError, match="h200.*a100-80gb"):
        get_gpu("b200")


def test_unknown_torch_version():
    assert check_torch_version("2.11.0+cu130") == "2.11"
    with pytest.raises(ValueError, match="torch"):
        check_torch_version("1.13")
