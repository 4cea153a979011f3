"""CPU tests of validation.model.hf_models (tiny families): every code path the H200 runs, bar the CUDA counters."""

import csv
import json

import pytest

pytest.importorskip("transformers")
import torch  # noqa: E402

from validation.model import (
    hf_configs,
    hf_models,
    hf_runs,
    hf_suites,  # noqa: E402
)


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _write_cases(path, cases):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=hf_models.CASE_COLUMNS)
        w.writeheader()
        for c in cases:
            w.writerow({k: c.get(k, "") for k in hf_models.CASE_COLUMNS})
    return str(path)


def _run(tmp_path, cases, *extra, name="out.csv"):
    src = _write_cases(tmp_path / f"cases-{name}", cases)
    out = tmp_path / name
    assert hf_models.main(["--cases", src, "--out", str(out), "--tiny", "--device", "cpu", *extra]) == 0
    return _rows(out)


def C(family="llama-3.1-8b", layers=2, impl="sdpa", mode="train", precision="bf16-mixed", optimizer="adamw",
      ckpt="none", seq=16, batch=2, decode=0, overrides=""):
    return hf_suites._c(family, layers, impl, mode, seq, batch, precision, optimizer, ckpt, decode, overrides)


def test_every_family_builds_tiny_with_its_structure():
    from transformers import AutoModelForCausalLM

    for fam in hf_configs.FAMILIES:
        layers = hf_suites.ARCH_LAYERS.get(fam, 2)
        cfg = hf_configs.family_config(fam, layers, tiny=True)
        model = AutoModelForCausalLM.from_config(hf_configs.to_hf_config(cfg), dtype=torch.float32)
        assert model.config.num_hidden_layers == layers
        assert model.config.model_type == cfg["model_type"]
        kinds = hf_configs.layer_kinds(cfg)
        if getattr(model.config, "layer_types", None) is not None:
            assert list(model.config.layer_types) == kinds, fam
    # both kinds of layer where the family has both
    for fam in ("gemma-2-9b", "gemma-3-12b", "gpt-oss-20b"):
        kinds = hf_configs.layer_kinds(hf_configs.family_config(fam, hf_suites.ARCH_LAYERS[fam]))
        assert {"sliding_attention", "full_attention"} <= set(kinds), fam
    assert hf_configs.family_config("deepseek-v2-lite", 2)["first_k_dense_replace"] == 1
    assert "quantization_config" not in hf_configs.family_config("gpt-oss-20b", 2)
    assert hf_configs.family_config("gpt-oss-20b", 3)["layer_types"] == ["sliding_attention", "full_attention",
                                                                         "sliding_attention"]


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_every_family_trains_and_prefills_and_reports_n_params(tmp_path):
    cases = []
    for fam in hf_configs.FAMILIES:
        impl = hf_suites.ARCH_IMPL.get(fam, "sdpa")
        layers = hf_suites.ARCH_LAYERS.get(fam, 2)
        cases.append(C(fam, layers, impl, "prefill", "bf16-true", seq=24, batch=1, decode=2))
        cases.append(C(fam, layers, impl, "train", "bf16-mixed", seq=24, batch=1))
    cases.append(C("gemma-2-9b", 2, "eager", "train", seq=24, batch=1))
    rows = _run(tmp_path, cases)
    assert [r["status"] for r in rows] == ["ok"] * len(cases), [(r["family"], r["reason"]) for r in rows]
    from transformers import AutoModelForCausalLM

    for r in rows:
        cfg = hf_configs.family_config(r["family"], int(r["layers"]), tiny=True)
        model = AutoModelForCausalLM.from_config(hf_configs.to_hf_config(cfg), dtype=torch.bfloat16)
        assert int(r["n_params"]) == sum(p.numel() for p in model.parameters())
        assert r["model_type"] == cfg["model_type"]
        if r["mode"] == "prefill":
            assert float(r["time_prefill_ms"]) > 0 and float(r["decode_ms_per_token"]) > 0
        else:
            assert float(r["time_step_ms"]) > 0 and r["loss"] not in ("", "nan")
        assert r["peak_bytes"] == "" and r["weights_bytes"] == ""  # no CUDA counters on CPU
    # the prefill and train case of a family share the model only when the load dtype agrees: train bf16-mixed
    # loads fp32, prefill bf16, so each was built
    assert all(float(r["build_s"]) > 0 for r in rows)


