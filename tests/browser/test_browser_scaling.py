"""Through the API and the browser: a team's scaling group goes from 1 to 4 instances
when its pushed queue grows and back to 1 when it empties, and its page shows it."""

import pytest
from conftest import PASSWORD, _api

pytestmark = pytest.mark.browser


def test_a_group_grows_and_shrinks_with_its_queue(console, login, screenshot):
    token = _api(console.base, "/api/v1/auth/token/", {"username": "bob", "password": PASSWORD, "name": "queue"})["token"]
    acme = next(t["id"] for t in _api(console.base, "/api/v1/teams/", token=token)["results"] if t["name"] == "Acme")
    group = _api(console.base, "/api/v1/scaling-groups/", {
        "team": acme, "name": "render-farm", "gpu_model": "H100-80GB", "gpus_per_instance": 1, "min_instances": 1,
        "max_instances": 4, "target_per_instance": 10, "scale_out_cooldown_s": 0, "scale_in_cooldown_s": 0,
    }, token=token)

    def push(depth):  # each push evaluates the group at once
        _api(console.base, f"/api/v1/scaling-groups/{group['id']}/metrics/", {"queue_depth": depth}, token=token)
        return _api(console.base, f"/api/v1/scaling-groups/{group['id']}/", token=token)["running"]

    assert push(5) == 1
    assert push(35) == 4
    page = login("bob")
    page.click("nav >> text=Scaling")
    page.click("text=render-farm")
    assert page.inner_text("#running") == "4"
    assert page.inner_text("#queue-depth").startswith("35")
    page.wait_for_function("() => document.querySelector('#chart-history').data?.length === 3")
    assert page.locator("#group-instances tbody tr").count() == 4
    assert page.locator("#decisions tr[data-action=scale_out]").count() == 2
    screenshot(page, "scaling-group-grown")

    assert push(0) == 1
    page.reload()
    assert page.inner_text("#running") == "1"
    assert page.locator("#decisions tr[data-action=scale_in][data-reason=at_min]").count() == 1
    running = page.eval_on_selector("#chart-history", "el => el.data.find(t => t.name === 'Running').y")
    assert (running[0], max(running), running[-1]) == (1, 4, 1)  # the scheduler's own evaluations add points
    screenshot(page, "scaling-group-shrunk")


def test_a_group_is_made_changed_and_deleted_from_its_pages(console, login, screenshot):
    page = login("alice")
    page.goto(f"{console.base}/scaling-groups/")
    page.click("#new-group")
    page.fill("#id_name", "inference-pool")
    page.select_option("#id_gpu_model", "H100-80GB")
    page.fill("#id_max_instances", "0")
    page.fill("#id_target_per_instance", "25")
    page.click("#group-form button[type=submit]")
    assert "The maximum must be between 1 and 64" in page.inner_text("#group-form")  # nothing made
    page.fill("#id_max_instances", "3")
    screenshot(page, "scaling-group-form")
    page.click("#group-form button[type=submit]")
    page.wait_for_url("**/scaling-groups/*/")
    assert "inference-pool" in page.inner_text("h1")
    assert "1 to 3" in page.inner_text("#group-settings")

    page.click("#edit-group")
    page.fill("#id_max_instances", "5")
    page.click("#group-form button[type=submit]")
    page.wait_for_url("**/scaling-groups/*/")
    assert "1 to 5" in page.inner_text("#group-settings")
    screenshot(page, "scaling-group-edited")

    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#delete-group button")
    page.wait_for_url("**/scaling-groups/")
    assert "Scaling group inference-pool deleted" in page.inner_text("body")
    assert "inference-pool" not in page.inner_text("#scaling-groups")
