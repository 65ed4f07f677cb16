"""The alerts page: each team sees its own, filters name a bad value, and members
acknowledge from the page (audited); auditors and outsiders cannot."""

import pytest

from alerting.models import Alert, AlertKind, AlertState
from audit.models import AuditEvent


@pytest.fixture
def acme_alert(acme, acme_instance):
    return Alert.objects.create(
        kind=AlertKind.TEMPERATURE,
        key="temperature:GPU-h100-a-0",
        team=acme,
        instance=acme_instance,
        message="GPU-h100-a-0 reached 91 °C",
    )


@pytest.fixture
def globex_alert(globex):
    return Alert.objects.create(
        kind=AlertKind.XID, key="xid:GPU-h100-b-0", team=globex, message="XID 79 on globex"
    )


def test_bob_sees_acme_alerts_only(client, bob, acme_alert, globex_alert):
    client.force_login(bob)
    page = client.get("/alerts/").content.decode()
    assert "reached 91 °C" in page and "XID 79" not in page


def test_filters_narrow_by_kind_and_state(client, ops, acme_alert, globex_alert):
    client.force_login(ops)
    assert "reached 91" not in client.get("/alerts/?kind=xid").content.decode()
    Alert.objects.filter(pk=globex_alert.pk).update(state=AlertState.RESOLVED)
    page = client.get("/alerts/?state=resolved").content.decode()
    assert "XID 79" in page and "reached 91" not in page


@pytest.mark.parametrize(
    "query, field", [("state=gone", "state"), ("kind=meteor", "kind"), ("team=999", "team")]
)
def test_a_bad_filter_answers_400_naming_the_field(client, bob, acme_alert, query, field):
    client.force_login(bob)
    response = client.get(f"/alerts/?{query}")
    assert response.status_code == 400
    assert f"{field}: " in response.content.decode()


def test_bob_acknowledges_an_acme_alert_and_it_is_audited(client, bob, acme_alert):
    client.force_login(bob)
    response = client.post(f"/alerts/{acme_alert.pk}/acknowledge/", {"next": "/alerts/?state=all"})
    assert response.status_code == 302 and response.url == "/alerts/?state=all"
    acme_alert.refresh_from_db()
    assert (acme_alert.state, acme_alert.acknowledged_by) == (AlertState.ACKNOWLEDGED, bob)
    assert AuditEvent.objects.filter(action="alert.acknowledge").count() == 1


def test_charlie_gets_404_for_an_acme_alert(client, charlie, acme_alert):
    client.force_login(charlie)
    assert client.post(f"/alerts/{acme_alert.pk}/acknowledge/").status_code == 404
    acme_alert.refresh_from_db()
    assert acme_alert.state == AlertState.OPEN


def test_an_auditor_cannot_acknowledge(client, audrey, acme_alert):
    client.force_login(audrey)
    assert client.post(f"/alerts/{acme_alert.pk}/acknowledge/").status_code == 403
    acme_alert.refresh_from_db()
    assert acme_alert.state == AlertState.OPEN


def test_the_acknowledge_button_shows_only_where_it_works(client, audrey, bob, acme_alert):
    client.force_login(audrey)
    assert "Acknowledge</button>" not in client.get("/alerts/").content.decode()
    client.force_login(bob)
    assert "Acknowledge</button>" in client.get("/alerts/").content.decode()


def test_fleet_alerts_are_for_operators(client, ops, bob, fleet):
    alert = Alert.objects.create(
        kind=AlertKind.AGENT_SILENT,
        key="agent_silent:h100-a",
        host=fleet["hosts"]["h100-a"],
        message="agent quiet",
    )
    client.force_login(bob)
    assert client.post(f"/alerts/{alert.pk}/acknowledge/").status_code == 404
    client.force_login(ops)
    assert client.post(f"/alerts/{alert.pk}/acknowledge/").status_code == 302
    alert.refresh_from_db()
    assert alert.state == AlertState.ACKNOWLEDGED


def test_a_resolved_alert_is_not_acknowledged(client, bob, acme_alert):
    Alert.objects.filter(pk=acme_alert.pk).update(state=AlertState.RESOLVED)
    client.force_login(bob)
    page = client.post(f"/alerts/{acme_alert.pk}/acknowledge/", follow=True).content.decode()
    assert "nothing to acknowledge" in page
    assert not AuditEvent.objects.filter(action="alert.acknowledge").exists()


def test_an_outside_redirect_target_is_ignored(client, bob, acme_alert):
    client.force_login(bob)
    response = client.post(
        f"/alerts/{acme_alert.pk}/acknowledge/", {"next": "https://evil.example/"}
    )
    assert response.url == "/alerts/"


@pytest.mark.parametrize("target", ["foo", "0", "²", "2024-01-01T00:00", "operators", "//evil.example/", ""])
def test_a_redirect_target_that_is_not_a_path_here_is_ignored(client, bob, acme_alert, target):
    client.force_login(bob)
    response = client.post(f"/alerts/{acme_alert.pk}/acknowledge/", {"next": target})
    assert response.status_code == 302 and response.url == "/alerts/"
