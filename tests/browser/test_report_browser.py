"""Reports and `bkchaos serve` as a browser shows them: a page works only if it renders."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.browser import OUTPUT, SMALL_PAGES, Tab

PLOTS = ("#plot-latency", "#plot-quantiles", "#plot-rates")


def _assert_plots_drawn(tab: Tab) -> None:
    for plot in PLOTS:
        tab.page.wait_for_selector(f"{plot} .main-svg", timeout=15_000)
        assert tab.page.locator(f"{plot} .main-svg").first.is_visible()
    # fault windows shaded, and labelled on the latency plot
    assert tab.page.locator("#plot-latency .shapelayer path").count() > 0
    assert tab.page.locator("#plot-latency .annotation-text").count() > 0
    assert tab.page.locator("#plot-latency .scatterlayer .point").count() > 100


def test_valid_report_renders(tab: Tab, store: Path) -> None:
    tab.page.goto((store / "clean" / "20261101T100000" / "report.html").as_uri())
    _assert_plots_drawn(tab)
    assert tab.page.inner_text("#verdict").strip().lower() == "valid"
    assert "none found" in tab.page.inner_text("#anomaly-types")
    assert "--seed 3" in tab.page.inner_text("#command")
    assert tab.page.locator("#nemesis pre").count() > 0  # proofs shown
    tab.screenshot("report-valid.png")
    tab.screenshot("report-valid-full.png", full_page=True)
    assert tab.errors == []


def test_invalid_report_renders_anomalies_cycle_and_links_to_the_timeline(
    tab: Tab, store: Path
) -> None:
    run_dir = store / "bugged" / "20261102T100000"
    results = json.loads((run_dir / "results.json").read_text())
    tab.page.goto((run_dir / "report.html").as_uri())
    _assert_plots_drawn(tab)
    assert tab.page.inner_text("#verdict").strip().lower() == "invalid"
    listed = tab.page.inner_text("#anomaly-types")
    for name in results["anomaly_types"]:
        assert name in listed
        assert tab.page.locator(f"#anomaly-{name} .explanation").first.is_visible()
    cycle = tab.page.locator("svg.cycle").first
    cycle.scroll_into_view_if_needed()
    assert cycle.is_visible() and cycle.locator("rect").count() >= 2
    tab.screenshot("report-invalid.png")
    tab.page.locator("#anomaly-lost-append").screenshot(path=str(_output("report-anomaly.png")))

    # an op of the lost append, cited by the case, opens its place in the timeline
    op = results["anomalies"]["lost-append"][0]["ops"][-1]
    tab.page.click(f'#anomaly-lost-append a[href="timeline.html#op-{op}"]')
    tab.page.wait_for_selector(".op.hl", timeout=10_000)
    marked = tab.page.locator(".op.hl").first
    assert marked.is_visible()
    assert str(op) in (marked.get_attribute("id") or "") + (marked.get_attribute("data-done") or "")
    page_shown = int(tab.page.input_value("#page"))
    assert page_shown == _page_of(run_dir, op)
    tab.screenshot("timeline-invalid.png")
    assert tab.errors == []


def _output(name: str) -> Path:

    OUTPUT.mkdir(exist_ok=True)
    return OUTPUT / name


def _page_of(run_dir: Path, op: int) -> int:
    """The timeline page holding the call that op belongs to (invoke or completion)."""
    for page in sorted((run_dir / "timeline").glob("p*.js")):
        text = page.read_text()
        rows = json.loads(text[text.index(",") + 1 : text.rindex(")")])
        if any(op in (r[0], r[1]) for r in rows):
            return int(page.stem[1:])
    raise AssertionError(f"op {op} is on no page")


def test_timeline_pages_through_a_history(tab: Tab, store: Path) -> None:
    run_dir = store / "bugged" / "20261102T100000"
    pages = len(list((run_dir / "timeline").glob("p*.js")))
    assert pages >= 3  # SMALL_PAGES calls per page
    tab.page.goto((run_dir / "timeline.html").as_uri() + "#page-2")
    tab.page.wait_for_selector("#lanes .op")
    assert tab.page.input_value("#page") == "1"
    assert tab.page.locator("#lanes .op").count() == SMALL_PAGES
    assert tab.page.locator("#procs div", has_text="nemesis").count() in (0, 1)
    tab.page.click("#next")
    tab.page.wait_for_function("document.getElementById('page').value === '2'")
    assert tab.page.locator("#lanes .op").count() <= SMALL_PAGES
    tab.screenshot("timeline-page.png")
    assert tab.errors == []


def test_serve_index_filters_and_links_reports(tab: Tab, served: str) -> None:
    tab.page.goto(served + "/")
    rows = tab.page.locator("tr.run")
    assert rows.count() == 2
    assert rows.nth(0).get_attribute("data-test") == "bugged"  # newest first
    assert "INVALID" in rows.nth(0).inner_text().upper()
    assert "lost-append" in rows.nth(0).inner_text()
    assert tab.page.locator("#trends").is_visible()
    tab.screenshot("serve-index.png")

    tab.page.select_option('select[data-key="verdict"]', "valid")
    assert tab.page.locator("tr.run:not(.hidden)").count() == 1
    assert tab.page.locator("tr.run:not(.hidden)").get_attribute("data-test") == "clean"
    assert "verdict=valid" in tab.page.url
    tab.page.select_option('select[data-key="verdict"]', "")
    tab.page.select_option('select[data-key="anomalies"]', "G-single-realtime")
    assert tab.page.locator("tr.run:not(.hidden)").count() == 1

    tab.page.click('tr.run[data-test="bugged"] a:text("report")')
    tab.page.wait_for_selector("#plot-latency .main-svg", timeout=15_000)
    assert tab.page.inner_text("#verdict").strip().lower() == "invalid"
    tab.page.goto(served + "/trends/index.html")
    assert tab.page.inner_text("h1") == "Trends"
    assert tab.errors == []
