"""Stopping an instance from its page (after confirming) changes its state."""

import pytest

pytestmark = pytest.mark.browser


def test_bob_stops_an_instance_from_its_page(login, screenshot):
    page = login("bob")
    page.click("text=acme-inference-a")
    page.wait_for_selector("#instance-state")
    assert page.inner_text("#instance-state") == "running"
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#actions button:has-text('Stop')")
    page.wait_for_function(
        "() => ['stopping', 'stopped'].includes(document.querySelector('#instance-state').textContent)"
    )
    screenshot(page, "instance-stopped")


def test_dismissing_the_confirmation_stops_nothing(login):
    page = login("bob")
    page.click("text=acme-batch-spot")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("#actions button:has-text('Stop')")
    page.wait_for_timeout(300)
    assert page.inner_text("#instance-state") == "running"


def test_a_state_change_made_elsewhere_shows_up_live(login, console):
    page = login("bob")
    page.click("text=acme-notebook")
    page.wait_for_selector(".live-status[data-state=live]")
    other = login("bob")
    other.click("text=acme-notebook")
    other.once("dialog", lambda dialog: dialog.accept())
    other.click("#actions button:has-text('Stop')")
    page.wait_for_function(
        "() => document.querySelector('#instance-state').textContent !== 'running'"
    )
