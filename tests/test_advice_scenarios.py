"""The advisor end to end on the real estimator (estimator/model/plan.py + estimator/call/attention.py): the issue's
scenarios get the right ids in a sensible order, and every effect equals the estimator re-run with the change."""

from dataclasses import replace

from estimator.advice.plan_rules import advise
from estimator.cli.advise import _call_options, build_parser
from estimator.cli.plan import inputs_from_args
from estimator.hardware import get_gpu
from estimator.model.plan import make_plan
from estimator.units import gib
from tests.conftest import check_effect


def run(argv: str):
    args = build_parser().parse_args(argv.split())
    inputs, options = inputs_from_args(args), _call_options(args)
    items = advise(inputs, **options)
    for advice in items:
        check_effect(inputs, options, advice)
    return [a.id for a in items], {a.id: a for a in items}


def before(ids, *pairs):
    for first, second in pairs:
        assert ids.index(first) < ids.index(second), (first, second, ids)


VIT = "--preset vit-l-16 --seq-len 4097 --dtype float32 --gpu a100-40gb"


def test_vit_document_classification_4096_patches_fp32_a100_40gb():
    ids, found = run(f"{VIT} --batch 8")
    # auto runs efficient in fp32: it fits; flash and cuDNN are out because of fp32, and bf16 is the lever
    assert ids[0] == "fits" and "flash-ineligible-dtype" in ids and "use-fused-kernel" not in ids
    before(ids, ("profile-first", "flash-ineligible-dtype"), ("flash-ineligible-dtype", "log-backend"))
    assert dict(found["flash-ineligible-dtype"].change)["dtype"] == "bfloat16"
    assert found["flash-ineligible-dtype"].time_ms_after < found["flash-ineligible-dtype"].time_ms_before
    assert "split-prefill-decode" not in ids and "kv-cache-quantization" not in ids  # an encoder has no decode


def test_vit_on_the_math_path_gets_a_fused_kernel_first():
    ids, found = run(f"{VIT} --batch 8 --backend math")
    before(ids, ("profile-first", "use-fused-kernel"), ("use-fused-kernel", "flash-ineligible-dtype"))
    fused = found["use-fused-kernel"]
    assert fused.bytes_after * 100 < fused.bytes_before  # n² scores gone
    assert dict(fused.change) == {"backend": "auto"}


def test_vit_training_over_budget_reduces_batch_before_checkpointing():
    ids, found = run(f"{VIT} --batch 32 --mode training")
    assert "fits" not in ids
    before(ids, ("profile-first", "reduce-batch"), ("reduce-batch", "activation-checkpointing"))
    assert make_plan(replace(inputs_from_args(build_parser().parse_args(f"{VIT} --batch 32 --mode training".split())),
                             batch=dict(found["reduce-batch"].change)["batch"]), solve=False).fits


LLM_D100 = "--layers 32 --hidden 3200 --heads 32 --head-dim 100 --ffn 8640 --vocab 32000 --seq-len 8192"


def test_llm_prefill_8k_head_dim_100_on_hopper_pads_for_cudnn():
    ids, found = run(f"{LLM_D100} --gpu h100-sxm")
    assert "pad-head-dim" in ids and "flash-ineligible-head-dim" not in ids and "use-fused-kernel" not in ids
    pad = found["pad-head-dim"]
    assert dict(pad.change) == {"head_dim": 104}
    assert pad.time_ms_after < pad.time_ms_before
    assert "out of date" in pad.why and "cuDNN" in pad.why
    before(ids, ("profile-first", "pad-head-dim"), ("pad-head-dim", "split-prefill-decode"))


def test_llm_prefill_head_dim_100_on_ampere_pads_to_drop_flashs_copies():
    ids, found = run(f"{LLM_D100} --gpu a100-80gb")  # flash runs D=100 but copies q, k, v padded to 104 per call
    assert "use-fused-kernel" not in ids and ids[0] == "fits"
    pad = found["pad-head-dim"]
    assert "no per-call padding copies" in pad.title
    assert pad.bytes_after < pad.bytes_before  # the same flash kernel without the padded copies


def test_aligned_head_dim_gets_no_padding_advice():
    ids, _ = run("--layers 32 --hidden 2560 --heads 32 --head-dim 80 --ffn 8640 --vocab 32000 --seq-len 8192")
    assert "pad-head-dim" not in ids  # head_dim 80 is already a multiple of 8


def test_llm_prefill_head_dim_100_on_the_math_path():
    ids, found = run(f"{LLM_D100} --gpu h100-sxm --backend math")
    before(ids, ("use-fused-kernel", "pad-head-dim"))
    assert found["use-fused-kernel"].bytes_after < found["use-fused-kernel"].bytes_before


def test_70b_serving_32k_contexts():
    ids, found = run("--preset llama-3-70b --seq-len 32768 --gpu h100-sxm")
    assert "fits" not in ids and "gqa" not in ids  # the model already has 8 KV heads
    before(ids, ("profile-first", "tensor-parallel"), ("tensor-parallel", "kv-cache-quantization"),
           ("kv-cache-quantization", "split-prefill-decode"), ("split-prefill-decode", "log-backend"))
    assert found["tensor-parallel"].bytes_after < found["tensor-parallel"].bytes_before
    assert "window-attention" not in ids  # the weights, not the sequence, are over budget
    inputs = inputs_from_args(build_parser().parse_args("--preset llama-3-70b --seq-len 32768 --gpu h100-sxm".split()))
    tp = dict(found["tensor-parallel"].change)
    both = make_plan(replace(inputs, kv_dtype="int8", **tp), solve=False)
    assert f"With tp={tp['tp']} as well" in found["kv-cache-quantization"].expected_effect
    assert gib(both.total_bytes) in found["kv-cache-quantization"].expected_effect


