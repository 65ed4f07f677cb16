"""/api/v1/notification-channels/: per team, the webhook secret shown once, a test
action with a delivery log, SSRF refusals as 400s."""

import pytest
from alert_support import Receiver

from alerting.models import NotificationChannel
from audit.models import AuditEvent


@pytest.fixture
def receiver(settings):
    settings.ALERT_WEBHOOK_ALLOW_HOSTS = "127.0.0.1"
    found = Receiver()
    yield found
    found.close()


def make(api, user, team, **extra):
    body = {"team": team.pk if team else None, "name": "hook", "kind": "webhook"} | extra
    return api(user).post("/api/v1/notification-channels/", body, format="json")


def test_the_secret_is_in_the_creation_answer_only(api, alice, acme, receiver):
    created = make(api, alice, acme, target=receiver.url).json()
    assert len(created["secret"]) == 64
    listed = api(alice).get(f"/api/v1/notification-channels/{created['id']}/").json()
    assert "secret" not in listed
    event = AuditEvent.objects.get(action="notification_channel.create")
    assert created["secret"] not in str(event.details)


def test_send_test_posts_and_logs_the_delivery(api, alice, acme, receiver):
    created = make(api, alice, acme, target=receiver.url).json()
    answer = api(alice).post(f"/api/v1/notification-channels/{created['id']}/test/").json()
    assert (answer["ok"], answer["status_code"]) == (True, 200) and len(receiver.posts) == 1
    log = api(alice).get(f"/api/v1/notification-channels/{created['id']}/deliveries/").json()
    assert [d["ok"] for d in log] == [True]


def test_a_loopback_target_is_a_400(api, alice, acme):
    response = make(api, alice, acme, target="http://127.0.0.1:8000/hook")
    assert response.status_code == 400 and "ALERT_WEBHOOK_ALLOW_HOSTS" in response.json()["target"][0]
    assert not NotificationChannel.objects.exists()


def test_members_and_other_teams_cannot_manage_channels(api, bob, charlie, alice, acme, receiver):
    assert make(api, bob, acme, target=receiver.url).status_code == 403
    assert make(api, charlie, acme, target=receiver.url).status_code == 400  # not a team charlie can see
    created = make(api, alice, acme, target=receiver.url).json()
    assert api(charlie).post(f"/api/v1/notification-channels/{created['id']}/test/").status_code == 404


def test_operators_own_the_channels_without_a_team(api, ops, alice, receiver):
    assert make(api, alice, None, target=receiver.url).status_code == 403
    assert make(api, ops, None, target=receiver.url).status_code == 201


def test_an_email_channel_needs_addresses(api, alice, acme):
    assert make(api, alice, acme, kind="email", target="not an address").status_code == 400
    assert make(api, alice, acme, kind="email", target="a@acme.test, b@acme.test").status_code == 201
