"""Alert rules open, update and resolve alerts; each opening is audited and pushed."""

from datetime import timedelta

import pytest
from telemetry_wire import add_samples, utc

from audit.models import AuditEvent
from monitoring import alerts
from monitoring.models import AgentState, Alert, AlertKind, GpuLatest

NOW = utc(2026, 12, 2, 12, 0, 0)


@pytest.fixture
def held(acme_instance):
    return acme_instance.gpus.order_by("index").first()


def run_rules(now=NOW):
    alerts.evaluate(now)
    return {a.kind: a for a in Alert.objects.filter(state__in=("open", "acknowledged"))}


def test_a_hot_gpu_opens_a_temperature_alert_for_its_team(held, acme_instance):
    add_samples(held, NOW - timedelta(seconds=30), [{"temp_c": 91}], instance=acme_instance)
    alert = run_rules()["temperature"]
    assert (alert.uuid, alert.team_id, alert.instance_id, alert.value) == (held.uuid, acme_instance.team_id, acme_instance.pk, 91)
    assert AuditEvent.objects.filter(action="alert.open", target_id=str(alert.pk)).exists()


def test_a_temperature_alert_clears_only_below_the_lower_mark(held):
    add_samples(held, NOW - timedelta(seconds=30), [{"temp_c": 90}])
    run_rules()
    add_samples(held, NOW + timedelta(seconds=40), [{"temp_c": 83}])
    assert "temperature" in run_rules(NOW + timedelta(seconds=60))
    add_samples(held, NOW + timedelta(seconds=110), [{"temp_c": 79}])
    assert "temperature" not in run_rules(NOW + timedelta(seconds=120))
    assert Alert.objects.get(kind="temperature").state == "resolved"


def test_sustained_power_near_the_limit_opens_a_power_alert(held):
    add_samples(held, NOW - timedelta(seconds=50), [{"power_mw": 695_000, "power_limit_mw": 700_000}] * 40)
    assert run_rules()["power"].value == pytest.approx(695)


def test_a_power_spike_alone_does_not(held):
    add_samples(held, NOW - timedelta(seconds=50), [{"power_mw": 300_000}] * 39 + [{"power_mw": 700_000}])
    assert "power" not in run_rules()


def test_uncorrected_ecc_errors_open_an_alert(held):
    GpuLatest.objects.create(uuid=held.uuid, gpu=held, host=held.host, time=NOW, last_seen=NOW,
                             metrics={"ecc_uncorrected_volatile": 2})
    assert run_rules()["ecc_uncorrected"].value == 2


def test_a_silent_agent_opens_a_fleet_alert(fleet):
    AgentState.objects.create(host=fleet["hosts"]["h100-a"], last_seen_at=NOW - timedelta(minutes=5))
    alert = run_rules()["agent_silent"]
    assert alert.team_id is None and "h100-a" in alert.message


def test_a_repeated_condition_updates_the_open_alert(held):
    add_samples(held, NOW - timedelta(seconds=30), [{"temp_c": 90}])
    run_rules()
    add_samples(held, NOW + timedelta(seconds=10), [{"temp_c": 95}])
    run_rules(NOW + timedelta(seconds=15))
    alert = Alert.objects.get(kind="temperature")
    assert (alert.count, alert.value, alert.state) == (2, 95, "open")


def test_xid_and_lost_gpu_events_raise_alerts_and_gpu_back_resolves(agent_ingest_event, held):
    agent_ingest_event(held, "xid", code=79, message="fell off the bus")
    agent_ingest_event(held, "gpu_lost", message="GPU is lost")
    kinds = {a.kind: a for a in Alert.objects.all()}
    assert kinds["xid"].value == 79 and "fell off the bus" in kinds["xid"].message
    assert kinds["gpu_lost"].state == "open"
    agent_ingest_event(held, "gpu_back")
    assert Alert.objects.get(kind="gpu_lost").state == "resolved"


def test_opening_pushes_an_alert_event(held, acme, django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    monkeypatch.setattr(alerts, "publish_on_commit", lambda groups, event, data: sent.append((groups, event, data)))
    add_samples(held, NOW - timedelta(seconds=30), [{"temp_c": 99}])
    run_rules()
    groups, event, data = sent[0]
    assert event == "alert" and f"team.{acme.pk}" in groups and "fleet" in groups
    assert data["kind"] == "temperature" and data["state"] == "open"


def test_the_kinds_are_the_documented_ones():
    assert set(AlertKind.values) == {"temperature", "power", "xid", "ecc_uncorrected", "gpu_lost", "agent_silent", "idle"}
