"""End-to-end fixtures: `streamlit run app.py` on a free localhost port, and Debian's Chromium driven by Playwright.

The tests skip (with the reason) only when no Chromium binary is installed; CI installs it
(`apt-get install -y chromium`). `playwright install` is never needed: we launch the system browser.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str | None:
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(log: Path, chars: int = 2000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else ""


@pytest.fixture(scope="session")
def app_url(tmp_path_factory):
    """Start the app once for the session; wait for /_stcore/health (startup, not a timing assertion).
    The server's stdout and stderr go to a log file whose tail is in every start-up error and, at the end of
    the session, in the test output (a pipe nobody reads would fill up and stall the server)."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit exited ({log}): {_tail(log)}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"streamlit did not become healthy within 60 s ({log}): {_tail(log)}") from None
                time.sleep(0.2)  # polling a server's startup, not waiting on the page under test
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(f"\nstreamlit server log ({log}), last lines:\n{_tail(log)}", file=sys.stderr)


@pytest.fixture(scope="session")
def browser():
    path = chromium_path()
    if path is None:
        pytest.skip("Chromium is not installed (apt-get install -y chromium); the end-to-end tests need it")
    from playwright.sync_api import expect, sync_playwright

    # A cold Streamlit page on a small, busy CI machine can take tens of seconds to render its charts.
    expect.set_options(timeout=90_000)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture()
def page(browser):
    # 1280x720: the smallest laptop screen the app is designed for (verdict and headline numbers above the fold).
    context = browser.new_context(viewport={"width": 1280, "height": 720}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(90_000)
    yield page
    context.close()
