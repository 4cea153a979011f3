"""The hybrid training step (estimator/model/hybrid_train.py, autograd_replay.py, ssm_train.py) against the
storages PyTorch really allocates in a CPU training step (validation/model/live_bytes.py), the engine's rules on
small graphs, the H200 fit set, and `plan --mode training`. Small shapes: seconds."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from estimator.model.autograd_replay import MUL, NEW, VIEW, Graph
from estimator.model.hybrid import hybrid_from_hf_config
from estimator.model.hybrid_plan import hybrid_plan
from validation.model.hybrid_report import compare


def test_broadcast_mul_backward_holds_both_product_sized_gradients():
    g = Graph()
    g.tensor("a", 100, grad=True)
    g.tensor("b", 10, grad=True)
    g.op("p", 1000, ("a", "b"), kind=MUL, saves=("a", "b"))
    g.op("s", 10, ("p",), kind=VIEW)
    g.drop("p")
    base = g.live
    g.backward("s")
    # root grad (10) + two 1000-byte gradients before sum_to + the first reduced one (100)
    assert g.trace.peak == base + 10 + 2 * 1000 + 100


def test_view_gradients_alias_and_second_gradients_add_out_of_place():
    g = Graph()
    g.tensor("x", 64, grad=True)
    g.op("y", 64, ("x",), kind=NEW, saves=("x",))
    g.op("z", 64, ("x", "y"), kind=VIEW)  # x + y: both gradients are the incoming one
    g.drop("y")
    before = g.live
    g.backward("z")
    # z's gradient (64), y's backward makes x's second gradient (64), the out-of-place sum (64)
    assert g.trace.peak == before + 3 * 64


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from estimator.hardware import get_gpu  # noqa: E402
from estimator.model.hybrid_train import train_graph  # noqa: E402
from estimator.model.ssm_mamba2 import MambaMixerShape  # noqa: E402
from estimator.model.ssm_train import mixer_train  # noqa: E402
from validation.model.hf_configs import family_config, to_hf_config  # noqa: E402
from validation.model.live_bytes import LiveBytes  # noqa: E402


@pytest.mark.parametrize("h,P,n,g,chunk,b,L", [(4, 8, 16, 1, 16, 1, 64), (8, 16, 32, 2, 32, 1, 100),
                                               (4, 8, 16, 1, 16, 2, 50)])
def test_mixer_training_step_matches_the_tracked_storages(h, P, n, g, chunk, b, L):
    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    cfg = Mamba2Config(num_heads=h, head_dim=P, hidden_size=h * P // 2, expand=2, state_size=n, n_groups=g,
                       num_hidden_layers=1, vocab_size=64, chunk_size=chunk)
    mixer = Mamba2Mixer(cfg, 0).to(torch.bfloat16).train()
    x = torch.randn(b, L, cfg.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    with LiveBytes() as lb:
        y = mixer(x)
        y.backward(torch.ones_like(y))
    shape = MambaMixerShape(hidden=cfg.hidden_size, heads=h, head_dim=P, groups=g, state=n, conv_kernel=4,
                            chunk=chunk)
    graph = Graph()
    xb = b * L * cfg.hidden_size * 2
    graph.tensor("x", xb, grad=True)
    graph.backward(mixer_train(graph, shape, b, L, 2, "x", 0))
    planned = graph.trace.peak - xb  # x was made before the tracker
    assert abs(planned - lb.peak) <= 0.005 * lb.peak, (planned, lb.peak, lb.peak_op)  # (heads,)-sized leaves


@pytest.mark.parametrize("family,layers,L,b", [("mamba2-codestral", 2, 100, 1), ("falcon-h1", 2, 100, 1),
                                               ("bamba", 2, 40, 2)])
def test_whole_model_training_step_matches_the_tracked_storages(family, layers, L, b):
    from transformers import AutoModelForCausalLM

    cfg = family_config(family, layers, None, tiny=True)
    impl = "eager" if cfg["model_type"] == "mamba2" else "sdpa"
    model = AutoModelForCausalLM.from_config(to_hf_config(cfg), attn_implementation=impl,
                                             dtype=torch.bfloat16).train()
    model.config.use_cache = False
    ids = torch.randint(0, cfg["vocab_size"], (b, L))
    with LiveBytes() as lb:
        out = model(input_ids=ids, labels=ids)
        loss = out.loss
        del out
        loss.backward()
    graph = train_graph(hybrid_from_hf_config(cfg), b, L, 2, get_gpu("h200"))
    planned = graph.trace.peak - 8 * b * L  # the ids were made before the tracker
    assert abs(planned / lb.peak - 1) < 0.005, (planned, lb.peak, lb.peak_op)
    assert graph.param_grad_bytes <= sum(p.numel() for p in model.parameters()) * 2


def test_training_plan_against_the_h200_fit_set():
    res = compare(pd.read_csv("validation/data/h200_hf_hybrid_train_fit.csv"))
    ran, oom = res[res["status"] == "ok"], res[res["status"] == "oom"]
    assert len(ran) == 7 and bool(ran["ok"].all()) and ran["err"].abs().max() < 0.01
    assert len(oom) == 7 and bool(oom["called"].all())
    assert (ran["planned_fit"] == "fits").all()


def test_plan_cli_training(capsys):
    from estimator.cli.plan import main as plan_main

    args = ["--preset", "mamba2-default", "--seq-len", "1024", "--gpu", "h200", "--mode", "training"]
    assert plan_main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    spec = hybrid_from_hf_config({"model_type": "mamba2"})
    plan = hybrid_plan(spec, seq_len=1024, gpu="h200", mode="training")
    assert out["training"]["total_bytes"] == plan.total_bytes
    assert out["training"]["optimizer_bytes"] == 2 * spec.params * 2  # AdamW's two moments in bf16
    for extra in (["--precision", "bf16-mixed"], ["--checkpointing", "hf"], ["--optimizer", "adamw-8bit"]):
        assert plan_main(args + extra) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --") and len(err.strip().splitlines()) == 1, err


def test_time_band_holds_the_committed_rows_and_grows_with_the_work():
    res = compare(pd.concat([pd.read_csv(f"validation/data/{name}.csv") for name in
                             ("h200_hf_hybrid", "h200_hf_hybrid_heldout", "h200_hf_hybrid_train_fit")]))
    timed = res[res["time_ratio"].notna()]
    assert len(timed) >= 30 and bool(timed["time_in_band"].astype(bool).all())
    spec = hybrid_from_hf_config({"model_type": "mamba2", "num_hidden_layers": 2})
    short, long = (hybrid_plan(spec, seq_len=n, gpu="h200", mode="training") for n in (1024, 4096))
    assert 3.0 < long.time_ms / short.time_ms < 5.0
    lo, hi = long.time_band_ms
    assert lo < long.time_ms < hi
    assert hybrid_plan(spec, seq_len=1024, gpu="h200", mode="decode").time_ms is None


def test_reduce_last_rate_is_the_measured_points_between_them():
    from estimator.model.hybrid_time import REDUCE_LAST_READ_BYTES_PER_S, reduce_last_rate

    for n, rate in REDUCE_LAST_READ_BYTES_PER_S:
        assert reduce_last_rate(n) == rate
    assert reduce_last_rate(96) == (1.15e12 + 2.21e12) / 2
    assert reduce_last_rate(16) == 0.61e12 / 2 and reduce_last_rate(1024) == 3.2e12


def test_held_out_set_3():
    """Measured after the last model change: training, long prefill with cache state, decode, OOMs, time."""
    res = compare(pd.read_csv("validation/data/h200_hf_hybrid_heldout3.csv"))
    ran = res[res["status"] == "ok"]
    assert len(ran) == 25 and bool(ran["ok"].all()) and set(ran["family"]) == {"mamba2-codestral", "falcon-h1",
                                                                                "bamba"}
    assert bool(ran[ran["kind"] == "prefill"]["cache_exact"].astype(bool).all())
    assert bool(res[res["status"] == "oom"]["called"].all())
    assert bool(ran[ran["time_ratio"].notna()]["time_in_band"].astype(bool).all())
