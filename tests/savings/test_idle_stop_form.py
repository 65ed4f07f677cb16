"""The idle-stop form: alice (admin) sets Acme's policy on the Savings page and an
instance's own on its page, audited; bad minutes are named (400) and write nothing;
bob (member) sees the policy and is refused the form; charlie gets 404 for Acme's."""

import pytest

from audit.models import AuditEvent
from savings.models import IdleStopPolicy


@pytest.fixture
def train(alice, acme, running):
    return running(alice, acme, "train")


def test_alice_sets_the_teams_policy_from_the_savings_page(alice, acme, client):
    client.force_login(alice)
    assert 'action="/savings/idle-stop/"' in client.get("/savings/").content.decode()
    answer = client.post("/savings/idle-stop/", {"team": acme.pk, "enabled": "on", "idle_minutes": "45",
                                                 "warn_minutes": "5"})
    assert answer.status_code == 302 and answer.url == f"/savings/?team={acme.pk}"
    policy = IdleStopPolicy.objects.get(team=acme, instance=None)
    assert (policy.idle_minutes, policy.warn_minutes, policy.enabled) == (45, 5, True)
    assert AuditEvent.objects.filter(action="savings.idle_stop.set", team=acme).count() == 1


def test_alice_sets_an_instances_policy_and_turns_it_off(alice, train, client):
    client.force_login(alice)
    client.post(f"/savings/idle-stop/{train.pk}/", {"enabled": "on", "idle_minutes": "30", "warn_minutes": "10"})
    assert "after 30 idle minutes" in client.get(f"/instances/{train.pk}/").content.decode()
    client.post(f"/savings/idle-stop/{train.pk}/", {"idle_minutes": "30", "warn_minutes": "10"})
    assert IdleStopPolicy.objects.get(instance=train).enabled is False
    assert "off for this instance" in client.get(f"/instances/{train.pk}/").content.decode()
    assert AuditEvent.objects.filter(action="savings.idle_stop.off").count() == 1


@pytest.mark.parametrize("idle, warn, field, words", [
    ("ten", "5", "idle_minutes", "whole number"),
    ("1.5", "5", "idle_minutes", "whole number"),
    ("", "5", "idle_minutes", "whole number"),
    ("0", "5", "idle_minutes", "between 10 and 10080"),
    ("-30", "5", "idle_minutes", "between 10 and 10080"),
    ("99999999999999999999", "5", "idle_minutes", "between 10 and 10080"),
    ("60", "0", "warn_minutes", "at least 1"),
    ("60", "-1", "warn_minutes", "at least 1"),
    ("60", "90", "warn_minutes", "less than idle_minutes"),
])
def test_bad_minutes_are_named_and_write_nothing(alice, train, client, idle, warn, field, words):
    client.force_login(alice)
    answer = client.post(f"/savings/idle-stop/{train.pk}/", {"enabled": "on", "idle_minutes": idle,
                                                              "warn_minutes": warn})
    page = answer.content.decode()
    named = page[page.index('id="idle-stop-errors"'):]
    named = named[:named.index("</div>")]
    assert answer.status_code == 400
    assert field in named and words in named
    assert not IdleStopPolicy.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="savings.idle_stop").exists()


def test_bob_sees_the_policy_but_is_refused_the_form(alice, bob, acme, train, client):
    client.force_login(alice)
    client.post("/savings/idle-stop/", {"team": acme.pk, "enabled": "on", "idle_minutes": "60", "warn_minutes": "10"})
    client.force_login(bob)
    page = client.get(f"/instances/{train.pk}/").content.decode()
    assert "after 60 idle minutes" in page and "(the team's policy)" in page
    assert "idle-stop-form" not in page
    assert "every instance is stopped after 60 idle minutes" in client.get("/team/").content.decode()
    assert client.post(f"/savings/idle-stop/{train.pk}/", {"enabled": "on", "idle_minutes": "20",
                                                           "warn_minutes": "5"}).status_code == 403
    assert client.post("/savings/idle-stop/", {"team": acme.pk, "idle_minutes": "20",
                                               "warn_minutes": "5"}).status_code == 403
    assert list(IdleStopPolicy.objects.values_list("idle_minutes", "enabled")) == [(60, True)]


def test_charlie_gets_404_for_acmes_instance_and_team(charlie, acme, train, client):
    client.force_login(charlie)
    body = {"team": acme.pk, "enabled": "on", "idle_minutes": "20", "warn_minutes": "5"}
    assert client.post(f"/savings/idle-stop/{train.pk}/", body).status_code == 404
    assert client.post("/savings/idle-stop/", body).status_code == 404
    assert client.post("/savings/idle-stop/", {**body, "team": "acme"}).status_code == 404
    assert not IdleStopPolicy.objects.exists()
