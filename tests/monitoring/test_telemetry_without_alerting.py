"""Telemetry imports no alert code: it tells whatever is connected to its alert hooks.
With nothing connected, readings and events are stored and open no alert."""

import pytest

from alerting.models import Alert
from monitoring import alert_hooks
from monitoring.models import AgentState, GpuEvent


@pytest.fixture
def gpu(fleet):
    host = fleet["hosts"]["h200-a"]
    AgentState.objects.create(host=host, connected=True)
    return host.gpus.get()


@pytest.fixture
def unconnected(monkeypatch):
    monkeypatch.setattr(alert_hooks, "_keeper", alert_hooks.Unconnected())


def test_an_xid_error_opens_the_operators_alert(gpu, agent_ingest_event):
    agent_ingest_event(gpu, "xid", code=79, message="fell off the bus")
    assert Alert.objects.get().kind == "xid"


def test_unconnected_the_xid_error_is_stored_and_opens_no_alert(unconnected, gpu, agent_ingest_event):
    agent_ingest_event(gpu, "xid", code=79, message="fell off the bus")
    assert GpuEvent.objects.get().code == 79
    assert not Alert.objects.exists()


def test_unconnected_the_overview_shows_no_alerts(unconnected, client, ops, gpu):
    client.force_login(ops)
    assert client.get("/").status_code == 200
