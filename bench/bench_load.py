"""Load test: N concurrent sessions re-planning against `streamlit run` on loopback for a while; zero errors expected.
Prints one JSON object (median and worst re-run, errors).

    taskset -c 0,1 python -m bench.bench_load                 # 20 sessions, 60 s
    python -m bench.bench_load --sessions 5 --seconds 10      # a quick check
    python -m bench.bench_load --heavy-mib 4.9 --seconds 45   # quiet and loaded phases, alternated twice

With --heavy-mib, the run alternates phases on one server (--rounds pairs): the N sessions alone (quiet), then the
N sessions while one more session uploads a validation result CSV of that size to the Validate page again and
again, each time a new file (new content, so the page's per-digest cache never hits: the worst case). 4.9, not 5:
the server's 5 MiB limit (server.maxUploadSize) counts the multipart framing too. The JSON gives both pooled
medians and their ratio (`loaded_over_quiet`), and the heavy session's upload-to-finished times.

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
        self.errors: list[str] = []
        self.session_id = ""

    async def connect(self) -> None:
        from websockets.asyncio.client import connect  # Streamlit's own server dependency

        self.ws = await connect(f"ws://127.0.0.1:{self.port}/_stcore/stream", subprotocols=["streamlit"],
                                max_size=64 << 20, origin=f"http://127.0.0.1:{self.port}")

    async def rerun(self, widgets=(), page: str = "") -> tuple[float, str]:
        """Send one rerun request; read until script_finished. Returns (seconds, finish status)."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = BackMsg()
        msg.rerun_script.query_string = ""
        msg.rerun_script.page_name = page
        for wid, kind, value in widgets:
            state = msg.rerun_script.widget_states.widgets.add()
            state.id = wid
            if kind == "file_uploader_state_value":
                state.file_uploader_state_value.CopyFrom(value)
            else:
                setattr(state, kind, value)
        self.exceptions.clear()
        t0 = time.perf_counter()
        await self.ws.send(msg.SerializeToString())
        while True:
            raw = await self.ws.recv()
            fwd = ForwardMsg()
            fwd.ParseFromString(raw)
            kind = fwd.WhichOneof("type")
            if kind == "new_session":
                self.session_id = fwd.new_session.initialize.session_id or self.session_id
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
        elif which == "file_uploader" and el.file_uploader.id.endswith("validate_upload"):
            self.ids["upload"] = el.file_uploader.id
        elif which == "alert" and el.alert.format == el.alert.ERROR:
            self.errors.append(el.alert.body[:200])
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


def result_csv(mib: float, seed: int) -> bytes:
    """A validation result CSV of about `mib` MiB, every row a distinct call (what `validation run` writes)."""
    rng = random.Random(seed)
    header = ("id,backend,dtype,batch,q_heads,kv_heads,head_dim,q_len,kv_len,causal,mask,dropout,mode,status,"
              "measured_peak_extra_bytes,ran_backend,n_kernels,device_name,torch_version\n")
    rows, size, i = [header], len(header), 0
    while size < mib * (1 << 20):
        n = rng.randrange(256, 65536)
        row = (f"r{seed}-{i},flash,bfloat16,{rng.choice([1, 2, 4])},32,8,128,{n},{n},1,none,0.0,forward,ok,"
               f"{rng.randrange(1 << 20, 1 << 32)},flash,1,NVIDIA H200,2.11.0+cu130\n")
        rows.append(row)
        size += len(row)
        i += 1
    return "".join(rows).encode()[: int(mib * (1 << 20))].rsplit(b"\n", 1)[0] + b"\n"


def _put_file(port: int, session_id: str, file_id: str, name: str, data: bytes) -> None:
    """What the browser does before it sends the widget state: PUT the file (multipart) with the XSRF token of the
    cookie that /_stcore/health sets."""
    import http.client
    import uuid

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/_stcore/health")
    resp = conn.getresponse()
    resp.read()
    cookie = next((c.split(";", 1)[0] for c in resp.headers.get_all("Set-Cookie") or []
                   if c.startswith("_streamlit_xsrf=")), "")
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            "Content-Type: text/csv\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", "Origin": f"http://127.0.0.1:{port}"}
    if cookie:
        headers.update({"Cookie": cookie, "X-Xsrftoken": cookie.split("=", 1)[1]})
    conn.request("PUT", f"/_stcore/upload_file/{session_id}/{file_id}", body=body, headers=headers)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    if resp.status not in (200, 204):
        raise RuntimeError(f"upload answered {resp.status}")


