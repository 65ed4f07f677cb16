"""After a server restart the page reconnects by itself and the chart moves again."""

import pytest

pytestmark = pytest.mark.browser

WATCH = """() => {
    window.liveStates = [];
    const pill = document.querySelector('[data-live-status]');
    new MutationObserver(() => window.liveStates.push(pill.dataset.state))
        .observe(pill, {attributes: true, attributeFilter: ['data-state']});
}"""
GAINS = """(n) => {
    const plot = document.querySelector('[data-chart="utilization"]');
    const t = plot.data.find(t => t.meta && t.meta.metric === 'gpu_util' && !t.meta.envelope);
    return t.y.filter(v => v !== null).length > n;
}"""


def test_the_page_reconnects_after_a_restart(login, console, chart_points):
    page = login("bob")
    page.click("text=acme-llm-finetune")
    page.wait_for_selector('[data-chart="utilization"] .main-svg')
    page.wait_for_selector(".live-status[data-state=live]")
    page.evaluate(WATCH)
    console.restart()
    page.wait_for_function(
        "() => window.liveStates.includes('reconnecting') && window.liveStates.at(-1) === 'live'",
        timeout=30_000,
    )
    page.wait_for_function(GAINS, arg=chart_points(page, "utilization"), timeout=30_000)
