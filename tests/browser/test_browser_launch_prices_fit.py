"""The launch form's price table fits its card at 1440 px: every column, "Most for one
instance" included, is inside the card with nothing to scroll."""

import pytest

pytestmark = pytest.mark.browser


def test_the_price_table_fits_its_card_at_1440_px(login, console, screenshot):
    page = login("alice", width=1440)
    page.goto(console.base + "/instances/new/")
    page.wait_for_selector("#offers")
    fit = page.evaluate(
        """() => {
            const table = document.querySelector('#offers');
            const wrap = table.closest('.table-wrap');
            const card = table.closest('.card').getBoundingClientRect();
            const last = table.querySelector('thead th:last-child').getBoundingClientRect();
            return {scroll: wrap.scrollWidth, width: wrap.clientWidth, lastRight: last.right, cardRight: card.right};
        }"""
    )
    screenshot(page, "launch-prices-1440")
    assert fit["scroll"] <= fit["width"], fit
    assert fit["lastRight"] <= fit["cardRight"], fit
