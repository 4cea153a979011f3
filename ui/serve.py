"""The Serve page's pure half (no Streamlit): form values <-> query string, the serving question from them, the
uploaded workload read row by row, a bounded simulation, the figures and the exports. The simulation itself is
estimator/serve/ (docs/contract.md section 6).

Bounds (a browser can start all of this): an uploaded workload is at most UPLOAD_MAX_BYTES and UPLOAD_MAX_ROWS
rows, a synthetic one at most MAX_REQUESTS requests; one simulation stops after MAX_SIM_S seconds of wall time
(checked from its progress callback); the rate sweep is SWEEP_FACTORS simulations; fleet sizing is opt-in and
bounded by estimator/serve/sizing.py's probe budget.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import plotly.graph_objects as go

from estimator.call.config import check_positive_int
from estimator.hardware import get_gpu
from estimator.serve.engines import ENGINES, EngineConfig
from estimator.serve.result import Targets
from estimator.serve.workload import COLUMNS, Request, Workload, parse_length_dist, parse_rate, synthetic_workload
from ui.export import safe_cell

UPLOAD_MAX_BYTES = 5 << 20
UPLOAD_MAX_ROWS = 20_000
MAX_REQUESTS = 20_000
MAX_SIM_S = 60.0
SWEEP_FACTORS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0)
BAD_ROWS_SHOWN = 5
QUERY_PREFIX = "sv_"  # the plan page owns the unprefixed keys (gpu, tp, ...)

# 0 (or "") = the engine's own default for that knob.
DEFAULTS: dict = {
    "engine": "hf-cb", "gpu": "h200", "tp": 1, "memory_fraction": 0.0, "block_size": 0, "max_batch_tokens": 0,
    "num_blocks": 0, "max_seqs": 0, "cuda_graphs": "default", "source": "synthetic", "rate": "2", "requests": 200,
    "prompt_tokens": "lognormal:512:0.8", "output_tokens": "uniform:32:192", "seed": 0, "ttft_p99_ms": 0.0,
    "tpot_p99_ms": 0.0, "price_per_gpu_hour": 0.0,
}
SOURCES = ("synthetic", "upload")
CUDA_GRAPHS = ("default", "on", "off")
_INTS = {"tp": 64, "block_size": 1 << 16, "max_batch_tokens": 1 << 24, "num_blocks": 1 << 30, "max_seqs": 1 << 20,
         "requests": MAX_REQUESTS}
_ZERO_OK = ("block_size", "max_batch_tokens", "num_blocks", "max_seqs")
_FLOATS = {"memory_fraction": 1.0, "ttft_p99_ms": 1e9, "tpot_p99_ms": 1e9, "price_per_gpu_hour": 1e6}


def _coerce(key: str, raw):
    text = str(raw).strip()
    if key in _INTS:
        if key in _ZERO_OK and text in ("", "0"):
            return 0
        return check_positive_int(key, text, _INTS[key])
    if key in _FLOATS:
        try:
            value = float(text or 0)
        except ValueError:
            raise ValueError(f"{key}: expected a number, got {raw!r}") from None
        if not 0 <= value <= _FLOATS[key] or value != value:
            raise ValueError(f"{key}: expected a number in [0, {_FLOATS[key]:g}], got {raw!r}")
        return value
    if key == "seed":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"seed: expected an integer, got {raw!r}") from None
    choices = {"engine": tuple(ENGINES), "source": SOURCES, "cuda_graphs": CUDA_GRAPHS}
    if key in choices:
        if text.lower() not in choices[key]:
            raise ValueError(f"{key}: unknown value {raw!r}; expected one of {', '.join(choices[key])}")
        return text.lower()
    if key == "gpu":
        return get_gpu(text).name
    if key == "rate":
        parse_rate(text)
        return text
    if key in ("prompt_tokens", "output_tokens"):
        parse_length_dist(text, key)
        return text
    raise ValueError(f"{key}: not a parameter of this page")


def values_from_query(params: Mapping) -> tuple[dict, list[str]]:
    """Serve form values from the query string (sv_* keys; defaults for the rest); never raises."""
    values, errors = dict(DEFAULTS), []
    for full, raw in params.items():
        if not full.startswith(QUERY_PREFIX) or full[len(QUERY_PREFIX):] not in DEFAULTS:
            continue
        key = full[len(QUERY_PREFIX):]
        raw = raw[-1] if isinstance(raw, list | tuple) else raw
        try:
            values[key] = _coerce(key, raw)
        except ValueError as exc:
            errors.append(f"URL parameter {QUERY_PREFIX}{exc}")
    return values, errors


def query_from_values(values: Mapping) -> dict[str, str]:
    """Form values -> sv_* query parameters (every field, so a shared URL pins the whole question)."""
    out = {}
    for key in DEFAULTS:
        if key in values:
            value = values[key]
            out[QUERY_PREFIX + key] = f"{value:g}" if isinstance(value, float) else str(value)
    return out


def check_values(values: Mapping) -> dict:
    """Every form value checked (ValueError naming the field); returns the typed values."""
    return {key: _coerce(key, values.get(key, DEFAULTS[key])) for key in DEFAULTS}


def engine_config(values: Mapping) -> EngineConfig:
    graphs = {"default": None, "on": True, "off": False}[values["cuda_graphs"]]
    return EngineConfig(engine=values["engine"], memory_fraction=values["memory_fraction"] or None,
                        block_size=values["block_size"] or None, max_batch_tokens=values["max_batch_tokens"] or None,
                        num_blocks=values["num_blocks"] or None, max_seqs=values["max_seqs"] or None,
                        cuda_graphs=graphs)


def targets(values: Mapping) -> Targets:
    return Targets(ttft_p99_ms=values["ttft_p99_ms"] or None, tpot_p99_ms=values["tpot_p99_ms"] or None)


def synthetic(values: Mapping) -> Workload:
    return synthetic_workload(rate_per_s=values["rate"], requests=values["requests"],
                              prompt_tokens=values["prompt_tokens"], output_tokens=values["output_tokens"],
                              seed=values["seed"])


def parse_upload(data: bytes, source: str = "workload") -> tuple[Workload, list[str]]:
    """A workload CSV (columns arrival_s,prompt_tokens,output_tokens) read row by row: a bad row (a bad cell,
    too few cells, an arrival earlier than the row kept before it) costs only itself, named by its line number.
    ValueError when the file as a whole cannot be used (size, encoding, header, no good row, too many rows)."""
    if len(data) > UPLOAD_MAX_BYTES:
        raise ValueError(f"workload: the file is {len(data) / 2**20:,.2f} MiB; the limit is "
                         f"{UPLOAD_MAX_BYTES / 2**20:,.0f} MiB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError("workload: the file is not UTF-8 text") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise ValueError(f"workload: empty; expected a header {','.join(COLUMNS)} and one request per line")
    if len(lines) - 1 > UPLOAD_MAX_ROWS:
        raise ValueError(f"workload: {len(lines) - 1:,} rows; the page takes at most {UPLOAD_MAX_ROWS:,}")
    header = [h.strip().lower() for h in next(csv.reader([lines[0][1]]))]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ValueError(f"workload: missing column(s) {', '.join(missing)}; the header must name {','.join(COLUMNS)}")
    index = {c: header.index(c) for c in COLUMNS}
    requests, bad = [], []
    previous = 0.0
    try:
        parsed = list(csv.reader([line for _, line in lines[1:]]))
    except csv.Error as exc:
        raise ValueError(f"workload: not a CSV file ({exc})") from None
    for (number, _), row in zip(lines[1:], parsed, strict=False):
        if len(row) < len(header):
            bad.append(f"line {number}: {len(row)} cells, the header has {len(header)}")
            continue
        try:
            req = Request(request_id=len(requests), arrival_s=row[index["arrival_s"]].strip(),
                          prompt_tokens=row[index["prompt_tokens"]].strip(),
                          output_tokens=row[index["output_tokens"]].strip())
        except ValueError as exc:
            bad.append(f"line {number}: {exc}")
            continue
        if req.arrival_s < previous:
            bad.append(f"line {number}: arrival_s {req.arrival_s:g} is earlier than the row kept above it "
                       f"({previous:g}); rows must be sorted by arrival")
            continue
        previous = req.arrival_s
        requests.append(req)
    if not requests:
        raise ValueError(f"workload: no usable row ({len(bad)} bad" + (f", first {bad[0]}" if bad else "") + ")")
    return Workload(requests=tuple(requests), source=source), bad


def serve_inputs(plan, values: Mapping, workload: Workload):
    """The serving question: the plan's model and dtype on this page's GPU and tp."""
    from estimator.serve.capacity import ServeInputs

    plan = replace(plan, gpu=values["gpu"], tp=values["tp"], gpus=values["tp"], cp=1, mode="inference", batch=1)
    return ServeInputs(plan=plan, engine=engine_config(values), workload=workload, targets=targets(values),
                       price_per_gpu_hour=values["price_per_gpu_hour"] or None)


def bounded(progress: Callable[[float], None] | None, limit_s: float = MAX_SIM_S) -> Callable[[float], None]:
    """A progress callback that also stops the simulation (ValueError) once `limit_s` seconds have passed."""
    start = time.perf_counter()

    def call(fraction: float) -> None:
        if time.perf_counter() - start > limit_s:
            raise ValueError(f"requests: the simulation ran past {limit_s:g} s; simulate fewer requests")
        if progress is not None:
            progress(min(max(fraction, 0.0), 1.0))

    return call


def simulate(inputs, progress=None, limit_s: float = MAX_SIM_S):
    """serve() within the time bound."""
    from estimator.serve.capacity import serve

    return serve(inputs, progress=bounded(progress, limit_s))


def sweep(inputs, progress=None, limit_s: float = MAX_SIM_S) -> list[dict]:
    """Throughput and P99 at SWEEP_FACTORS times the workload's rate (empty for an offline batch)."""
    from estimator.serve.sizing import rate_sweep, workload_rate

    own = workload_rate(inputs.workload)
    if own is None:
        return []
    check = bounded(None, limit_s)
    points = []
    for i, factor in enumerate(SWEEP_FACTORS):
        check(0.0)
        points.extend(rate_sweep(inputs, [own * factor]))
        if progress is not None:
            progress((i + 1) / len(SWEEP_FACTORS))
    return points