def test_70b_serving_a_batch_of_32k_contexts_on_h200():
    ids, found = run("--preset llama-2-70b --seq-len 32768 --gpu h200 --batch 8")
    before(ids, ("tensor-parallel", "kv-cache-quantization"), ("kv-cache-quantization", "context-parallel"))
    quant = found["kv-cache-quantization"]
    assert quant.bytes_after < quant.bytes_before and "int8" in quant.title


def test_7b_training_at_16k_tokens():
    ids, found = run("--preset llama-2-7b --seq-len 16384 --mode training --gpu h200")
    assert ids[0] == "profile-first" and "activation-checkpointing" in ids and "tensor-parallel" not in ids
    ckpt = found["activation-checkpointing"]
    assert make_plan(replace(inputs_from_args(build_parser().parse_args(
        "--preset llama-2-7b --seq-len 16384 --mode training --gpu h200".split())),
        checkpointing=dict(ckpt.change)["checkpointing"]), solve=False).fits
    assert ckpt.time_ms_after > ckpt.time_ms_before  # recompute costs time
    ids_80, _ = run("--preset llama-2-7b --seq-len 16384 --mode training --gpu h100-sxm")
    before(ids_80, ("tensor-parallel", "activation-checkpointing"))  # 16 B/param of model state > 80 GB


def test_eager_attention_advice():
    ids, found = run("--preset llama-2-7b --seq-len 4096 --backend eager")
    before(ids, ("eager-to-sdpa", "inplace-masked-fill"))
    assert found["eager-to-sdpa"].bytes_after < found["eager-to-sdpa"].bytes_before
    assert found["eager-to-sdpa"].time_ms_after < found["eager-to-sdpa"].time_ms_before
    ids_train, _ = run("--preset llama-2-7b --seq-len 4096 --backend eager --mode training")
    assert "eager-to-sdpa" in ids_train and "inplace-masked-fill" not in ids_train


def test_dense_mask_and_chunked_prefill_reasons():
    ids, found = run("--preset llama-2-7b --seq-len 8192 --backend math --mask bool")
    assert "flash-ineligible-mask" in ids
    assert found["flash-ineligible-mask"].bytes_after < found["flash-ineligible-mask"].bytes_before
    ids, _ = run("--preset llama-2-7b --seq-len 8192 --backend math --cached-len 4096")
    assert "flash-ineligible-causal" in ids
    ids, _ = run("--preset llama-2-7b --seq-len 8192 --backend math")
    assert "flash-ineligible-mask" not in ids and "flash-ineligible-causal" not in ids


def test_fp32_gqa_falls_to_math_and_expands_kv():
    ids, found = run("--preset llama-3-8b --seq-len 8192 --dtype float32")  # efficient has no GQA in 2.11
    assert "math-gqa-expansion" in ids and "use-fused-kernel" in ids and "flash-ineligible-dtype" in ids
    before(ids, ("use-fused-kernel", "flash-ineligible-dtype"), ("flash-ineligible-dtype", "math-gqa-expansion"))


def test_old_gpu_reason():
    ids, found = run("--preset llama-2-7b --seq-len 4096 --dtype float16 --gpu t4 --backend math")
    assert "flash-ineligible-gpu" in ids
    assert get_gpu(dict(found["flash-ineligible-gpu"].change)["gpu"]).sm >= 80


def test_no_window_advice_for_a_model_already_windowed():
    ids, _ = run("--preset mistral-7b --seq-len 1048576 --gpu h100-sxm")  # every layer has a 4096 window
    assert "fits" not in ids and "window-attention" not in ids
    assert "flex-window" in ids  # its window runs through SDPA as a dense mask
    before(ids, ("reduce-seq-len", "context-parallel"))
    ids, found = run("--preset llama-2-7b --seq-len 524288 --gpu h100-sxm")  # global attention: 256 GiB of KV
    before(ids, ("kv-cache-quantization", "gqa"), ("gqa", "reduce-seq-len"))
    # a window frees nothing at the end of this prefill: HF's cache still holds every prefill token (the window
    # only trims it at the first decode step), so the advice is not offered
    assert "window-attention" not in ids
    ids, found = run("--preset llama-2-7b --seq-len 131072 --batch 1 --mode training --checkpointing full "
                     "--gpu h100-sxm --backend math")
    if "window-attention" in ids:  # training keeps no cache: the window pays through flex
        assert dict(found["window-attention"].change)["backend"] == "flex"


def test_decode_graph_warmup_when_sdpa_decodes_on_cudnn():
    # torch 2.11 on Hopper decodes 16-bit q_len = 1 calls on cuDNN, one graph per new cache length
    ids, found = run("--preset llama-3.1-8b --seq-len 8192 --gpu h200")
    assert "decode-graph-warmup" in ids and "profile-first" not in ids
    advice = found["decode-graph-warmup"]
    assert advice.time_ms_before > 1.5 * advice.time_ms_after
    ids, _ = run("--preset llama-3.1-8b --seq-len 8192 --gpu h200 --backend eager")
    assert "decode-graph-warmup" not in ids
