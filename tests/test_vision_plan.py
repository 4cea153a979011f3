"""Image plans: parameter counts against transformers, the tower / projector / LM composition, frozen parts, Swin
stage by stage, the CLI flags and JSON, the refusals, and the committed H200 vision sets."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from estimator.cli import advise as advise_cli
from estimator.cli import plan as plan_cli
from estimator.model.hf_config import from_hf_config
from estimator.model.inputs import PlanInputs
from estimator.model.vision import swin_from_hf, vlm_from_hf
from estimator.model.vision_plan import VisionRequest, vision_plan
from estimator.model.vision_presets import VISION_PRESETS
from validation.model.hf_vision import VISION_FAMILIES, vision_config

DATA = Path(__file__).resolve().parent / "data"
VDATA = Path(__file__).resolve().parents[1] / "validation" / "data"


def _request(name="qwen2-vl-2b", mode="inference", **kw):
    spec = VISION_PRESETS[name]
    base_model = spec.lm if hasattr(spec, "lm") else spec.stage_spec(0)
    base = PlanInputs(model=base_model, seq_len=1, mode=mode, gpu="h200", backend=kw.pop("backend", "auto"),
                      batch=kw.pop("batch", 1))
    return VisionRequest(model=spec, base=base, **kw)


@pytest.mark.parametrize("family", sorted(VISION_FAMILIES))
def test_params_equal_what_transformers_allocates(family):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from validation.model.hf_vision import build

    cfg = vision_config(family, 2 if "text_config" in VISION_FAMILIES[family] else None)
    with torch.device("meta"):
        model = build(cfg, "sdpa", torch.bfloat16)
    measured = sum(p.numel() for p in model.parameters())
    if cfg["model_type"] == "vit":
        spec = from_hf_config(cfg)
    elif cfg["model_type"] == "swin":
        spec = swin_from_hf(cfg, family)
    else:
        spec = vlm_from_hf(cfg, family)
    assert spec.params == measured
    del transformers


def test_presets_match_their_configs():
    for name in ("swin-b", "swin-l", "qwen2-vl-2b", "llava-1.5-7b"):
        cfg = vision_config(name)
        spec = swin_from_hf(cfg, name) if name.startswith("swin") else vlm_from_hf(cfg, name)
        assert spec.params == VISION_PRESETS[name].params, name


def test_gemma3_vlm_counts_the_whole_file():
    spec = vlm_from_hf(json.loads((DATA / "gemma-3-12b.config.json").read_text()), "gemma-3-12b")
    assert spec.params == 12_187_325_040  # google/gemma-3-12b-it safetensors total (tests/test_specs_hf.py)
    assert spec.tower.params + spec.projector_params == spec.params - spec.lm.params


def test_unmodelled_vision_tower_is_refused_by_name():
    with pytest.raises(ValueError, match="'idefics3' has a vision tower this planner does not model"):
        vlm_from_hf({"model_type": "idefics3", "vision_config": {}, "text_config": {}}, "x")


def test_vlm_adds_the_tower_the_projector_and_the_image_tokens():
    req = _request(image_size=(1344, 1344), images=2, text_tokens=1000)
    plan = vision_plan(req, solve=False)
    assert plan.tokens["language_model"] == 1000 + 2 * (70 * 70 // 4 + 2)
    names = [c for c, _ in plan.components]
    assert {"vision tower weights", "projector weights", "language model weights"} <= set(names)
    assert plan.total_bytes == sum(b for _, b in plan.components)
    text_only = vision_plan(replace(req, images=0), solve=False)
    assert text_only.total_bytes < plan.total_bytes and text_only.tokens["language_model"] == 1000


def test_freezing_drops_gradients_and_optimizer_state():
    full = vision_plan(_request(mode="training", image_size=(896, 896), text_tokens=512), solve=False)
    frozen = vision_plan(_request(mode="training", image_size=(896, 896), text_tokens=512,
                                  trainable="tower-frozen"), solve=False)
    proj = vision_plan(_request(mode="training", image_size=(896, 896), text_tokens=512, trainable="projector"),
                       solve=False)
    assert full.optimizer_bytes > frozen.optimizer_bytes > proj.optimizer_bytes > 0
    assert full.total_bytes > frozen.total_bytes > proj.total_bytes
    tower = VISION_PRESETS["qwen2-vl-2b"].tower.params
    assert full.optimizer_bytes - frozen.optimizer_bytes == 2 * 4 * tower  # AdamW moments, fp32


def test_swin_stages_and_float_bias_keep_flash_out():
    plan = vision_plan(_request("swin-b", image_size=(896, 896)), solve=False)
    assert [s["tokens"] for s in plan.tokens["stages"]] == [224 * 224, 112 * 112, 56 * 56, 28 * 28]
    assert all(p.plan.selected_backend != "flash" for p in plan.parts)
    flash = vision_plan(_request("swin-b", image_size=(896, 896), backend="flash"), solve=False)
    assert not flash.supported and "float relative-position bias" in flash.verdict and not flash.fits


def test_training_costs_more_and_solvers_answer():
    inf = vision_plan(_request("swin-b", image_size=(1792, 1792)))
    train = vision_plan(_request("swin-b", mode="training", image_size=(1792, 1792)))
    assert train.total_bytes > inf.total_bytes and inf.max_batch >= train.max_batch >= 1


def test_cli_json_has_the_contract_keys_and_tokens(capsys):
    assert plan_cli.main(["--preset", "llava-1.5-7b", "--image-size", "1344", "--images", "2", "--seq-len", "600",
                          "--gpu", "h200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("params", "weights_bytes", "kv_cache_bytes", "kv_cache_bytes_per_token", "attention_scores_bytes",
                "activation_bytes", "gradient_bytes", "optimizer_bytes", "total_bytes", "capacity_bytes", "fits",
                "max_seq_len", "max_batch", "prefill_flops", "decode_flops_per_token", "prefill_time_ms",
                "decode_time_ms_per_token", "attention_share", "ffn_share", "embedding_share", "selected_backend"):
        assert key in out, key
    assert out["tokens"]["vision_encoder"] == 577 and out["tokens"]["language_model"] == 600 + 2 * 576
    assert sum(c["bytes"] for c in out["components"]) == out["total_bytes"]


def test_vit_takes_its_tokens_from_the_image(capsys):
    assert plan_cli.main(["--preset", "vit-h-14", "--image-size", "1024", "--gpu", "h200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"]["vision_encoder"] == 73 * 73 + 1 == out["inputs"]["seq_len"]


@pytest.mark.parametrize("argv, message", [
    (["--preset", "vit-l-16", "--image-size", "1024", "--seq-len", "10"], "--seq-len: a vision encoder's tokens"),
    (["--preset", "llama-3-8b", "--image-size", "1024", "--seq-len", "10"], "--image-size: llama-3-8b is a text"),
    (["--preset", "qwen2-vl-2b", "--image-size", "big"], "--image-size: expected pixels"),
    (["--preset", "qwen2-vl-2b", "--images", "-1", "--seq-len", "10"], "--images: expected 0..256"),
    (["--preset", "swin-b", "--trainable", "projector"], "trainable: tower-frozen and projector apply"),
    (["--preset", "llama-3-8b", "--seq-len", "10", "--trainable", "projector"], "--trainable: applies to"),
    (["--preset", "qwen2-vl-2b", "--tp", "2", "--seq-len", "10"], "tp: tensor and context parallelism"),
])
def test_bad_image_input_is_one_line(argv, message, capsys):
    assert plan_cli.main([*argv, "--gpu", "h200"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_advise_says_where_the_memory_goes(capsys):
    assert advise_cli.main(["--preset", "qwen2-vl-2b", "--image-size", "1344", "--seq-len", "2000",
                            "--mode", "training", "--gpu", "h200", "--json"]) == 0
    ids = [a["id"] for a in json.loads(capsys.readouterr().out)["advice"]]
    assert "vision-memory-split" in ids and "vision-freeze-tower" in ids and "vision-max-pixels" in ids


def test_text_only_says_so(capsys):
    assert plan_cli.main(["--config", str(DATA / "gemma-3-12b.config.json"), "--text-only", "--seq-len", "100",
                          "--gpu", "h200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["assumptions"][0].startswith("Text model only") and "tokens" not in out


@pytest.mark.parametrize("files, least", [
    (["h200_hf_vision_heldout_prefill.csv", "h200_hf_vision_heldout_train.csv"], 0.95),
    (["h200_hf_vision_heldout2_prefill.csv", "h200_hf_vision_heldout2_train.csv"], 0.95),
    (["h200_hf_vision.csv"], 0.70),
])
def test_committed_h200_vision_sets(files, least):
    pd = pytest.importorskip("pandas")
    from validation.model.model_report import compare

    df = pd.concat([pd.read_csv(VDATA / f, dtype=str, keep_default_na=False) for f in files], ignore_index=True)
    result = compare(df)
    ok = result[result["status"] == "ok"]
    assert (ok["within_tolerance"] == True).mean() >= least  # noqa: E712
    oom = result[result["status"] == "oom"]
    assert len(oom) and (oom["plan_fits"] == False).all()  # noqa: E712
    assert (ok["planned_params"] == ok["measured_params"]).all()


def test_vision_set_5_peaks_and_a_frozen_language_model():
    """Held-out set 5 (measured after the Swin and eager time changes): every peak within max(3%, 2 MiB). Its
    LLaVA projector-only step (one image: the frozen LM's backward peak is its end of forward, not the gradient
    phase of a trained LM) was planned 24.8% low before the frozen peak was taken without gradients."""
    pd = pytest.importorskip("pandas")
    from validation.model.model_report import compare

    files = ["h200_hf_vision_heldout5_prefill.csv", "h200_hf_vision_heldout5_train.csv"]
    df = pd.concat([pd.read_csv(VDATA / f, dtype=str, keep_default_na=False) for f in files], ignore_index=True)
    ok = compare(df)
    ok = ok[ok["status"] == "ok"]
    assert len(ok) == 22 and (ok["within_tolerance"] == True).all()  # noqa: E712
    llava = ok[(ok["family"] == "llava-1.5-7b") & (ok["mode"] == "train")]
    assert len(llava) == 1 and abs(float(llava["rel_err"].iloc[0])) < 0.03


PALIGEMMA_448 = {  # google/paligemma-3b-pt-448 config.json, the architecture fields
    "model_type": "paligemma",
    "vision_config": {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27,
                      "num_attention_heads": 16, "image_size": 448, "patch_size": 14, "projection_dim": 2048},
    "text_config": {"model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": 18,
                    "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 257216}}


def test_paligemma_counts_what_transformers_allocates_and_its_tokens():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cfg = transformers.AutoConfig.for_model("paligemma", **{k: v for k, v in PALIGEMMA_448.items()
                                                            if k != "model_type"})
    with torch.device("meta"):
        model = transformers.PaliGemmaForConditionalGeneration(cfg)
    spec = vlm_from_hf(PALIGEMMA_448, "paligemma-448")
    assert spec.params == sum(p.numel() for p in model.parameters())  # SigLIP's pooling head included
    req = VisionRequest(model=spec, base=PlanInputs(model=spec.lm, seq_len=1, gpu="h200"), text_tokens=100)
    assert vision_plan(req, solve=False).tokens["language_model"] == 100 + 1024


def test_qwen25_windowed_blocks_cost_less_than_full_attention():
    from estimator.model.vision import VisionLanguageSpec, VisionTower

    q2 = VISION_PRESETS["qwen2-vl-2b"]
    tower = VisionTower(kind="qwen2_5_vl", layers=32, hidden=1280, heads=16, ffn=3420, temporal_patch=2, merge=2,
                        window_px=112, full_attention_layers=(7, 15, 23, 31))
    q25 = VisionLanguageSpec(name="q25", family="qwen2_5_vl", tower=tower, lm=q2.lm)
    full = VisionLanguageSpec(name="q25-full", family="qwen2_5_vl", tower=replace(tower, window_px=0), lm=q2.lm)
    base = PlanInputs(model=q2.lm, seq_len=1, gpu="h200", backend="eager", mode="training")
    windowed = vision_plan(VisionRequest(model=q25, base=base, image_size=(1344, 1344), text_tokens=64), solve=False)
    dense = vision_plan(VisionRequest(model=full, base=base, image_size=(1344, 1344), text_tokens=64), solve=False)
    assert [p.name for p in windowed.parts][:2] == ["vision tower", "vision tower windowed blocks"]
    assert windowed.parts[1].plan.inputs.seq_len == 64 and windowed.params == dense.params
    # training keeps every block's eager scores: 4 blocks of 4,900² instead of 32; the forward is cheaper too
    assert windowed.total_bytes < dense.total_bytes and windowed.prefill_time_ms < dense.prefill_time_ms


def test_vit_prefill_counts_the_pixels_its_caller_holds():
    """ViT's pixel_values stay referenced for the whole forward (the caller's, and the ViTModel.forward local it
    casts into). Without them every fresh-process ViT SDPA prefill on the H200 sat 0.5-5.3% low (always low, the
    pixels' size: 3·p²/hidden of a residual tensor); with them each is within 0.7%. The planned difference between
    two resolutions' plans carries the pixels exactly."""
    pd = pytest.importorskip("pandas")
    from validation.model.model_report import compare

    files = ["h200_hf_vision_heldout_prefill.csv"] + [f"h200_hf_vision_heldout{k}_prefill.csv" for k in range(2, 7)]
    df = pd.concat([pd.read_csv(VDATA / f, dtype=str, keep_default_na=False) for f in files], ignore_index=True)
    df = df[df["family"].str.startswith("vit") & (df["status"] == "ok")]
    out = compare(df)
    assert len(out) >= 20 and out["rel_err"].astype(float).abs().max() < 0.007


def test_vit_pixel_bytes_follow_batch_resolution_and_dtype():
    from estimator.model.plan import make_plan

    cfg = {"model_type": "vit", "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 16,
           "intermediate_size": 4096, "image_size": 1792, "patch_size": 16}

    def model_level(cfg, batch, dtype):
        model = from_hf_config(cfg, name="vit")
        plan = make_plan(PlanInputs(model=model, seq_len=model.native_tokens, batch=batch, mode="inference",
                                    dtype=dtype, gpu="h200"), solve=False)
        resid = batch * model.native_tokens * 1024 * (4 if dtype == "float32" else 2)
        return plan.activation_detail["model_level_bytes"] - resid

    assert model_level(cfg, 2, "bfloat16") == 2 * 3 * 1792 * 1792 * 2
    # a ViT-H/14 at 1024 px: HF floors the grid to 73 x 73 patches, the pixels are the whole image
    assert model_level({**cfg, "image_size": 1024, "patch_size": 14}, 1, "float32") == 3 * 1024 * 1024 * 4


def test_a_measured_row_with_an_unknown_trainable_is_a_plan_error_naming_the_field():
    pd = pytest.importorskip("pandas")
    from validation.model.model_report import compare

    df = pd.read_csv(VDATA / "h200_hf_vision_heldout8_train.csv", dtype=str, keep_default_na=False).head(1)
    df["trainable"] = "tower-frozen"  # the planner's word, not the harness's (all, lm, projector)
    out = compare(df)
    assert out["plan_error"].iloc[0].startswith("trainable: expected one of all, lm, projector")
