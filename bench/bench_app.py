"""App speed: cold start to first render, and the re-run after a form submit (targets: first render
< 3 s, re-run < 300 ms on a 2-core machine). Prints one JSON object; run on the machine you care about:

    taskset -c 0,1 python -m bench.bench_app            # AppTest (script runs, no browser)
    taskset -c 0,1 python -m bench.bench_app --browser  # also `streamlit run` + headless Chromium

`cold_script_s`: a fresh interpreter imports Streamlit and runs app.py once (AppTest): the server-side part of
the first render.
`browser`: seconds from spawning `streamlit run` to /_stcore/health, then from page.goto to the budget's total being
visible in Chromium, for the first session and (median) for two more (includes the browser's own
loading and rendering of Streamlit's frontend, which on a small loaded machine dominates).
`rerun_ms`: after a form submit with a new n, the script's re-run (AppTest), median and max over several ns.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLD = """
import time, sys
t0 = time.perf_counter()
from streamlit.testing.v1 import AppTest
at = AppTest.from_file({app!r}, default_timeout=120).run()
assert not at.exception, at.exception
print(time.perf_counter() - t0)
"""


def cold_script_s() -> tuple[float, float]:
    """A fresh interpreter: import streamlit + run app.py once (includes interpreter start-up)."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", COLD.format(app=str(ROOT / "app.py"))],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    inside = float(out.stdout.strip().splitlines()[-1])
    return round(time.perf_counter() - t0, 3), round(inside, 3)


def rerun_ms(ns=(4096, 16384, 32768, 65536, 131072, 10000, 20000, 50000)) -> dict:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    samples = []
    for n in ns:
        at.number_input(key="plan_seq_len").set_value(n)
        button = next(b for b in at.button if b.label == "Plan")
        button.click()
        t0 = time.perf_counter()
        at.run()
        samples.append((time.perf_counter() - t0) * 1e3)
        assert not at.exception, at.exception
    # Resubmitting an n already seen: the estimator's answers are memoised (ui/cached.py).
    at.number_input(key="plan_seq_len").set_value(ns[0])
    next(b for b in at.button if b.label == "Plan").click()
    t0 = time.perf_counter()
    at.run()
    repeat = (time.perf_counter() - t0) * 1e3
    return {"new_n_median_ms": round(statistics.median(samples), 1), "new_n_max_ms": round(max(samples), 1),
            "repeat_n_ms": round(repeat, 1), "samples_ms": [round(s, 1) for s in samples]}


# In the page: click Plan, then resolve with the ms until the budget's total shows `expected` (what the user waits
# for) and until the re-run has settled (that, and no element of the previous run left stale). A MutationObserver
# timestamps the DOM changes as they happen: no polling interval in the figure.
# The total is read as its value element's text (textContent: no layout forced on each change, and "2.34 GiB" is not
# taken for "12.34 GiB").
RERUN_JS = """([expected, timeoutMs]) => new Promise((resolve, reject) => {
  const total = () => [...document.querySelectorAll('[data-testid="stMetric"]')]
      .find(e => e.textContent.includes('total per GPU'));
  const button = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Plan');
  let shown = null;
  const t0 = performance.now();
  const check = () => {
    const el = total();
    const value = el && el.querySelector('[data-testid="stMetricValue"]');
    if (shown === null && value && value.textContent.trim() === expected) shown = performance.now() - t0;
    if (shown !== null && !document.querySelector('[data-stale="true"]')
        && !document.querySelector('[data-testid="stStatusWidget"] [data-testid="stStatusWidgetRunningIcon"]')) {
      obs.disconnect(); clearInterval(tick); resolve([shown, performance.now() - t0]);
    }
  };
  const obs = new MutationObserver(check);
  obs.observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
  const tick = setInterval(() => { if (performance.now() - t0 > timeoutMs) { obs.disconnect(); clearInterval(tick);
    reject(new Error('re-run did not finish')); } check(); }, 5);
  button.click();
})"""
N_LABEL = "sequence length n (tokens)"


def _total_text(n: int) -> str:
    """The budget's total per GPU for the page's default plan at n, as the page writes it."""
    from estimator.model.inputs import PlanInputs
    from estimator.model.plan import make_plan
    from estimator.model.presets import get_preset

    inputs = PlanInputs(model=get_preset("llama-3-8b"), seq_len=n, batch=1, dtype="bfloat16", kv_dtype="bfloat16",
                        mode="inference", backend="auto", gpu="h200", gpus=1)
    return f"{make_plan(inputs).fit.total_bytes / 2**30:,.2f} GiB"


def browser_rerun_ms(page, ns=(16384, 32768, 65536, 131072, 10000, 20000, 50000, 4096, 12288, 24576, 40000,
                               100000)) -> dict:
    """In an open planning page: for each n, fill the field, click Plan and time (in the page) until the new total
    is shown and until the re-run has settled; medians and worsts over the ns (all new to the server)."""
    shown, settled = [], []
    for n in ns:
        expected = _total_text(n)
        page.get_by_label(N_LABEL).fill(str(n))
        a, b = page.evaluate(RERUN_JS, [expected, 30_000])
        shown.append(a)
        settled.append(b)
    return {"new_n_shown_median_ms": round(statistics.median(shown), 1), "new_n_shown_max_ms": round(max(shown), 1),
            "new_n_settled_median_ms": round(statistics.median(settled), 1),
            "new_n_settled_max_ms": round(max(settled), 1), "shown_samples_ms": [round(x, 1) for x in shown]}


def browser_render_s() -> dict | None:
    """Spawn `streamlit run`; time /_stcore/health, then the budget's first metric in Chromium for a first
    session (the server's first script run) and for two more sessions (warm server)."""
    import urllib.request

    from playwright.sync_api import sync_playwright

    from tests.e2e.conftest import CHROMIUM_ARGS, _free_port, chromium_path

    path = chromium_path()
    if path is None:
        return None
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port",
                                 str(port), "--server.address", "127.0.0.1"], cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            while True:
                try:
                    urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).close()
                    break
                except OSError:
                    if time.perf_counter() - t0 > 60:
                        raise
                    time.sleep(0.02)
            out["server_health_s"] = round(time.perf_counter() - t0, 3)
            sessions = []
            for _ in range(3):
                page = browser.new_page(viewport={"width": 1600, "height": 1200})
                t1 = time.perf_counter()
                page.goto(url)
                page.get_by_test_id("stMetric").filter(has_text="total per GPU").wait_for(timeout=90_000)
                sessions.append(time.perf_counter() - t1)
                page.close()
            out["first_session_metric_s"] = round(sessions[0], 3)
            out["spawn_to_first_metric_s"] = round(out["server_health_s"] + sessions[0], 3)
            out["warm_session_metric_s"] = round(statistics.median(sessions[1:]), 3)
            page = browser.new_page(viewport={"width": 1600, "height": 1200})
            page.goto(url)
            page.get_by_test_id("stMetric").filter(has_text="total per GPU").wait_for(timeout=90_000)
            out["rerun"] = browser_rerun_ms(page)
            page.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--browser", action="store_true", help="also time streamlit run + Chromium")
    args = parser.parse_args()
    wall, inside = cold_script_s()
    result = {"cpus": len(os.sched_getaffinity(0)), "python": sys.version.split()[0],
              "cold_script_s_with_interpreter": wall, "cold_script_s_after_interpreter": inside, **rerun_ms()}
    if args.browser:
        result["browser"] = browser_render_s()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
