"""Each advisor rule on small fakes of the plan and the estimator (tests/conftest.py): a scenario that
triggers it, one that must not, and effect numbers equal to re-running the (fake) estimator with the change."""

from dataclasses import fields, replace

import pytest

from estimator.advice.plan_rules import Advice, advise, eager_forward_peak_bytes
from estimator.advice.tree import ADVICE_ORDER
from estimator.hardware import get_gpu
from estimator.model.layer_attention import attention_call
from estimator.units import gib
from tests.conftest import fake_estimate, fake_inputs, fake_make_plan


def run(mask="none", cached_len=0, **kw):
    inputs = fake_inputs(**kw)
    items = advise(inputs, mask=mask, cached_len=cached_len, make_plan=fake_make_plan, estimate_call=fake_estimate)
    assert [a.id for a in items] == sorted((a.id for a in items), key=ADVICE_ORDER.index)
    assert len({a.id for a in items}) == len(items)
    for advice in items:
        check_effect(inputs, advice, mask, cached_len)
    return {a.id: a for a in items}


def check_effect(inputs, advice, mask, cached_len):
    """bytes/time after = the estimator re-run with `advice.change` applied to the plan or to the layer's call."""
    change = dict(advice.change)
    if advice.bytes_metric == "total_bytes per GPU":
        before = fake_make_plan(inputs).to_dict()
        assert advice.bytes_before == before["total_bytes"]
        if change:
            after = fake_make_plan(replace(inputs, **change)).to_dict()
            assert advice.bytes_after == after["total_bytes"]
            key = "step_time_ms" if inputs.mode == "training" else "prefill_time_ms"
            assert advice.time_ms_after == pytest.approx(after[key], rel=1e-12)
        elif advice.bytes_after is not None:
            assert advice.bytes_after == advice.bytes_before
    elif advice.bytes_metric == "attention peak_extra_bytes per layer call":
        call = attention_call(inputs, mask=mask, **({"causal": False} if mask != "none" else {}))
        if cached_len:
            call = replace(call, q_len=call.kv_len - cached_len)
        gpu = get_gpu(change.pop("gpu", inputs.gpu))
        call_fields = {f.name for f in fields(call)}  # a dtype change's plan-only companions stay out
        after = fake_estimate(replace(call, **{k: v for k, v in change.items() if k in call_fields}), gpu)
        assert advice.bytes_after == after.peak_extra_bytes
        assert advice.time_ms_after == pytest.approx(after.time_ms, rel=1e-12)
        baseline = replace(call, backend="auto") if advice.id == "pad-head-dim" else call
        assert advice.bytes_before == fake_estimate(baseline, get_gpu(inputs.gpu)).peak_extra_bytes


def test_fits_with_headroom():
    found = run()
    plan = fake_make_plan(fake_inputs()).to_dict()
    assert "fits" in found and found["fits"].bytes_before == plan["total_bytes"]
    assert f"{(plan['capacity_bytes'] - plan['total_bytes']) / 2**30:,.2f} GiB" in found["fits"].title
    assert "fits" not in run(model="llama-2-70b", seq_len=32768)


def test_profile_first_when_over_budget_or_on_math_only():
    assert list(run(model="llama-2-70b", seq_len=32768))[0] == "profile-first"
    assert list(run(backend="math"))[:2] == ["fits", "profile-first"]
    assert "profile-first" not in run()  # fits, fused kernel: nothing to change


def test_attention_not_bottleneck_below_40_percent():
    found = run()  # fake: attention 20% of prefill at 4k
    plan = fake_make_plan(fake_inputs()).to_dict()
    assert plan["attention_share"] < 0.4
    advice = found["attention-not-bottleneck"]
    assert advice.time_ms_after == pytest.approx(plan["prefill_time_ms"] * (1 - plan["attention_share"]))
    assert fake_make_plan(fake_inputs(backend="math")).to_dict()["attention_share"] >= 0.4
    assert "attention-not-bottleneck" not in run(backend="math")


