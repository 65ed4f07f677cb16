"""The data of every event a publisher sends over /ws/live/ is a struct of the one schema
(``agent.protocol.LIVE_EVENTS``), and the browser gets the text it always got: the same
keys in the same order, nulls included."""

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from agent.protocol import (
    LIVE_EVENTS,
    Gpus,
    LiveAlert,
    LiveBudget,
    LiveError,
    LiveInstance,
    LiveMaintenance,
    LiveMessage,
    LivePreemption,
    Subscription,
)
from alerting import alerts
from alerting.models import AlertKind, Severity
from console import live
from instances import cordon, lifecycle, preemption

NOW = datetime(2026, 12, 3, 16, 0, tzinfo=UTC)


def _old(event, data):
    """The text of a message whose data was its publisher's dict."""
    return json.dumps({"event": event, "data": data}, separators=(",", ":"))


@pytest.fixture
def published(monkeypatch):
    sent = []
    monkeypatch.setattr(live, "publish", lambda groups, event, data: sent.append((groups, event, data)))
    return sent


def _texts(published, event):
    return [live.encode(e, data) for _, e, data in published if e == event]


def test_an_alert_is_sent_as_it_always_was(acme_instance, published, django_capture_on_commit_callbacks):
    host = acme_instance.gpus.first().host
    with django_capture_on_commit_callbacks(execute=True):
        alert = alerts.raise_alert(AlertKind.TEMPERATURE, alerts.Condition(
            key="temp:GPU-h100-a-0", message="GPU GPU-h100-a-0 is at 91 °C", value=91.0, threshold=85.0,
            host_id=host.pk, uuid="GPU-h100-a-0", instance_id=acme_instance.pk, team_id=acme_instance.team_id,
            severity=Severity.CRITICAL,
        ), now=NOW)
    [text] = _texts(published, "alert")
    assert text == (
        f'{{"event":"alert","data":{{"id":{alert.pk},"kind":"temperature","category":"telemetry",'
        f'"severity":"critical","state":"open","message":"GPU GPU-h100-a-0 is at 91 \\u00b0C",'
        f'"uuid":"GPU-h100-a-0","instance":{acme_instance.pk},"team":{acme_instance.team_id},"host":{host.pk},'
        '"rule":null,"value":91.0,"opened_at":"2026-12-03T16:00:00+00:00",'
        '"updated_at":"2026-12-03T16:00:00+00:00","resolved_at":null}}'
    )
    with django_capture_on_commit_callbacks(execute=True):
        alerts.resolve_alert(alert, now=NOW + timedelta(minutes=5), why="cooled down")
    resolved = json.loads(_texts(published, "alert")[-1])["data"]
    assert (resolved["state"], resolved["resolved_at"]) == ("resolved", "2026-12-03T16:05:00+00:00")


def test_an_alert_about_nothing_in_particular_keeps_its_nulls():
    data = LiveAlert(id=3, kind="agent_silent", category="telemetry", severity="warning", state="open",
                     message="déjà vu", uuid="", opened_at="2026-12-03T16:00:00+00:00",
                     updated_at="2026-12-03T16:00:30+00:00")
    assert live.encode("alert", data) == (
        '{"event":"alert","data":{"id":3,"kind":"agent_silent","category":"telemetry","severity":"warning",'
        '"state":"open","message":"d\\u00e9j\\u00e0 vu","uuid":"","instance":null,"team":null,"host":null,'
        '"rule":null,"value":null,"opened_at":"2026-12-03T16:00:00+00:00",'
        '"updated_at":"2026-12-03T16:00:30+00:00","resolved_at":null}}'
    )


def test_an_instance_change_is_sent_as_it_always_was(launch, bob, acme, published, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        instance = lifecycle.mark_running(instance=launch(bob, acme, name="acme-train"))
    text = _texts(published, "instance")[-1]
    assert text == f'{{"event":"instance","data":{{"id":{instance.pk},"name":"acme-train","state":"running","team":{acme.pk}}}}}'
    assert text == _old("instance", {"id": instance.pk, "name": "acme-train", "state": "running", "team": acme.pk})


def test_a_drain_tells_an_on_demand_instance_as_it_always_did(acme_instance, ops, published,
                                                             django_capture_on_commit_callbacks):
    host = acme_instance.gpus.first().host
    with django_capture_on_commit_callbacks(execute=True):
        cordon.drain_host(actor=ops, host=host, reason="PSU swap")
    [text] = _texts(published, "maintenance")
    assert text == (
        f'{{"event":"maintenance","data":{{"team":{acme_instance.team_id},"instance":{acme_instance.pk},'
        '"name":"acme-train","message":"The host of acme-train is being drained for maintenance (PSU swap); '
        'an operator will contact you before anything is moved."}}'
    )


def test_a_preemption_notice_is_sent_as_it_always_was(launch, bob, acme, ops, published,
                                                     django_capture_on_commit_callbacks):
    instance = lifecycle.mark_running(instance=launch(bob, acme, name="spot-train", pricing="spot"))
    with django_capture_on_commit_callbacks(execute=True):
        preemption.issue_preemption_notice(actor=ops, instance=instance, now=NOW, reason="capacity")
    [text] = _texts(published, "preemption")
    assert text == (
        f'{{"event":"preemption","data":{{"team":{acme.pk},"instance":{instance.pk},"name":"spot-train",'
        '"preempt_at":"2026-12-03T16:02:00+00:00","seconds":120,"reason":"capacity"}}'
    )


def test_a_budget_crossing_is_sent_as_it_always_was():
    # As billing.budgets builds it: the decimals as text, the basis a TextChoices value.
    from billing.models import Basis

    data = LiveBudget(team=4, basis=Basis.ACTUAL, percent=50, spend=str(Decimal("50.00")),
                      amount=str(Decimal("100.00")), currency="EUR",
                      message="Spend this month for Acme is 50.00 EUR, 50% or more of the December 2026 budget "
                              "of 100.00 EUR.")
    text = live.encode("budget", data)
    assert text == (
        '{"event":"budget","data":{"team":4,"basis":"actual","percent":50,"spend":"50.00","amount":"100.00",'
        '"currency":"EUR","message":"Spend this month for Acme is 50.00 EUR, 50% or more of the December 2026 '
        'budget of 100.00 EUR."}}'
    )
    assert text == _old("budget", {"team": 4, "basis": "actual", "percent": 50, "spend": "50.00", "amount": "100.00",
                                   "currency": "EUR", "message": data.message})


def test_every_event_has_one_data_type():
    assert LIVE_EVENTS == {
        "gpus": Gpus, "subscribed": Subscription, "unsubscribed": Subscription, "error": LiveError,
        "alert": LiveAlert, "instance": LiveInstance, "budget": LiveBudget, "preemption": LivePreemption,
        "maintenance": LiveMaintenance,
    }


def test_a_message_of_no_known_event_or_of_the_wrong_data_is_refused():
    instance = LiveInstance(id=1, name="a", state="running", team=2)
    with pytest.raises(ValueError, match="unknown live event 'instances'"):
        LiveMessage("instances", instance)
    with pytest.raises(TypeError, match="the data of 'alert' is a LiveAlert, not LiveInstance"):
        LiveMessage("alert", instance)
    with pytest.raises(TypeError, match="not dict"):
        live.encode("instance", {"id": 1, "name": "a", "state": "running", "team": 2})
    with pytest.raises(TypeError):
        live.message("preemption", LiveMaintenance(team=2, instance=1, name="a", message="m"))
