"""When an alert resolves, the channels that were sent its firing are told: a signed
webhook, Slack and email each get a "resolved" message; channels never told hear nothing."""

import hashlib
import hmac
import json
from datetime import timedelta

import pytest
from alert_support import Receiver
from django.core import mail
from django.utils import timezone

from alerting import alerts, notify, services
from alerting.models import AlertKind, Notification

LATER = timedelta(seconds=60)


@pytest.fixture
def receiver(settings):
    settings.ALERT_WEBHOOK_ALLOW_HOSTS = "127.0.0.1"
    settings.ALERT_GROUP_INTERVAL_S = 0
    found = Receiver()
    yield found
    found.close()


@pytest.fixture
def rule(alice, acme):
    return services.create_rule(actor=alice, team=acme, name="busy", metric="gpu_util", threshold=90, hold_s=5)


def fire(rule, uuid="GPU-1"):
    return alerts.raise_alert(AlertKind.UTILIZATION, alerts.Condition(
        key=f"r{rule.pk}:{uuid}", uuid=uuid, message=f"{uuid} is busy", rule_id=rule.pk, team_id=rule.team_id,
        value=97,
    ))


def fire_send_resolve(rule, uuid="GPU-1"):
    alert = fire(rule, uuid)
    notify.dispatch(now=timezone.now() + LATER)
    alerts.resolve_alert(alert, why="condition cleared")
    notify.dispatch(now=timezone.now() + 2 * LATER)
    return alert


def test_a_webhook_gets_a_signed_resolved_message(receiver, rule, alice, acme):
    channel = services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target=receiver.url)
    alert = fire_send_resolve(rule)
    [fired, (headers, body)] = receiver.posts
    assert json.loads(fired[1])["status"] == "firing"
    assert headers["x-gpuconsole-signature"] == "sha256=" + hmac.new(channel.secret.encode(), body, hashlib.sha256).hexdigest()
    data = json.loads(body)
    assert (data["status"], data["summary"]) == ("resolved", "[resolved] GPU-1 is busy")
    assert [(a["id"], a["state"], a["resolved_at"] is not None) for a in data["alerts"]] == [(alert.pk, "resolved", True)]


def test_slack_gets_a_resolved_message(receiver, rule, alice, acme):
    services.create_channel(actor=alice, team=acme, name="slack", kind="slack", target=receiver.url)
    fire_send_resolve(rule)
    text = json.loads(receiver.posts[1][1])["text"]
    assert text.startswith("[resolved] GPU-1 is busy") and "(resolved 20" in text


def test_email_gets_a_resolved_message(rule, alice, acme, settings):
    settings.ALERT_GROUP_INTERVAL_S = 0
    services.create_channel(actor=alice, team=acme, name="mail", kind="email", target="oncall@acme.test")
    fire_send_resolve(rule)
    assert [m.subject for m in mail.outbox] == ["[GPU Console] [warning] GPU-1 is busy",
                                                "[GPU Console] [resolved] GPU-1 is busy"]
    assert mail.outbox[1].to == ["oncall@acme.test"]


def test_a_channel_that_never_sent_the_firing_hears_nothing(receiver, rule, alice, acme):
    alert = fire(rule)
    notify.dispatch(now=timezone.now() + LATER)
    services.create_channel(actor=alice, team=acme, name="late", kind="webhook", target=receiver.url)
    alerts.resolve_alert(alert)
    notify.dispatch(now=timezone.now() + 2 * LATER)
    assert receiver.posts == [] and not Notification.objects.exists()


def test_one_of_two_resolving_counts_both(receiver, rule, alice, acme):
    services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target=receiver.url)
    first, second = fire(rule, "GPU-1"), fire(rule, "GPU-2")
    notify.dispatch(now=timezone.now() + LATER)
    alerts.resolve_alert(first)
    fire(rule, "GPU-3")
    notify.dispatch(now=timezone.now() + 2 * LATER)
    data = json.loads(receiver.posts[1][1])
    assert data["status"] == "firing" and data["summary"] == "[warning] busy: 1 firing, 1 resolved"
    assert second.pk not in [a["id"] for a in data["alerts"]]
