"""Launching from the form with the team's own image and a spot max price: the form shows
the spot price, its recent range and the saving; the instance page shows the image and
the max price; the images page lists the image with the instance running it."""

import re

import pytest

pytestmark = pytest.mark.browser


def test_bob_launches_spot_with_his_teams_image_and_a_max_price(login, screenshot):
    page = login("bob")
    page.goto(page.url.rstrip("/") + "/instances/new/")
    page.fill("#id_name", "bob-spot-image")
    page.select_option("#id_gpu_model", "H100-80GB")
    image = page.locator("#id_image option", has_text="acme-llm-train")
    page.select_option("#id_image", image.get_attribute("value"))
    assert page.locator("#id_max_price").is_hidden()  # spot only
    page.select_option("#id_pricing_model", "spot")
    page.wait_for_selector("#spot-outlook:not([hidden]) #spot-chart .main-svg")
    summary = page.inner_text("#spot-summary")
    assert re.search(r"Spot now \d+\.\d+ per GPU-hour · last 7 days \d+\.\d+–\d+\.\d+ · saves \d+% against on-demand",
                     summary), summary
    page.fill("#id_max_price", "2.50")
    screenshot(page, "launch-form-spot-image")
    page.click("#launch-form button[type=submit]")
    page.wait_for_url(re.compile(r"/instances/\d+/$"))
    assert "acme-llm-train" in page.inner_text("#instance-image")
    assert page.inner_text("#max-price") == "2.50 per GPU-hour"
    screenshot(page, "instance-spot-image")
    page.goto(page.url.split("/instances/")[0] + "/images/")
    row = page.locator("tr[data-image='acme-llm-train']")
    assert "private to Acme" in row.inner_text()
    screenshot(page, "images-page")
    # leave the demo fleet as it was for the other browser tests
    page.go_back()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#actions button:has-text('Terminate')")
    page.wait_for_function("() => document.querySelector('#instance-state').textContent === 'terminated'")
