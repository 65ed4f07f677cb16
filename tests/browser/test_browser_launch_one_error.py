"""A launch refused for its GPU count says why once, under the field; the price preview
asks for the correction instead of repeating it, and shows the price once it is made."""

import pytest

pytestmark = pytest.mark.browser


def test_a_refused_count_is_reported_once_then_priced_when_corrected(login, console, screenshot):
    page = login("alice", width=1440)
    page.goto(console.base + "/instances/new/")
    page.wait_for_selector("#offers")
    page.fill("#id_name", "zero-gpus")
    page.fill("#id_gpu_count", "0")
    page.evaluate("document.getElementById('launch-form').noValidate = true")  # as a browser without it
    page.click("#launch-form button[type=submit]")
    page.wait_for_selector(".field .errorlist")
    page.wait_for_function("document.querySelector('#launch-quote').textContent.includes('Correct the marked field')")
    message = page.inner_text(".field .errorlist")
    assert message and page.inner_text("main").count(message) == 1, message
    screenshot(page, "launch-zero-gpus")
    page.fill("#id_gpu_count", "1")
    page.wait_for_function("document.querySelector('#launch-quote').textContent.includes('/h')")
    assert page.locator(".field .errorlist").count() == 0
