"""The instance list, page and API say why a pending instance is pending, and flag it
stuck past the grace, as they do a stopping one."""

from datetime import timedelta

import pytest
from django.utils import timezone


@pytest.fixture
def stuck(launch, bob, acme):
    return launch(bob, acme, name="acme-booting", at=timezone.now() - timedelta(minutes=45))


def test_the_api_says_why_and_that_it_is_stuck(api, bob, stuck):
    row = api(bob).get(f"/api/v1/instances/{stuck.pk}/").json()
    assert row["stuck"] is True
    assert "not billed until the host reports it running" in row["state_note"]
    assert "Stuck: the host has not confirmed the boot within 10 minutes" in row["state_note"]


def test_the_page_says_why(client, bob, stuck):
    client.force_login(bob)
    body = client.get(f"/instances/{stuck.pk}/").content.decode()
    assert 'id="state-note"' in body and "terminate it to give the GPUs back" in body
    assert 'id="stuck-stopping"' not in body


def test_the_list_flags_it_stuck(client, bob, stuck):
    client.force_login(bob)
    body = client.get("/instances/").content.decode()
    assert ">stuck</span>" in body and "has not confirmed the boot" in body


def test_charlie_sees_none_of_it(api, charlie, stuck):
    assert api(charlie).get(f"/api/v1/instances/{stuck.pk}/").status_code == 404