def test_each_precision_optimizer_and_checkpointing(tmp_path):
    cases = [C(precision=p) for p in hf_runs.PRECISIONS]
    cases += [C(precision="bf16-mixed", optimizer=o) for o in hf_runs.OPTIMIZERS]
    cases += [C(precision="bf16-master", optimizer="sgd"), C(precision="bf16-mixed", ckpt="hf"),
              C(precision="bf16-true", ckpt="hf"), C(precision="16-mixed", ckpt="hf")]
    rows = _run(tmp_path, cases)
    by = [(r["precision"], r["optimizer"], r["checkpointing"], r["status"], r["reason"]) for r in rows]
    for r in rows:
        if r["optimizer"] == "adamw-fused":
            assert r["status"] == "unsupported" and "CUDA" in r["reason"]
        elif r["optimizer"] == "adamw-8bit":
            try:
                import bitsandbytes  # noqa: F401
            except Exception:  # noqa: BLE001
                assert r["status"] == "unsupported" and r["reason"] == "bitsandbytes not installed"
        elif r["precision"] == "fp8":  # torchao float8 (validation/model/hf_finetune.py): CUDA only in practice
            try:
                import torchao  # noqa: F401
            except Exception:  # noqa: BLE001
                assert r["status"] == "unsupported" and r["reason"] == "torchao not installed"
        else:
            assert r["status"] == "ok", by
            assert int(r["n_timed"]) == 3
            for k in ("time_step1_ms", "time_forward_ms", "time_backward_ms", "time_optimizer_ms", "time_step_ms"):
                assert float(r[k]) > 0
    # consecutive cases with the same load dtype reuse the model (build_s 0)
    assert float(rows[1]["build_s"]) == 0.0 or rows[1]["precision"] != rows[0]["precision"]
    assert any(float(r["build_s"]) == 0.0 for r in rows)


def test_bf16_master_updates_the_bf16_weights_from_fp32_masters():
    from transformers import AutoModelForCausalLM

    dev = hf_runs.Dev("cpu")
    cfg = hf_configs.family_config("llama-3.1-8b", 1, tiny=True)
    model = AutoModelForCausalLM.from_config(hf_configs.to_hf_config(cfg), dtype=torch.bfloat16)
    before = [p.detach().clone() for p in model.parameters()]
    info = {"baseline_bytes": None, "weights_bytes": None, "vocab": cfg["vocab_size"]}
    row = {}
    case = hf_models.normalize_case(C(precision="bf16-master", optimizer="sgd"))
    hf_runs.run_train(model, info, case, dev, row, hf_runs.PhaseBox())
    assert all(p.dtype == torch.bfloat16 and p.grad is None for p in model.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))


def test_errors_do_not_stop_the_run_and_rows_are_flushed(tmp_path, monkeypatch):
    out = tmp_path / "flush.csv"
    seen = []
    real = hf_runs.run_train

    def flaky(model, info, case, dev, row, box):
        seen.append(len(_rows(out)))  # rows already on disk when this case starts
        if case["seq_len"] == 17:
            box.phase = "forward"
            raise RuntimeError("boom\nsecond line")
        if case["seq_len"] == 18:
            box.phase = "backward"
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(model, info, case, dev, row, box)

    monkeypatch.setattr(hf_models, "run_train", flaky)
    cases = [C(seq=16), C(seq=17), C(seq=18), C(seq=19), C(overrides='{"hidden_act": "no-such-act"}'),
             C(precision="bogus"), C(seq=20)]
    src = _write_cases(tmp_path / "c.csv", cases)
    assert hf_models.main(["--cases", src, "--out", str(out), "--tiny", "--device", "cpu"]) == 0
    rows = _rows(out)
    assert seen == [0, 1, 2, 3, 6]  # flushed row by row (the two build errors never reach run_train)
    assert [r["status"] for r in rows] == ["ok", "error", "oom", "ok", "error", "error", "ok"]
    assert rows[1]["reason"] == "forward: RuntimeError: boom" and rows[1]["phase"] == "forward"
    assert rows[2]["phase"] == "backward" and rows[2]["reason"].startswith("OOM in backward")
    assert rows[4]["phase"] == "build" and rows[5]["phase"] == "build"