def test_eager_to_sdpa_and_inplace_masked_fill():
    found = run(backend="eager", seq_len=8192)
    assert list(found).index("eager-to-sdpa") < list(found).index("inplace-masked-fill")
    assert dict(found["eager-to-sdpa"].change) == {"backend": "auto"}
    assert found["eager-to-sdpa"].bytes_after < found["eager-to-sdpa"].bytes_before
    inplace = found["inplace-masked-fill"]
    call = attention_call(fake_inputs(backend="eager", seq_len=8192))
    assert gib(call.batch * call.q_heads * call.q_len * call.kv_len * 2) in inplace.why
    assert inplace.bytes_before == eager_forward_peak_bytes(call, inplace_fill=False)
    assert inplace.bytes_after == eager_forward_peak_bytes(call, inplace_fill=True)
    assert "stays" in inplace.expected_effect  # bf16: the fp32 softmax sets the peak, not the copy
    assert "autograd" in inplace.why and "no_grad" in inplace.why
    training = run(backend="eager", mode="training", seq_len=2048)
    assert "eager-to-sdpa" in training and "inplace-masked-fill" not in training  # breaks autograd
    encoder = run(backend="eager", model="vit-l-16", seq_len=1025)  # no causal mask, no mask: nothing to fill
    assert "inplace-masked-fill" not in encoder
    assert "eager-to-sdpa" not in run() and "inplace-masked-fill" not in run()


def test_use_fused_kernel_on_math_with_the_reasons():
    found = run(backend="math")
    advice = found["use-fused-kernel"]
    assert dict(advice.change) == {"backend": "auto"}
    assert advice.bytes_after < advice.bytes_before
    # math forced with every fused backend able to run: the why says it is forced, never "why no fused backend"
    assert "forced to math" in advice.why and "Why no fused backend" not in advice.why
    assert all(b in advice.why for b in ("cudnn", "flash", "efficient"))
    assert "use-fused-kernel" not in run()


def test_flash_ineligible_dtype():
    found = run(dtype="float32", model="vit-l-16", seq_len=4097, gpu="a100-40gb", batch=2)
    advice = found["flash-ineligible-dtype"]
    assert dict(advice.change)["dtype"] == "bfloat16"
    assert "flash-ineligible-dtype" not in run(model="vit-l-16", seq_len=4097, gpu="a100-40gb", batch=2)
    assert dict(run(dtype="float32", backend="math", gpu="t4")["flash-ineligible-dtype"].change)["dtype"] == "float16"


def test_flash_ineligible_head_dim_only_above_256():
    big = dict(backend="math", model_changes=dict(head_dim=288))
    found = run(**big)
    assert "flash-ineligible-head-dim" in found
    assert "out of date" in found["flash-ineligible-head-dim"].why
    assert dict(found["flash-ineligible-head-dim"].change)["backend"] == "efficient"
    assert "flash-ineligible-head-dim" not in run(backend="math", model_changes=dict(head_dim=256))
    assert "flash-ineligible-head-dim" not in run(backend="math", model_changes=dict(head_dim=80))


def test_flash_ineligible_mask():
    found = run(mask="bool", backend="math")
    advice = found["flash-ineligible-mask"]
    assert dict(advice.change) == {"backend": "auto", "mask": "none", "causal": True}
    assert "is_causal" in advice.title
    assert "flash-ineligible-mask" not in run(backend="math")


def test_flash_ineligible_gpu():
    found = run(backend="math", gpu="t4", dtype="float16", seq_len=2048)
    advice = found["flash-ineligible-gpu"]
    assert get_gpu(dict(advice.change)["gpu"]).sm >= 80
    assert "flash-ineligible-gpu" not in run(backend="math", dtype="float16", seq_len=2048)


def test_flash_ineligible_causal_with_a_cached_prefix():
    found = run(backend="math", cached_len=1024)
    assert "flash-ineligible-causal" in found
    assert "flash-ineligible-causal" not in run(backend="math")
    with pytest.raises(ValueError, match="cached_len"):
        run(cached_len=4096)


def test_pad_head_dim_when_a_faster_fused_backend_becomes_eligible():
    d100 = dict(seq_len=8192, model_changes=dict(head_dim=100))
    found = run(**d100)  # h100: flash runs D=100; padded to 104 cuDNN runs (faster in the fake, as on Hopper)
    advice = found["pad-head-dim"]
    assert dict(advice.change) == {"head_dim": 104}
    assert advice.time_ms_after < advice.time_ms_before
    assert "out of date" in advice.why
    assert "pad-head-dim" not in run(gpu="a100-80gb", **d100)  # the fake's flash has no padding cost: no gain
    assert "pad-head-dim" not in run(seq_len=8192, model_changes=dict(head_dim=80))  # aligned: 80 is a multiple of 8
    t4 = run(gpu="t4", dtype="float16", seq_len=2048, model_changes=dict(head_dim=100))  # math → efficient
    assert "pad-head-dim" in t4


def test_math_gqa_expansion():
    found = run(backend="math", model="llama-3-8b")
    advice = found["math-gqa-expansion"]
    call = attention_call(fake_inputs(model="llama-3-8b"))
    copies = 2 * call.batch * call.q_heads * call.kv_len * call.head_dim * 4
    assert gib(copies) in advice.why
    assert "math-gqa-expansion" not in run(backend="math")  # MHA
    assert "math-gqa-expansion" not in run(model="llama-3-8b")  # fused


