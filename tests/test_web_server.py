"""The real server (`streamlit run app.py` on a free loopback port): a WebSocket whose Host is not an allowed host
(DNS rebinding: evil.example re-pointed at 127.0.0.1) is refused before the app runs, the allowed hosts are
configurable, and the Validate page's GPU jobs do not follow from the listen address."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=["default", "configured"])
def server(request, tmp_path_factory):
    """(port, mode): the checked-in settings, or STREAMLIT_SERVER_ALLOWED_HOSTS naming a deployment's host."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("STREAMLIT_SERVER_ALLOWED_HOSTS", None)
    if request.param == "configured":
        env["STREAMLIT_SERVER_ALLOWED_HOSTS"] = "planner.example.com localhost"
    log = tmp_path_factory.mktemp("server") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port",
                                 str(port), "--server.address", "127.0.0.1", "--server.headless", "true"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited: {log.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"streamlit did not start: {log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.3)
        yield port, request.param
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def handshake(port: int, host: str, origin: str | None = None) -> str:
    """The status line the server answers a WebSocket upgrade of /_stcore/stream with, sent with this Host."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = ["GET /_stcore/stream HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Protocol: streamlit"]
    if origin:
        lines.append(f"Origin: {origin}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0].decode(errors="replace")


def test_a_rebound_host_is_refused_and_localhost_is_not(server):
    port, mode = server
    assert " 101 " in handshake(port, f"localhost:{port}", f"http://localhost:{port}")
    refused = handshake(port, "evil.example", "http://evil.example")
    assert " 101 " not in refused and " 403 " in refused, refused
    if mode == "default":
        assert " 101 " in handshake(port, f"127.0.0.1:{port}", f"http://127.0.0.1:{port}")
        assert " 101 " not in handshake(port, "planner.example.com", "http://planner.example.com")
    else:  # a deployment names its own host; the others (127.0.0.1 here) are then refused too
        assert " 101 " in handshake(port, "planner.example.com", "http://planner.example.com")
        assert " 101 " not in handshake(port, f"127.0.0.1:{port}", f"http://127.0.0.1:{port}")