def knee(points: list[dict]) -> dict | None:
    """The knee of the sweep: with targets, the highest rate that meets them; without, the last rate before
    P99 TTFT passes twice its value at the lowest rate. None when no point qualifies."""
    if not points:
        return None
    if any(p["meets_targets"] is not None for p in points):
        ok = [p for p in points if p["meets_targets"]]
        return max(ok, key=lambda p: p["rate_per_s"]) if ok else None
    base = points[0]["ttft_p99_ms"]
    best = None
    for p in sorted(points, key=lambda p: p["rate_per_s"]):
        if base is None or p["ttft_p99_ms"] is None or p["ttft_p99_ms"] > 2 * base:
            break
        best = p
    return best


# ---------------------------------------------------------------------------------------------------- figures

def latency_cdf(values_ms: list, *, title: str, target_ms: float | None = None) -> go.Figure:
    """The empirical CDF of a latency (ms), with the P99 target as a vertical line."""
    xs = sorted(v for v in values_ms if v is not None and math.isfinite(v))
    n = len(xs)
    fig = go.Figure(go.Scatter(x=xs, y=[(i + 1) / n for i in range(n)], mode="lines", name=title,
                               line={"shape": "hv"}, hovertemplate="%{x:,.1f} ms: %{y:.1%}<extra></extra>"))
    if target_ms:
        fig.add_trace(go.Scatter(x=[target_ms, target_ms], y=[0, 1], mode="lines", name=f"P99 target {target_ms:g} ms",
                                 line={"dash": "dash", "color": "#d62728"}))
    fig.add_trace(go.Scatter(x=[xs[0], xs[-1]] if xs else [], y=[0.99, 0.99], mode="lines", name="P99",
                             line={"dash": "dot", "color": "#7f7f7f"}))
    fig.update_layout(title=title, xaxis_title="ms", yaxis_title="share of requests", yaxis_tickformat=".0%",
                      margin={"t": 50, "b": 40})
    return fig


