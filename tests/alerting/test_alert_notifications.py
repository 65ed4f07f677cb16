"""Alerts reach the owner's channels: a signed JSON webhook, Slack, email; grouped per
rule and host; retried with backoff; every attempt logged; silences respected."""

import hashlib
import hmac
import json
from datetime import timedelta

import pytest
from alert_support import Receiver
from django.core import mail
from django.core.exceptions import ValidationError
from django.utils import timezone

from alerting import alerts, notify, services
from alerting.models import AlertKind, Delivery, Notification

LATER = timedelta(seconds=60)


@pytest.fixture
def receiver(settings):
    settings.ALERT_WEBHOOK_ALLOW_HOSTS = "127.0.0.1"
    found = Receiver()
    yield found
    found.close()


@pytest.fixture
def rule(alice, acme):
    return services.create_rule(actor=alice, team=acme, name="busy", metric="gpu_util", threshold=90, hold_s=5)


def fire(rule, uuid="GPU-1", host=None, **extra):
    return alerts.raise_alert(AlertKind.UTILIZATION, alerts.Condition(
        key=f"r{rule.pk}:{uuid}", uuid=uuid, message=f"{uuid} is busy", rule_id=rule.pk, team_id=rule.team_id,
        host_id=getattr(host, "pk", None), value=97, **extra,
    ))


def test_a_webhook_gets_the_alert_signed_with_the_channels_secret(receiver, rule, alice, acme):
    channel = services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target=receiver.url)
    alert = fire(rule)
    notify.dispatch(now=timezone.now() + LATER)
    [(headers, body)] = receiver.posts
    expected = "sha256=" + hmac.new(channel.secret.encode(), body, hashlib.sha256).hexdigest()
    assert headers["x-gpuconsole-signature"] == expected
    assert json.loads(body)["alerts"][0]["id"] == alert.pk
    assert Delivery.objects.get(channel=channel).ok


def test_nothing_is_sent_before_the_group_wait(receiver, rule, alice, acme):
    services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target=receiver.url)
    fire(rule)
    assert notify.dispatch() == 0 and receiver.posts == []


def test_eight_hot_gpus_of_one_host_send_one_message(receiver, rule, alice, acme, fleet):
    services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target=receiver.url)
    for i in range(8):
        fire(rule, uuid=f"GPU-{i}", host=fleet["hosts"]["h100-a"])
    notify.dispatch(now=timezone.now() + LATER)
    assert len(receiver.posts) == 1 and len(json.loads(receiver.posts[0][1])["alerts"]) == 8


def test_a_flapping_gpu_sends_one_message_per_group_interval(receiver, rule, alice, acme, settings):
    settings.ALERT_GROUP_INTERVAL_S = 300
    services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target=receiver.url)
    for _ in range(3):
        alerts.resolve_alert(fire(rule))
        notify.dispatch(now=timezone.now() + LATER)
    assert len(receiver.posts) == 1
    notify.dispatch(now=timezone.now() + timedelta(seconds=400))
    assert len(receiver.posts) == 2 and len(json.loads(receiver.posts[1][1])["alerts"]) == 2


def test_a_failed_delivery_is_logged_and_retried_with_backoff(receiver, rule, alice, acme):
    receiver.statuses = [500]
    services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target=receiver.url)
    fire(rule)
    first = timezone.now() + LATER
    notify.dispatch(now=first)
    notification = Notification.objects.get()
    assert (notification.status, notification.attempts, notification.send_after) == ("pending", 1, first + timedelta(seconds=10))
    notify.dispatch(now=first + timedelta(seconds=10))
    assert list(Delivery.objects.order_by("attempt").values_list("ok", "status_code")) == [(False, 500), (True, 200)]


def test_slack_gets_text(receiver, rule, alice, acme):
    services.create_channel(actor=alice, team=acme, name="slack", kind="slack", target=receiver.url)
    fire(rule)
    notify.dispatch(now=timezone.now() + LATER)
    assert "GPU-1 is busy" in json.loads(receiver.posts[0][1])["text"]


def test_email_goes_to_the_addresses(rule, alice, acme):
    services.create_channel(actor=alice, team=acme, name="mail", kind="email", target="oncall@acme.test")
    fire(rule)
    notify.dispatch(now=timezone.now() + LATER)
    assert mail.outbox[0].to == ["oncall@acme.test"] and "GPU-1 is busy" in mail.outbox[0].body


def test_another_teams_channel_hears_nothing(receiver, rule, charlie, globex):
    services.create_channel(actor=charlie, team=globex, name="hook", kind="webhook", target=receiver.url)
    fire(rule)
    notify.dispatch(now=timezone.now() + LATER)
    assert receiver.posts == []


def test_a_silenced_alert_is_not_sent(receiver, rule, alice, acme):
    services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target=receiver.url)
    alert = fire(rule)
    services.silence(actor=alice, alert=alert, ends_at=timezone.now() + timedelta(hours=1))
    notify.dispatch(now=timezone.now() + LATER)
    assert receiver.posts == [] and Notification.objects.get().status == "suppressed"


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/x", "http://10.1.2.3/x", "http://169.254.169.254/latest",
                                 "http://[::1]/x", "http://localhost/x", "ftp://example.com/x"])
def test_private_and_loopback_targets_are_refused(alice, acme, url):
    with pytest.raises(ValidationError, match="target"):
        services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target=url)


def test_an_allowed_host_is_accepted(alice, acme, settings):
    settings.ALERT_WEBHOOK_ALLOW_HOSTS = "localhost, 10.0.0.0/8"
    for url in ("http://localhost:8080/x", "http://10.1.2.3/x"):
        services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target=url)


def test_send_test_delivers_now_and_logs_it(receiver, alice, acme):
    channel = services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target=receiver.url)
    delivery = services.send_test(actor=alice, channel=channel)
    assert delivery.ok and json.loads(receiver.posts[0][1])["test"] is True
