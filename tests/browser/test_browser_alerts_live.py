"""An alert that opens while the Alerts page is open appears on it without a reload,
over the live websocket, and its row turns resolved when it resolves."""

import json
import urllib.request

import pytest

pytestmark = pytest.mark.browser

NEW_ROW = "#alerts tr.live-new[data-alert]"


def _call(console, method, path, body=None):
    request = urllib.request.Request(
        console.base + path, data=None if body is None else json.dumps(body).encode(), method=method,
        headers={"Content-Type": "application/json", "Authorization": f"Token {console.ops_token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


def test_an_alert_appears_live_and_resolves_live(login, console, screenshot):
    page = login("ops")
    page.goto(console.base + "/alerts/")
    page.wait_for_selector(".live-status[data-state=live]")
    # The replay agent's GPU reads some utilization on every reading: this rule fires on
    # the next reading after the rules are read again (every 5 s).
    rule = console.api("/api/v1/alert-rules/", {
        "name": "Live page check", "metric": "gpu_util", "comparison": ">=", "threshold": 0, "severity": "info",
        "host": "use1-h200-replay",
    })
    try:
        page.wait_for_selector(NEW_ROW, timeout=60_000)
        alert_id = page.get_attribute(NEW_ROW, "data-alert")
        row = f'#alerts tr[data-alert="{alert_id}"]'
        assert page.inner_text(f"{row} .state") == "open"
        assert page.inner_text(f'{row} td[data-label="Kind"]').startswith("GPU utilization")
        assert _call(console, "GET", f"/api/v1/alerts/{alert_id}/")["rule"] == rule["id"]
        screenshot(page, "alerts-live-open")
        _call(console, "POST", f"/api/v1/alerts/{alert_id}/resolve/", {})
        page.wait_for_function(
            f"() => document.querySelector('{row} .state').textContent === 'resolved'", timeout=30_000
        )
        screenshot(page, "alerts-live-resolved")
    finally:
        _call(console, "DELETE", f"/api/v1/alert-rules/{rule['id']}/")
