"""The instance page's charts gain points as the replay agent sends samples."""

import pytest

pytestmark = pytest.mark.browser


def open_instance(page, name):
    page.click(f"text={name}")
    page.wait_for_selector('[data-chart="utilization"] .main-svg')
    page.wait_for_function(
        "() => (document.querySelector('.panel-note') || {textContent: ''}).textContent.includes('points')"
    )


def test_the_utilization_chart_gains_points_live(login, screenshot, chart_points):
    page = login("bob")
    open_instance(page, "acme-llm-finetune")
    before = chart_points(page, "utilization")
    page.wait_for_function(
        """(n) => {
            const plot = document.querySelector('[data-chart="utilization"]');
            const t = plot.data.find(t => t.meta && t.meta.metric === 'gpu_util' && !t.meta.envelope);
            return t.y.filter(v => v !== null).length >= n + 5;
        }""",
        arg=before,
    )
    assert chart_points(page, "power", "power_mw") > 0
    screenshot(page, "instance-live")


def test_every_chart_offers_csv_and_png_and_keyboard_ranges(login):
    page = login("bob")
    open_instance(page, "acme-llm-finetune")
    cards = page.locator(".chart-card")
    assert cards.count() == 6  # utilization, achieved TFLOP/s (an H200), memory, power, temperature, clocks
    for i in range(cards.count()):
        assert cards.nth(i).locator("button", has_text="CSV").count() == 1
        assert cards.nth(i).locator("button", has_text="PNG").count() == 1
    with page.expect_download() as download:
        cards.nth(0).locator("button", has_text="CSV").click()
    head = open(download.value.path()).readline()
    assert head.startswith("time_utc,gpu_util_avg (%)")
    page.focus('button[data-range="live"]')
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.range") == "1h"
