"""/api/v1/alerts/ and /api/v1/gpu-events/: tenant-scoped lists, filters, acknowledge."""

import pytest

from alerting.models import Alert
from audit.models import AuditEvent
from monitoring.models import GpuEvent


@pytest.fixture
def acme_alert(acme_instance):
    gpu = acme_instance.gpus.first()
    return Alert.objects.create(kind="temperature", key=f"temperature:{gpu.uuid}", uuid=gpu.uuid, gpu=gpu,
                                host=gpu.host, instance=acme_instance, team=acme_instance.team, message="hot")


@pytest.fixture
def fleet_alert(fleet):
    return Alert.objects.create(kind="agent_silent", key="agent_silent:h100-b", host=fleet["hosts"]["h100-b"],
                                message="quiet")


def test_a_team_lists_its_alerts_only(api, bob, charlie, acme_alert, fleet_alert):
    assert [a["id"] for a in api(bob).get("/api/v1/alerts/").json()["results"]] == [acme_alert.pk]
    assert api(charlie).get("/api/v1/alerts/").json()["results"] == []


def test_operators_list_every_alert_and_filter(api, ops, acme_alert, fleet_alert):
    assert api(ops).get("/api/v1/alerts/").json()["count"] == 2
    kinds = [a["kind"] for a in api(ops).get("/api/v1/alerts/", {"kind": "agent_silent"}).json()["results"]]
    assert kinds == ["agent_silent"]
    assert api(ops).get("/api/v1/alerts/", {"state": "resolved"}).json()["count"] == 0
    assert api(ops).get("/api/v1/alerts/", {"kind": "nope"}).status_code == 400


def test_a_member_acknowledges_and_it_is_audited(api, bob, acme_alert):
    response = api(bob).post(f"/api/v1/alerts/{acme_alert.pk}/acknowledge/")
    assert response.status_code == 200
    assert (response.json()["state"], response.json()["acknowledged_by"]) == ("acknowledged", "bob")
    event = AuditEvent.objects.get(action="alert.acknowledge")
    assert (event.actor_name, event.team_id) == ("bob", acme_alert.team_id)


def test_an_auditor_cannot_acknowledge(api, audrey, acme_alert):
    assert api(audrey).post(f"/api/v1/alerts/{acme_alert.pk}/acknowledge/").status_code == 403
    acme_alert.refresh_from_db()
    assert acme_alert.state == "open"


def test_charlie_gets_404(api, charlie, acme_alert):
    assert api(charlie).post(f"/api/v1/alerts/{acme_alert.pk}/acknowledge/").status_code == 404


def test_a_resolved_alert_cannot_be_acknowledged(api, bob, acme_alert):
    Alert.objects.filter(pk=acme_alert.pk).update(state="resolved")
    assert api(bob).post(f"/api/v1/alerts/{acme_alert.pk}/acknowledge/").status_code == 409


def test_gpu_events_are_tenant_scoped(api, bob, charlie, acme_instance):
    gpu = acme_instance.gpus.first()
    GpuEvent.objects.create(kind="xid", code=79, host=gpu.host, gpu=gpu, uuid=gpu.uuid, team=acme_instance.team)
    assert api(bob).get("/api/v1/gpu-events/", {"kind": "xid"}).json()["results"][0]["code"] == 79
    assert api(charlie).get("/api/v1/gpu-events/").json()["count"] == 0
