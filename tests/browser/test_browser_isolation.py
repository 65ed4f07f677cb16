"""Charlie (Globex) gets 404 for Acme's instance page, and a closed socket when he
asks for its live stream; the attempt is audited."""

import re

import pytest

pytestmark = pytest.mark.browser

SUBSCRIBE = """async (id) => new Promise((resolve) => {
    const ws = new WebSocket(location.origin.replace('http', 'ws') + '/ws/live/');
    ws.onopen = () => ws.send(JSON.stringify({subscribe: {kind: 'instance', id}}));
    ws.onclose = (e) => resolve(e.code);
    setTimeout(() => resolve('still open'), 5000);
})"""


def acme_instance_id(login):
    page = login("bob")
    href = page.get_attribute("text=acme-llm-finetune", "href")
    page.close()
    return int(re.search(r"/instances/(\d+)/", href).group(1))


def test_charlie_gets_404_and_a_closed_socket(login, console, screenshot):
    acme_id = acme_instance_id(login)
    page = login("charlie")
    response = page.goto(f"{console.base}/instances/{acme_id}/")
    assert response.status == 404
    screenshot(page, "charlie-404")
    assert page.evaluate(SUBSCRIBE, acme_id) == 4403
    denied = console.api("/api/v1/audit/events/?action=live.denied")
    assert any(e["actor_name"] == "charlie" for e in denied["results"])


def test_charlies_own_overview_streams(login):
    page = login("charlie")
    page.wait_for_selector(".live-status[data-state=live]")
    assert "acme" not in page.content().lower()
