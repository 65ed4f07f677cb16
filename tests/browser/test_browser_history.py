"""Switching the range to 24 h loads history from the 1-minute rollups."""

from datetime import datetime
from urllib.parse import parse_qs, urlsplit

import pytest

pytestmark = pytest.mark.browser

NOTE = "() => (document.querySelector('.panel-note') || {textContent: ''}).textContent"


def spans_a_day(response) -> bool:
    if "/figures/" not in response.url:
        return False
    query = parse_qs(urlsplit(response.url).query)
    start, end = (
        datetime.fromisoformat(query[k][0].replace("Z", "+00:00")) for k in ("start", "end")
    )
    return abs((end - start).total_seconds() - 86400) < 5


def test_24h_loads_history(login, screenshot, chart_points):
    page = login("bob")
    page.click("text=acme-llm-finetune")
    page.wait_for_function(f"() => ({NOTE})().includes('points')")
    with page.expect_response(spans_a_day) as answer:
        page.click('button[data-range="24h"]')
    assert answer.value.status == 200
    assert answer.value.json()["tier"] == "1m"
    page.wait_for_function(f"() => ({NOTE})().startsWith('24 h')")
    assert page.get_attribute('button[data-range="24h"]', "aria-pressed") == "true"
    assert chart_points(page, "utilization") > 1000
    assert "1-minute rollups" in page.inner_text(".panel-note")
    screenshot(page, "instance-24h")
