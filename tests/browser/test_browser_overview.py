"""Bob logs in and the overview shows Acme's GPUs, live, and nothing of Globex."""

import pytest

pytestmark = pytest.mark.browser

REPLAY_GPU = "GPU-cc7cc80c-c4d9-ea4f-fa04-56bccf2abc35"


def test_bob_sees_acme_gpus_on_the_overview(login, screenshot):
    page = login("bob")
    page.wait_for_selector(".live-status[data-state=live]")
    assert page.locator(".gpu-tile").count() >= 10
    assert "acme-llm-finetune" in page.content()
    assert "globex" not in page.content().lower()
    tile = page.locator(f'.gpu-tile[data-uuid="{REPLAY_GPU}"]')
    # The replay agent is streaming: the tile fills in and is not stale.
    page.wait_for_function(
        f"""() => {{
            const t = document.querySelector('.gpu-tile[data-uuid="{REPLAY_GPU}"]');
            return t && !t.classList.contains('stale') && t.querySelector('[data-f=power]').textContent.includes('W');
        }}"""
    )
    assert "/ 700 W" in tile.inner_text()
    screenshot(page, "overview-bob")


def test_the_overview_fits_a_narrow_window(login, screenshot):
    page = login("bob", width=400)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 400
    screenshot(page, "overview-bob-narrow")