def rate_figure(points: list[dict], knee_point: dict | None, *, ttft_target: float | None = None,
                tpot_target: float | None = None) -> go.Figure:
    """Output throughput (left axis) and P99 TTFT / TPOT (right axis, log) against the request rate, with the
    knee marked."""
    rates = [p["rate_per_s"] for p in points]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=rates, y=[p["throughput_output_tokens_per_s"] for p in points], name="output tokens/s",
                             mode="lines+markers"))
    fig.add_trace(go.Scatter(x=rates, y=[p["ttft_p99_ms"] for p in points], name="P99 TTFT (ms)",
                             mode="lines+markers", yaxis="y2"))
    fig.add_trace(go.Scatter(x=rates, y=[p["tpot_p99_ms"] for p in points], name="P99 TPOT (ms)",
                             mode="lines+markers", yaxis="y2"))
    for value, label in ((ttft_target, "TTFT target"), (tpot_target, "TPOT target")):
        if value and rates:
            fig.add_trace(go.Scatter(x=[min(rates), max(rates)], y=[value, value], name=f"{label} {value:g} ms",
                                     mode="lines", yaxis="y2", line={"dash": "dash"}))
    if knee_point is not None:
        fig.add_trace(go.Scatter(x=[knee_point["rate_per_s"]], y=[knee_point["throughput_output_tokens_per_s"]],
                                 name=f"knee {knee_point['rate_per_s']:.3g} req/s", mode="markers",
                                 marker={"size": 14, "symbol": "star", "color": "#d62728"}))
    fig.update_layout(title="Throughput and P99 against request rate", xaxis_title="requests per second",
                      yaxis={"title": "output tokens/s"},
                      yaxis2={"title": "P99 ms", "overlaying": "y", "side": "right", "type": "log"},
                      margin={"t": 50, "b": 40}, legend={"orientation": "h", "y": -0.25})
    return fig


