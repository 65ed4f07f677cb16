"""Switching the range to 24 h loads history from the 1-minute rollups."""

import pytest

pytestmark = pytest.mark.browser


def test_24h_loads_history(login, screenshot, chart_points):
    page = login("bob")
    page.click("text=acme-llm-finetune")
    page.wait_for_function(
        "() => (document.querySelector('.panel-note') || {textContent: ''}).textContent.includes('points')"
    )
    with page.expect_response(lambda r: "/metrics/" in r.url and r.status == 200) as answer:
        page.click('button[data-range="24h"]')
    body = answer.value.json()
    assert body["tier"] == "1m"
    page.wait_for_function(
        "() => (document.querySelector('.panel-note') || {textContent: ''}).textContent.startsWith('24 h')"
    )
    assert page.get_attribute('button[data-range="24h"]', "aria-pressed") == "true"
    assert chart_points(page, "utilization") > 1000
    assert "1-minute rollups" in page.inner_text(".panel-note")
    screenshot(page, "instance-24h")