async def run_heavy(port: int, stop: asyncio.Event, mib: float, out: dict) -> None:
    """One session that uploads a new `mib` MiB result CSV to the Validate page until `stop`, timing each."""
    from streamlit.proto.Common_pb2 import FileUploaderState

    s = Session(port)
    try:
        await s.connect()
        await s.rerun(page="validate")
        if "upload" not in s.ids or not s.session_id:
            raise RuntimeError("the Validate page's uploader was not found")
        i = 0
        while not stop.is_set():
            data = await asyncio.to_thread(result_csv, mib, i)
            file_id = f"heavy-{i}"
            await asyncio.to_thread(_put_file, port, s.session_id, file_id, f"measured-{i}.csv", data)
            state = FileUploaderState()
            info = state.uploaded_file_info.add()
            info.file_id, info.name, info.size = file_id, f"measured-{i}.csv", len(data)
            info.file_urls.file_id = file_id
            info.file_urls.upload_url = f"/_stcore/upload_file/{s.session_id}/{file_id}"
            info.file_urls.delete_url = info.file_urls.upload_url
            s.errors.clear()
            dt, status = await s.rerun([(s.ids["upload"], "file_uploader_state_value", state)], page="validate")
            out["heavy"].append(round(dt, 2))
            if s.exceptions or status != "FINISHED_SUCCESSFULLY" or s.errors:
                out["heavy_errors"].append(f"upload {i}: {status} {s.exceptions[:1]} {s.errors[:1]}")
            i += 1
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the other sessions' figures still count
        out["heavy_errors"].append(f"heavy session: {type(exc).__name__}: {exc}")
    finally:
        if getattr(s, "ws", None) is not None:
            await s.ws.close()


async def load(port: int, sessions: int, seconds: float, heavy_mib: float = 0.0) -> dict:
    out: dict = {"samples": [], "errors": [], "heavy": [], "heavy_errors": []}
    stop = asyncio.Event()
    heavy = asyncio.create_task(run_heavy(port, stop, heavy_mib, out)) if heavy_mib else None
    await asyncio.gather(*(run_session(port, seconds, i, out) for i in range(sessions)))
    stop.set()
    if heavy is not None:
        await heavy
    return out


def _summary(samples: list[float]) -> dict:
    samples = sorted(samples)
    if not samples:
        return {"reruns": 0, "rerun_ms_median": None, "rerun_ms_p90": None, "rerun_ms_worst": None}
    return {"reruns": len(samples), "rerun_ms_median": round(statistics.median(samples) * 1e3, 1),
            "rerun_ms_p90": round(samples[int(0.9 * (len(samples) - 1))] * 1e3, 1),
            "rerun_ms_worst": round(samples[-1] * 1e3, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--heavy-mib", type=float, default=0.0,
                        help="add a second phase with one session uploading result CSVs of this size (MiB)")
    parser.add_argument("--rounds", type=int, default=2, help="with --heavy-mib: quiet/loaded phase pairs")
    parser.add_argument("--url-port", type=int, default=None, help="use a running server on this port")
    args = parser.parse_args(argv)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / "bench_load_streamlit.log"
    port = args.url_port or _free_port()
    proc = None if args.url_port else start_server(port, log)
    phases: dict = {"quiet": [], "loaded": []}
    loads: dict = {"quiet": [], "loaded": []}
    try:
        t0 = time.perf_counter()
        for _ in range(args.rounds if args.heavy_mib else 1):  # alternated: other jobs' load hits both alike
            for name in ("quiet", "loaded") if args.heavy_mib else ("quiet",):
                loads[name].append(round(os.getloadavg()[0], 2))
                phases[name].append(asyncio.run(load(port, args.sessions, args.seconds,
                                                     args.heavy_mib if name == "loaded" else 0.0)))
        wall = time.perf_counter() - t0
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=15)
    pooled = {name: {key: [x for run in runs for x in run[key]] for key in ("samples", "errors", "heavy",
                                                                            "heavy_errors")}
              for name, runs in phases.items() if runs}
    quiet = pooled["quiet"]
    errors = [e for phase in pooled.values() for e in phase["errors"] + phase["heavy_errors"]]
    result = {"sessions": args.sessions, "seconds": round(wall, 1), **_summary(quiet["samples"]),
              "errors": len(errors), "error_examples": errors[:5], "cpus": len(os.sched_getaffinity(0)),
              "load_average_1min_at_phase_starts": loads["quiet"]}
    if "loaded" in pooled:
        loaded = pooled["loaded"]
        result["loaded"] = {**_summary(loaded["samples"]), "load_average_1min_at_phase_starts": loads["loaded"],
                            "heavy_mib": args.heavy_mib, "heavy_uploads": len(loaded["heavy"]),
                            "heavy_upload_s": loaded["heavy"][:10]}
        if result["rerun_ms_median"] and result["loaded"]["rerun_ms_median"]:
            result["loaded_over_quiet"] = round(result["loaded"]["rerun_ms_median"] / result["rerun_ms_median"], 2)
    print(json.dumps(result))
    return 1 if errors or not quiet["samples"] else 0


if __name__ == "__main__":
    sys.exit(main())