def test_budget_zero_skips_every_case(tmp_path):
    rows = _run(tmp_path, [C(), C(mode="prefill", precision="bf16-true")], "--budget-s", "0")
    assert [r["status"] for r in rows] == ["skipped_budget"] * 2
    assert rows[0]["family"] == "llama-3.1-8b" and rows[0]["seq_len"] == "16"


def test_dump_configs_round_trip_through_autoconfig(tmp_path):
    from transformers import AutoConfig

    out = tmp_path / "cfg"
    assert hf_models.main(["--suite", "archs", "--dump-configs", str(out), "--list"]) == 0
    files = sorted(p.name for p in out.iterdir())
    assert "gemma-3-12b-L6.json" in files and "gpt-oss-20b-L2.json" in files and len(files) == 7
    for name in files:
        with open(out / name) as fh:
            raw = json.load(fh)
        cfg = AutoConfig.from_pretrained(str(out / name))
        assert cfg.model_type == raw["model_type"]
        assert cfg.num_hidden_layers == raw["num_hidden_layers"] == hf_suites.ARCH_LAYERS[name.rsplit("-L", 1)[0]]
        if getattr(cfg, "layer_types", None) is not None:
            assert len(cfg.layer_types) == cfg.num_hidden_layers
    g3 = AutoConfig.from_pretrained(str(out / "gemma-3-12b-L6.json"))
    assert g3.layer_types.count("full_attention") == 1 and g3.sliding_window == 1024
    # without a suite: every family, at --layers
    out2 = tmp_path / "all"
    assert hf_models.main(["--dump-configs", str(out2), "--layers", "3"]) == 0
    assert len(list(out2.iterdir())) == len(hf_configs.FAMILIES)


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_suites_are_well_formed_and_run_tiny(tmp_path):
    combos = {}
    for name, build in hf_suites.SUITES.items():
        cases = [hf_models.normalize_case(c) for c in build()]
        assert cases, name
        for c in cases:
            assert c["family"] in hf_configs.FAMILIES
            assert c["attn_implementation"] in ("eager", "sdpa", "flex_attention")
            hf_models.load_dtype(c)
            if c["mode"] == "train":
                assert c["precision"] in hf_runs.PRECISIONS and c["optimizer"] in hf_runs.OPTIMIZERS
            # one tiny case per (family, layers, attention, mode, precision, optimizer): the checkpointing and
            # batch variants of each are covered by test_each_precision_optimizer_and_checkpointing
            key = tuple(c[k] for k in ("family", "layers", "attn_implementation", "mode", "precision", "optimizer"))
            if c["attn_implementation"] != "flex_attention":  # flex: no CPU backward; compile too slow here
                layers = min(c["layers"], hf_suites.ARCH_LAYERS.get(c["family"], 2), c["layers"])
                key = (layers,) + key[:1] + key[2:]  # llama's 4/8/16 layers run as 2 here (time is scarce)
                combos.setdefault(key, dict(c, layers=layers, seq_len=16, batch=1,
                                            decode_tokens=min(c["decode_tokens"], 2)))
    assert len(hf_suites.SUITES["recipes"]()) == 4 * 4 * 2 * 3 + 10
    assert sum(c["no_reset"] for c in hf_suites.SUITES["windows-b"]()) == 8
    # every distinct configuration of every suite runs (tiny, short sequences) bar the 16-layer OOM one's size
    rows = _run(tmp_path, list(combos.values()))
    bad = [(r["family"], r["mode"], r["precision"], r["optimizer"], r["reason"]) for r in rows
           if r["status"] not in ("ok", "unsupported")]
    assert not bad, bad
