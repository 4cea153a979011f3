"""Load test: N concurrent sessions re-planning against `streamlit run` on loopback for a while; zero errors expected.
Prints one JSON object (median and worst re-run, errors).

    taskset -c 0,1 python -m bench.bench_load                 # 20 sessions, 60 s
    python -m bench.bench_load --sessions 5 --seconds 10      # a quick check

Each session speaks Streamlit's own websocket protocol (what the browser's frontend does, without rendering): it
opens /_stcore/stream, asks for the planning page, then submits the form again and again with a new n (the
`plan_seq_len` number input and the form's Plan button, found by their keys in the page's elements) and times
each re-run from the request to the server's `script_finished`. An error is an exception element in the page, a
script that did not finish cleanly, a total that did not change with n, or a dropped connection.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, log_path: Path) -> subprocess.Popen:
    log = open(log_path, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port",
                             str(port), "--server.address", "127.0.0.1", "--server.headless", "true"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"streamlit did not start; see {log_path}")


class Session:
    def __init__(self, port: int):
        self.port = port
        self.ids: dict[str, str] = {}
        self.metrics: dict[str, str] = {}
        self.exceptions: list[str] = []

    async def connect(self) -> None:
        from websockets.asyncio.client import connect  # Streamlit's own server dependency

        self.ws = await connect(f"ws://127.0.0.1:{self.port}/_stcore/stream", subprotocols=["streamlit"],
                                max_size=64 << 20, origin=f"http://127.0.0.1:{self.port}")

    async def rerun(self, widgets=()) -> tuple[float, str]:
        """Send one rerun request; read until script_finished. Returns (seconds, finish status)."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = BackMsg()
        msg.rerun_script.query_string = ""
        for wid, kind, value in widgets:
            state = msg.rerun_script.widget_states.widgets.add()
            state.id = wid
            setattr(state, kind, value)
        self.exceptions.clear()
        t0 = time.perf_counter()
        await self.ws.send(msg.SerializeToString())
        while True:
            raw = await self.ws.recv()
            fwd = ForwardMsg()
            fwd.ParseFromString(raw)
            kind = fwd.WhichOneof("type")
            if kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                self._element(fwd.delta.new_element)
            elif kind == "script_finished":
                status = ForwardMsg.ScriptFinishedStatus.Name(fwd.script_finished)
                if status == "FINISHED_EARLY_FOR_RERUN":
                    continue
                return time.perf_counter() - t0, status

    def _element(self, el) -> None:
        which = el.WhichOneof("type")
        if which == "exception":
            self.exceptions.append(el.exception.message[:200])
        elif which == "number_input" and el.number_input.id.endswith("plan_seq_len"):
            self.ids["seq_len"] = el.number_input.id
        elif which == "button" and el.button.label == "Plan":
            self.ids["plan"] = el.button.id
        elif which == "metric":
            self.metrics[el.metric.label] = el.metric.body


async def run_session(port: int, seconds: float, seed: int, out: dict) -> None:
    rng = random.Random(seed)
    s = Session(port)
    try:
        await s.connect()
        _, status = await s.rerun()
        if "seq_len" not in s.ids or "plan" not in s.ids:
            raise RuntimeError(f"the plan form was not found ({status})")
        end = time.monotonic() + seconds
        last = None
        while time.monotonic() < end:
            n = rng.choice([2048, 4096, 6000, 8192, 12000, 16384, 24000, 32768, 50000, 65536])
            dt, status = await s.rerun([(s.ids["seq_len"], "int_value", n), (s.ids["plan"], "trigger_value", True)])
            out["samples"].append(dt)
            total = s.metrics.get("total per GPU")
            if s.exceptions or status != "FINISHED_SUCCESSFULLY" or total is None:
                out["errors"].append(f"n={n}: {status} {s.exceptions[:1]} total={total}")
            elif last is not None and n != last[0] and total == last[1]:
                out["errors"].append(f"n={n}: the total did not change from n={last[0]}")
            last = (n, total)
    except Exception as exc:  # noqa: BLE001 - every failure of a session is an error of the load test
        out["errors"].append(f"session {seed}: {type(exc).__name__}: {exc}")
    finally:
        if getattr(s, "ws", None) is not None:
            await s.ws.close()


async def load(port: int, sessions: int, seconds: float) -> dict:
    out: dict = {"samples": [], "errors": []}
    await asyncio.gather(*(run_session(port, seconds, i, out) for i in range(sessions)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--url-port", type=int, default=None, help="use a running server on this port")
    args = parser.parse_args(argv)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / "bench_load_streamlit.log"
    port = args.url_port or _free_port()
    proc = None if args.url_port else start_server(port, log)
    try:
        t0 = time.perf_counter()
        out = asyncio.run(load(port, args.sessions, args.seconds))
        wall = time.perf_counter() - t0
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=15)
    samples = sorted(out["samples"])
    result = {"sessions": args.sessions, "seconds": round(wall, 1), "reruns": len(samples),
              "errors": len(out["errors"]), "error_examples": out["errors"][:5],
              "rerun_ms_median": round(statistics.median(samples) * 1e3, 1) if samples else None,
              "rerun_ms_p90": round(samples[int(0.9 * (len(samples) - 1))] * 1e3, 1) if samples else None,
              "rerun_ms_worst": round(samples[-1] * 1e3, 1) if samples else None,
              "cpus": len(os.sched_getaffinity(0))}
    print(json.dumps(result))
    return 1 if out["errors"] or not samples else 0


if __name__ == "__main__":
    sys.exit(main())
