"""Layout at 1280x720 in headless Chromium: the verdict in view after Plan (plan page) and above the form (call
page), the GPU select's text not truncated, the donut's labels inside the chart."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e
playwright = pytest.importorskip("playwright.sync_api", reason="playwright (python) is not installed")
expect = playwright.expect


def metric(page, label: str):
    return page.get_by_test_id("stMetric").filter(has_text=label).get_by_test_id("stMetricValue")


def in_viewport(locator, height: int = 720) -> bool:
    box = locator.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height


def verdict(page):
    return page.get_by_test_id("stAlert").filter(has_text="fit").first


def test_verdict_in_view_after_clicking_plan(page, app_url):
    page.goto(app_url)
    expect(metric(page, "total per GPU")).to_be_visible()
    before = metric(page, "total per GPU").inner_text()
    page.get_by_label("sequence length n (tokens)").fill("32768")
    button = page.get_by_role("button", name="Plan", exact=True)
    button.scroll_into_view_if_needed()
    button.click()
    expect(metric(page, "total per GPU")).not_to_have_text(before)
    assert in_viewport(verdict(page)), verdict(page).bounding_box()


def test_call_page_verdict_above_its_form(page, app_url):
    page.goto(f"{app_url}/call")
    alert = page.get_by_test_id("stAlert").filter(has_text="Fits").first
    expect(alert).to_be_visible()
    form = page.get_by_test_id("stForm").first
    assert alert.bounding_box()["y"] < form.bounding_box()["y"]
    assert in_viewport(alert)


def _truncated(locator) -> list[str]:
    """Texts inside `locator` that their box cuts off (scrollWidth beyond clientWidth), a select's input too."""
    return locator.evaluate("""root => [...root.querySelectorAll('*')]
        .filter(e => e.children.length === 0 && (e.textContent.trim() || e.value) && e.scrollWidth > e.clientWidth + 1)
        .map(e => e.value || e.textContent.trim())""")


def test_gpu_select_is_not_truncated(page, app_url):
    page.goto(f"{app_url}/?gpu=h200")
    select = page.get_by_test_id("stSelectbox").filter(has_text="GPU").first
    expect(select).to_be_visible()
    assert _truncated(select) == []


def _overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and a["y"] < b["y"] + b["height"]
            and b["y"] < a["y"] + a["height"])


@pytest.mark.parametrize("query", ["preset=llama-3-8b&seq_len=8192", "preset=llama-3-8b&seq_len=131072",
                                   "preset=llama-3-8b&seq_len=262144&gpu=h200"])
def test_donut_labels_are_inside_the_chart_and_apart(page, app_url, query):
    page.goto(f"{app_url}/?{query}")
    expect(metric(page, "total per GPU")).to_be_visible()
    page.get_by_role("tab", name="Charts").click()
    chart = page.get_by_test_id("stPlotlyChart").filter(has_text="Share of").first
    expect(chart).to_be_visible()
    frame = chart.locator("svg.main-svg").first.bounding_box()
    expect(chart.locator("g.slice").first).to_be_attached()
    labels = [t.bounding_box() for t in chart.locator("g.slicetext text, g.slice text").all()]
    labels = [b for b in labels if b and b["width"] > 0]  # plotly hides a label too big for its slice
    legend = [t.bounding_box() for t in chart.locator("g.legend text").all()]
    for k, box in enumerate(labels):
        assert frame["x"] <= box["x"] and box["x"] + box["width"] <= frame["x"] + frame["width"], k
        assert frame["y"] <= box["y"] and box["y"] + box["height"] <= frame["y"] + frame["height"], k
        assert not any(_overlap(box, other) for other in labels[k + 1:] + legend), k
