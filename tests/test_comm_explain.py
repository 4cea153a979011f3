"""Communication time and its overlap assumption on the page and in the CLI table; ZeRO stages explained by the
components each one moves (why ZeRO-2 can total more than ZeRO-1; why DP time is the same for every stage)."""

from __future__ import annotations

from estimator.model.budget import budget
from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.presets import get_preset
from estimator.report.explain import communication_lines, zero_lines

PARALLEL = dict(seq_len=8192, batch=8, gpu="h100-sxm", gpus=8, tp=2, cp=2, mode="training", zero=3)


def parallel_plan(**changes):
    return make_plan(PlanInputs(model=get_preset("llama-3-8b"), **{**PARALLEL, **changes}), solve=False)


def test_communication_lines_give_each_kind_its_exposed_time_and_overlap():
    plan = parallel_plan()
    lines = communication_lines(plan)
    tp = next(line for line in lines if line.startswith("tensor parallel (tp 2"))
    assert f"{plan.communication['tp_ms']:,.2f} ms exposed" in tp and "not overlapped" in tp
    dp = next(line for line in lines if line.startswith("data parallel (dp 2"))
    assert f"{plan.communication['dp_ms']:,.2f} ms exposed of" in dp and "every ZeRO stage" in dp
    assert plan.communication["dp_collectives_ms"] > plan.communication["dp_ms"]  # the backward hides most
    assert lines[-1].startswith(f"total exposed communication {plan.communication_time_ms:,.2f} ms")
    assert communication_lines(parallel_plan(gpus=1, tp=1, cp=1, zero=0)) == []


def test_zero_lines_explain_why_zero2_totals_more_than_zero1():
    plan = parallel_plan()
    lines = zero_lines(plan, budget)
    totals = [parallel_plan(zero=z).total_bytes for z in range(4)]
    assert totals[2] > totals[1]  # the case the explanation is for
    z2 = next(line for line in lines if line.startswith("ZeRO-2"))
    assert "gradients" in z2 and "more than ZeRO-1" in z2 and "allocated through the step" in z2
    assert "optimizer state" in next(line for line in lines if line.startswith("ZeRO-1"))
    assert "(this plan)" in next(line for line in lines if line.startswith("ZeRO-3"))
    assert zero_lines(parallel_plan(mode="inference", zero=0), budget) == []


def test_cli_table_shows_communication_and_zero_stages(capsys):
    from estimator.cli.plan import main

    args = ["--preset", "llama-3-8b", *(f"--{k.replace('_', '-')}={v}" for k, v in PARALLEL.items())]
    assert main(args) == 0
    table = capsys.readouterr().out
    plan = parallel_plan()
    assert "communication per GPU" in table and f"{plan.communication['tp_ms']:,.2f} ms exposed" in table
    assert "ZeRO stages over the 2 data-parallel replicas" in table and "more than ZeRO-1" in table


def test_plan_page_shows_communication_and_zero_stages():
    from streamlit.testing.v1 import AppTest

    from tests.test_app_pages import ROOT, TIMEOUT, plain

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"preset": "llama-3-8b", **{k: str(v) for k, v in PARALLEL.items()}})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    plan = parallel_plan()
    assert {"Communication", "ZeRO stages"} <= {h.value for h in at.subheader}
    text = " ".join(plain(m.value) for m in at.markdown)
    assert f"{plan.communication['tp_ms']:,.2f} ms exposed" in text and "more than ZeRO-1" in text
