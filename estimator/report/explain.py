"""Plain-text explanations shared by the CLI table and the plan page: the communication time per kind with its
overlap assumption (estimator/model/comm.py), and how each ZeRO stage moves the budget's components (why a higher
stage can total more: estimator/model/activations.py `training_peak`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from estimator.units import gib

if TYPE_CHECKING:
    from estimator.model.budget import Plan

def decode_split_ms(plan: Plan) -> tuple[float, float]:
    """(host ms, GPU ms) of one decode step (estimator/model/decode_time.py: a step costs max(GPU, kernels × the
    host's per-launch time) + Python); host > GPU means the step is host-bound. (0, 0) without a decode."""
    split = plan.time_split.get("decode", {})
    gpu_ms = sum(v for k, v in split.items() if k not in ("launch_overhead", "python_overhead"))
    return float(split.get("launch_overhead", 0.0)), float(gpu_ms)


def host_bound_decode_note(plan: Plan) -> str:
    """A sentence when the plan's decode step is host-bound, else ''."""
    from estimator.model.decode_time import DECODE_KERNEL_HOST_MS

    host_ms, gpu_ms = decode_split_ms(plan)
    if host_ms <= gpu_ms:
        return ""
    return (f"Decode is host-bound here: a step launches its kernels at about {DECODE_KERNEL_HOST_MS * 1e3:.0f} µs "
            f"each ({host_ms:,.2f} ms of launches against {gpu_ms:,.2f} ms of GPU work), so it barely moves with n "
            "or with the bytes the cache holds.")


KIND_NAMES = {"tp": "tensor parallel", "cp": "context parallel", "dp": "data parallel"}


def _ms(value: float) -> str:
    return f"{value:,.2f} ms"


def communication_lines(plan: Plan) -> list[str]:
    """One line per parallel kind the plan uses: its exposed ms, degree, link and overlap assumption; then the
    total that the prefill or step time includes. Empty on one GPU."""
    from estimator.model.comm import OVERLAP

    comm, inputs = plan.communication, plan.inputs
    links = comm.get("links", {})
    if not links:
        return []
    degree = {"tp": inputs.tp, "cp": inputs.cp, "dp": inputs.dp}
    lines = []
    for kind in ("tp", "cp", "dp"):
        if kind not in links:
            continue
        before = comm.get(f"{kind}_collectives_ms")
        hidden = f" of {_ms(before)} of collectives" if before is not None else ""
        lines.append(f"{KIND_NAMES[kind]} ({kind} {degree[kind]}, {links[kind]}): {_ms(comm.get(kind + '_ms', 0.0))} "
                     f"exposed{hidden}; {OVERLAP[kind]}")
    phase = "training step" if inputs.mode == "training" else "prefill"
    lines.append(f"total exposed communication {_ms(plan.communication_time_ms)}, included in the {phase} time")
    if comm.get("decode_ms_per_token"):
        lines.append(f"decode: {_ms(comm['decode_ms_per_token'])} per token of tp/cp collectives")
    return lines


def zero_lines(plan: Plan, plan_fn: Callable) -> list[str]:
    """Training over data-parallel replicas: the total at each ZeRO stage and the components that move from the
    stage before, with why a stage can total more (its sharded gradient buffers stay allocated through the step,
    while without them gradients are allocated during the backward as activations are freed). Empty otherwise."""
    inputs = plan.inputs
    if inputs.mode != "training" or inputs.dp <= 1:
        return []
    plans = {}
    for stage in range(4):
        try:
            plans[stage] = plan if stage == inputs.zero else plan_fn(dataclasses.replace(inputs, zero=stage))
        except ValueError:
            continue
    lines, previous = [], None
    for stage, p in plans.items():
        mark = " (this plan)" if stage == inputs.zero else ""
        text = f"ZeRO-{stage}{mark}: total {gib(p.total_bytes)}"
        if previous is not None:
            moved = [f"{c.label} {gib(previous.component_bytes(c.key))} → {gib(c.bytes)}" for c in p.components
                     if c.bytes != previous.component_bytes(c.key)]
            text += "; " + ("; ".join(moved) if moved else "no component moves")
            grads_before, grads_now = previous.component_bytes("gradients"), p.component_bytes("gradients")
            if p.total_bytes > previous.total_bytes and grads_now > grads_before:
                text += (" (more than ZeRO-" f"{stage - 1}: its sharded gradient buffers stay allocated through the "
                         "step, so they count at the peak, where without them the gradients are allocated during "
                         "the backward as activations are freed)")
        lines.append(text)
        previous = p
    return lines