def test_tensor_parallel_when_model_state_exceeds_one_gpu():
    found = run(model="llama-2-70b", seq_len=4096)
    advice = found["tensor-parallel"]
    assert dict(advice.change)["tp"] == 2 and fake_make_plan(
        replace(fake_inputs(model="llama-2-70b"), tp=2, gpus=2)).to_dict()["fits"]
    assert "tensor-parallel" not in run()
    assert "window-attention" not in found and "reduce-batch" not in found


def test_reduce_batch_first_when_batch_one_fits():
    found = run(backend="math", batch=32, seq_len=4096)
    assert "reduce-batch" in found
    batch = dict(found["reduce-batch"].change)["batch"]
    assert fake_make_plan(fake_inputs(backend="math", batch=batch)).to_dict()["fits"]
    assert not fake_make_plan(fake_inputs(backend="math", batch=batch + 1)).to_dict()["fits"]
    assert "window-attention" not in found
    assert "reduce-batch" not in run(batch=1, seq_len=4096)


def test_activation_checkpointing_in_training():
    found = run(mode="training", seq_len=16384, gpu="h200")
    advice = found["activation-checkpointing"]
    assert dict(advice.change)["checkpointing"] in ("selective", "full")
    assert "20–30%" in advice.why
    assert "activation-checkpointing" not in run(mode="training", seq_len=16384, gpu="h200", checkpointing="full")
    assert "activation-checkpointing" not in run(seq_len=16384, gpu="h200")


def test_kv_cache_quantization_and_gqa_when_the_cache_dominates():
    found = run(seq_len=32768, batch=4)  # llama-2-7b: MHA, 512 KiB per token
    assert list(found).index("kv-cache-quantization") < list(found).index("gqa")
    assert dict(found["kv-cache-quantization"].change) == {"kv_dtype": "int8"}
    assert dict(found["gqa"].change)["model"].kv_heads == 4
    serving_70b = run(model="llama-2-70b", seq_len=32768)
    assert "kv-cache-quantization" in serving_70b and "gqa" not in serving_70b  # already GQA
    assert "already shares KV heads" in serving_70b["kv-cache-quantization"].why
    short = run(seq_len=2048)
    assert "kv-cache-quantization" not in short and "gqa" not in short
    assert "kv-cache-quantization" not in run(seq_len=32768, batch=4, kv_dtype="int8")
    assert "kv-cache-quantization" not in run(seq_len=32768, batch=4, mode="training", checkpointing="full")


def test_window_shorter_sequence_and_context_parallel_when_batch_one_is_over():
    found = run(seq_len=1 << 19)  # llama-2-7b, 512k tokens: the KV cache alone is 256 GiB
    for advice_id in ("window-attention", "reduce-seq-len", "context-parallel"):
        assert advice_id in found
    ids = list(found)
    assert ids.index("window-attention") < ids.index("reduce-seq-len") < ids.index("context-parallel")
    seq = dict(found["reduce-seq-len"].change)["seq_len"]
    assert fake_make_plan(fake_inputs(seq_len=seq)).to_dict()["fits"]
    assert not fake_make_plan(fake_inputs(seq_len=seq + 1)).to_dict()["fits"]
    for advice_id in ("window-attention", "reduce-seq-len", "context-parallel"):
        assert advice_id not in run(seq_len=4096)


def test_split_prefill_decode_for_decoder_inference_only():
    assert "split-prefill-decode" in run()
    assert "split-prefill-decode" not in run(model="vit-l-16", seq_len=1025)
    assert "split-prefill-decode" not in run(mode="training", seq_len=2048)


def test_log_backend_always_last_and_names_cudnn_on_hopper():
    found = run()
    assert list(found)[-1] == "log-backend"
    assert "cuDNN" in found["log-backend"].why and "check_prefer_cudnn_attention" in found["log-backend"].why
    assert "cuDNN over flash" not in run(gpu="a100-80gb")["log-backend"].why


def test_advice_validation_names_the_field():
    with pytest.raises(ValueError, match="id"):
        Advice(id="no-such-rule", title="t", why="w", expected_effect="e")
    with pytest.raises(ValueError, match="bytes_after"):
        Advice(id="fits", title="t", why="w", expected_effect="e", bytes_after=1.5)
    assert Advice(id="fits", title="t", why="w", expected_effect="e").to_dict()["id"] == "fits"
