"""State-space / hybrid plans against the committed H200 measurements (validation/data/h200_hf_hybrid*.csv:
mamba2, falcon_h1, bamba on transformers 5.17's torch fallback), and the reader's refusals. No torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from estimator.model.hybrid import hybrid_from_hf_config
from estimator.model.hybrid_plan import hybrid_plan

DATA = Path(__file__).resolve().parents[1] / "validation" / "data"
SETS = ("h200_hf_hybrid.csv", "h200_hf_hybrid_heldout.csv", "h200_hf_hybrid_heldout2.csv")


@pytest.fixture(scope="module")
def compared():
    pd = pytest.importorskip("pandas")
    from validation.model.hybrid_report import compare

    return compare(pd.concat([pd.read_csv(DATA / name) for name in SETS], ignore_index=True))


def test_every_measured_peak_within_tolerance(compared):
    ran = compared[compared["status"] == "ok"]
    assert len(ran) >= 55 and set(ran["family"]) == {"mamba2-codestral", "falcon-h1", "bamba"}
    assert ran["ok"].all(), ran[~ran["ok"]][["family", "seq_len", "kind", "err"]]


def test_every_oom_is_called_and_the_cache_is_exact(compared):
    oom = compared[compared["status"] == "oom"]
    assert len(oom) == 11 and oom["called"].all()
    pre = compared[(compared["status"] == "ok") & (compared["kind"] == "prefill")]
    tensors = pre[pre["cache_source"] == "tensors"]
    assert len(tensors) == 26 and tensors["cache_exact"].all()


def test_replayed_reserved_bytes_match_the_allocator(compared):
    pre = compared[(compared["status"] == "ok") & (compared["kind"] == "prefill")]
    err = (pre["reserved_replayed_bytes"] / pre["reserved_measured_bytes"] - 1).abs()
    assert err.max() < 0.005


def test_fragmentation_turns_a_fitting_peak_into_does_not_fit():
    """36,000 tokens at 32 heads × 64, state 64: the peak of live tensors fits the H200, but the M·x product needs
    a second 70 GiB segment (measured: out of memory with 64 GiB free)."""
    cfg = {"model_type": "mamba2", "hidden_size": 1024, "num_heads": 32, "head_dim": 64, "n_groups": 2,
           "state_size": 64, "num_hidden_layers": 2, "vocab_size": 32768}
    plan = hybrid_plan(hybrid_from_hf_config(cfg), seq_len=36000)
    assert plan.total_bytes < plan.verdict.capacity_bytes and not plan.fits
    assert not plan.detail["allocator_replay_ran"]


def test_state_is_fixed_per_sequence_and_kv_grows():
    spec = hybrid_from_hf_config({"model_type": "bamba", "num_hidden_layers": 8, "attn_layer_indices": [3, 7]})
    short, long = (hybrid_plan(spec, seq_len=n, mode="decode") for n in (1024, 4096))
    assert short.state_bytes == long.state_bytes == 6 * ((8192 + 2 * 256) * 4 * 2 + 128 * 64 * 256 * 4)
    assert long.kv_cache_bytes == 4097 * 2 * 2 * 8 * 128 * 2


@pytest.mark.parametrize("cfg,field", [({"model_type": "qwen3_next"}, "model_type"),
                                       ({"model_type": "jamba"}, "model_type"),
                                       ({"model_type": "mamba2", "num_heads": 120}, "num_heads"),
                                       ({"model_type": "llama"}, "model_type")])
def test_reader_refuses_by_name(cfg, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        hybrid_from_hf_config(cfg)


@pytest.mark.parametrize("kw,field", [({"kernels": "fast"}, "kernels"), ({"mode": "serve"}, "mode"),
                                      ({"seq_len": 0}, "seq_len"), ({"dtype": "float32"}, "dtype")])
def test_plan_refuses_what_it_does_not_model(kw, field):
    spec = hybrid_from_hf_config({"model_type": "mamba2", "num_hidden_layers": 2})
    with pytest.raises(ValueError, match=f"^{field}:"):
        hybrid_plan(spec, **{"seq_len": 1024, **kw})


def test_plan_cli_prices_a_hybrid_config_and_refuses_what_does_not_apply(tmp_path, capsys):
    import json

    from estimator.cli.advise import main as advise_main
    from estimator.cli.plan import main as plan_main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "bamba", "num_hidden_layers": 4, "attn_layer_indices": [3]}))
    assert plan_main(["--config", str(cfg), "--seq-len", "2048", "--gpu", "h200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    spec = hybrid_from_hf_config(json.loads(cfg.read_text()))
    assert out["params"] == spec.params and out["prefill"]["fit_status"] == "fits"
    assert out["prefill"]["total_bytes"] == hybrid_plan(spec, seq_len=2048, gpu="h200").total_bytes
    assert "torch fallback" in out["path"]
    assert plan_main(["--config", str(cfg), "--seq-len", "2048", "--tp", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --tp:") and len(err.strip().splitlines()) == 1
    assert advise_main(["--config", str(cfg), "--seq-len", "2048", "--gpu", "h200", "--json"]) == 0
    assert [a["id"] for a in json.loads(capsys.readouterr().out)["advice"]] == ["fits"]
    assert advise_main(["--config", str(cfg), "--seq-len", "2048", "--tp", "2"]) == 2
    assert "state-space/hybrid" in capsys.readouterr().err
