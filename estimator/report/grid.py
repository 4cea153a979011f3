"""The grid of n (`seq_len`) and batch the estimator is tabulated on for the budget workbook's *Tables* sheet
(`n_grid`, `batch_grid`, `tabulate`), and the interpolation its formulas compute between grid points
(`interpolate`: power law in n, linear in batch), and how far that interpolation can be from the estimator between
grid points (`interpolation_bound`). Pure Python; estimator/report/xlsx.py writes the table.

Each grid row holds the budget components in the plan's order, then the allocator reserve (the step's largest
block, which the verdict keeps free: estimator/model/budget.py `fit_verdict`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence


def n_grid(inputs) -> list[int]:
    """n values: quarter octaves (eighth octaves for training, whose peak moves between the backward and the
    optimizer step) from n/16 to 16·n, whole octaves outside, from max(cp, 16) to 2^24, plus n itself."""
    from estimator.call.config import MAX_SEQ_LEN

    low = max(inputs.cp, 16)
    steps = 8 if inputs.mode == "training" else 4
    ns = {inputs.seq_len}
    for k in range(steps * 4, steps * 24 + 1):  # 2^4 .. 2^24
        n = round(2 ** (k / steps))
        near = inputs.seq_len / 16 <= n <= inputs.seq_len * 16
        if near or k % steps == 0:
            ns.add(n)
    return sorted(n for n in ns if low <= n <= MAX_SEQ_LEN)


def batch_grid(inputs) -> list[int]:
    """Batch values: 1..8 per data-parallel replica, then ×1.5/×2 steps to at least 4× the batch; plus the batch."""
    dp = inputs.dp
    per_replica = list(range(1, 9))
    k = 8
    while k < max(64, 4 * -(-inputs.batch // dp)):
        k = k * 3 // 2 if k * 3 // 2 > k and (k & (k - 1)) == 0 else k * 4 // 3
        per_replica.append(k)
    values = {effective_batch(inputs.batch, dp), *(dp * b for b in per_replica)}
    return sorted(b for b in values if 1 <= b <= 1 << 20)


def effective_batch(batch: int, dp: int) -> int:
    """The plan depends on the batch only through ⌈batch / dp⌉ (per-replica share): that share times dp."""
    return -(-batch // dp) * dp


def tabulate(inputs, plan_fn: Callable, ns: Sequence[int], bs: Sequence[int]) -> dict:
    """Per grid point (n, batch): each budget component's bytes (by position), then the allocator reserve, and
    whether the plan can run."""
    width = None
    values: dict[tuple[int, int], tuple[int, ...]] = {}
    ok: dict[tuple[int, int], int] = {}
    for n in ns:
        for b in bs:
            try:
                plan = plan_fn(dataclasses.replace(inputs, seq_len=n, batch=b))
            except ValueError:
                continue
            row = (*(c.bytes for c in plan.components), plan.allocator_reserve_bytes)
            width = width or len(row)
            if len(row) != width:
                continue
            values[(n, b)], ok[(n, b)] = row, int(bool(plan.supported))
    return {"values": values, "ok": ok, "dp": inputs.dp}


def interpolate(table: dict, ns: Sequence[int], bs: Sequence[int], component: int, n: int, b: int) -> float:
    """What the workbook's formulas compute for one component at (n, b): power law in n, linear in batch
    (linear in n where a neighbour is 0). Mirrors the Tables sheet so tests can check it without a spreadsheet."""
    i = max(0, min(_match(ns, n), len(ns) - 2))
    b = effective_batch(b, table["dp"])
    j = max(0, min(_match(bs, b), len(bs) - 2))

    def at(jj: int) -> float:
        v0 = table["values"][(ns[i], bs[jj])][component]
        v1 = table["values"][(ns[i + 1], bs[jj])][component]
        if v0 > 0 and v1 > 0:
            return v0 * math.exp(math.log(n / ns[i]) / math.log(ns[i + 1] / ns[i]) * math.log(v1 / v0))
        return v0 + (v1 - v0) * (n - ns[i]) / (ns[i + 1] - ns[i])

    a, c = at(j), at(j + 1)
    return round(a + (b - bs[j]) / (bs[j + 1] - bs[j]) * (c - a))


def interpolation_bound(table: dict, ns: Sequence[int], bs: Sequence[int], n: int, b: int) -> int:
    """How far the interpolated total + allocator reserve (what the workbook's verdict compares with the capacity)
    can be from the estimator's own at (n, b): the spread of total + reserve over the neighbouring grid points
    (0 on a grid point). Both lie within that spread when total + reserve grows with n and batch between
    neighbouring points, as memory does (padding can make it dip slightly: estimator/model/solve.py). Mirrors the
    Tables sheet's t_bound."""
    i = max(0, min(_match(ns, n), len(ns) - 2))
    b = effective_batch(b, table["dp"])
    j = max(0, min(_match(bs, b), len(bs) - 2))
    rows = [x for x in (ns[i], ns[i + 1]) if x == n] or [ns[i], ns[i + 1]]
    cols = [y for y in (bs[j], bs[j + 1]) if y == b] or [bs[j], bs[j + 1]]
    corners = [sum(table["values"][(x, y)]) for x in rows[:1] + rows[-1:] for y in cols[:1] + cols[-1:]]
    return max(corners) - min(corners)


def _match(grid: Sequence[int], x: int) -> int:
    """0-based MATCH(x, grid, 1): the last index with grid[i] <= x (0 below the grid)."""
    lo = 0
    for i, g in enumerate(grid):
        if g <= x:
            lo = i
    return lo


def _complete(inputs, plan_fn, ns, bs) -> tuple[list[int], list[int], dict]:
    """The table restricted to the n and batch values every component could be computed at."""
    table = tabulate(inputs, plan_fn, ns, bs)
    ns = [n for n in ns if all((n, b) in table["values"] for b in bs)]
    return ns, list(bs), table