def timeline_figure(timeline: Mapping, num_blocks: int) -> go.Figure:
    """KV occupancy (share of the pool's blocks) and the running / waiting queues over time."""
    t = list(timeline.get("time_s", []))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=t, y=[b / num_blocks if num_blocks else 0 for b in timeline.get("kv_blocks_used", [])],
                             name="KV blocks in use", mode="lines", hovertemplate="%{y:.1%}<extra></extra>"))
    fig.add_trace(go.Scatter(x=t, y=list(timeline.get("running", [])), name="running", mode="lines", yaxis="y2"))
    fig.add_trace(go.Scatter(x=t, y=list(timeline.get("waiting", [])), name="waiting", mode="lines", yaxis="y2"))
    fig.update_layout(title="KV occupancy and queue over time", xaxis_title="s",
                      yaxis={"title": "share of KV blocks", "tickformat": ".0%", "range": [0, 1.05]},
                      yaxis2={"title": "requests", "overlaying": "y", "side": "right", "rangemode": "tozero"},
                      margin={"t": 50, "b": 40}, legend={"orientation": "h", "y": -0.25})
    return fig


def sizing_rows(sizing: Mapping) -> list[dict]:
    """The fleet sizing's choices as table rows (fewest GPUs first)."""
    return [{"gpu": c["gpu"], "tp": c["tp"], "replicas": c["replicas"], "gpus": c["gpus"],
             "max rate per replica (req/s)": c["max_rate_per_replica"],
             "cost per 1M output tokens": c.get("cost_per_million_output_tokens")} for c in sizing.get("choices", [])]


# ---------------------------------------------------------------------------------------------------- exports

SUMMARY_KEYS = ("engine", "gpu", "tp", "num_blocks", "block_size", "max_batch_tokens", "max_seqs", "kv_cache_bytes",
                "kv_cache_tokens", "peak_bytes", "capacity_bytes", "throughput_output_tokens_per_s",
                "throughput_tokens_per_s", "meets_targets")


def summary_rows(result: Mapping, values: Mapping, model_name: str) -> list[tuple[str, object]]:
    rows = [("model", model_name)] + [(f"input {k}", values[k]) for k in DEFAULTS if k in values]
    rows += [(k, result.get(k)) for k in SUMMARY_KEYS if k in result]
    for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
        for p, v in (result.get(name) or {}).items():
            rows.append((f"{name} {p}", v))
    rows += [(f"memory {c['component']}", c["bytes"]) for c in result.get("memory", {}).get("components", [])]
    return rows


def result_csv(result: Mapping, values: Mapping, model_name: str) -> str:
    """The summary (key, value) then one row per request; every cell neutralised (ui.export.safe_cell)."""
    buffer = io.StringIO()
    w = csv.writer(buffer)
    w.writerow(["key", "value"])
    for key, value in summary_rows(result, values, model_name):
        w.writerow([safe_cell(key), safe_cell(value)])
    requests = result.get("requests") or []
    if requests:
        w.writerow([])
        w.writerow(list(requests[0]))
        for r in requests:
            w.writerow([safe_cell(v) for v in r.values()])
    return buffer.getvalue()


def result_xlsx(result: Mapping, values: Mapping, model_name: str, points: list[dict] = (),
                sizing: Mapping | None = None) -> bytes:
    """A workbook: Summary, Requests, Rate sweep and Sizing sheets. Text is written as strings, never formulas."""
    import xlsxwriter

    buffer = io.BytesIO()
    book = xlsxwriter.Workbook(buffer, {"in_memory": True, "strings_to_formulas": False, "strings_to_urls": False})

    def sheet(name: str, header: list, rows: list[list]) -> None:
        ws = book.add_worksheet(name)
        for c, h in enumerate(header):
            ws.write_string(0, c, str(h))
        for r, row in enumerate(rows, start=1):
            for c, v in enumerate(row):
                if isinstance(v, bool) or v is None or not isinstance(v, int | float):
                    ws.write_string(r, c, "" if v is None else str(v))
                else:
                    ws.write_number(r, c, v)

    sheet("Summary", ["key", "value"], [list(r) for r in summary_rows(result, values, model_name)])
    requests = result.get("requests") or []
    if requests:
        sheet("Requests", list(requests[0]), [list(r.values()) for r in requests])
    if points:
        sheet("Rate sweep", list(points[0]), [list(p.values()) for p in points])
    if sizing:
        rows = sizing_rows(sizing)
        if rows:
            sheet("Sizing", list(rows[0]), [list(r.values()) for r in rows])
    book.close()
    return buffer.getvalue()
