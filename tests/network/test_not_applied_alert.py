"""Operators are alerted when a host has not applied a change within 30 s."""

from datetime import timedelta

from django.utils import timezone

from agent import protocol as wire
from alerting.models import Alert, AlertKind, AlertState
from network import rulesets, tasks
from network.models import HostRules


def test_a_host_that_does_not_apply_within_30_s_raises_an_operator_alert(fleet, acme, bob, running):
    host = fleet["hosts"]["h100-a"]
    running(bob, acme, "web", host=host)
    made = HostRules.objects.get(host=host).changed_at
    tasks.check_hosts(now=(made + timedelta(seconds=29)).isoformat())
    assert not Alert.objects.filter(kind=AlertKind.NETWORK_RULES).exists()
    tasks.check_hosts(now=(made + timedelta(seconds=31)).isoformat())
    alert = Alert.objects.get(kind=AlertKind.NETWORK_RULES)
    assert alert.team_id is None and alert.host_id == host.pk
    assert "has not applied network rules version 1" in alert.message


def test_the_alert_resolves_once_the_host_reports_the_version(fleet, acme, bob, running):
    host = fleet["hosts"]["h100-a"]
    running(bob, acme, "web", host=host)
    rules = HostRules.objects.get(host=host)
    tasks.check_hosts(now=(rules.changed_at + timedelta(seconds=31)).isoformat())
    rulesets.record_report(host=host, report=wire.RulesetApplied(version=rules.version, hash=rules.hash, ok=True))
    tasks.check_hosts(now=(timezone.now() + timedelta(seconds=60)).isoformat())
    assert Alert.objects.get(kind=AlertKind.NETWORK_RULES).state == AlertState.RESOLVED


def test_a_team_member_does_not_see_the_operators_alert(api, fleet, acme, bob, running):
    host = fleet["hosts"]["h100-a"]
    running(bob, acme, "web", host=host)
    tasks.check_hosts(now=(timezone.now() + timedelta(seconds=60)).isoformat())
    assert Alert.objects.filter(kind=AlertKind.NETWORK_RULES).exists()
    seen = api(bob).get("/api/v1/alerts/")
    assert seen.status_code == 200
    assert AlertKind.NETWORK_RULES not in seen.content.decode()


def test_a_host_that_keeps_refusing_is_audited_once_per_reason(fleet, acme, bob, running):
    from audit.models import AuditEvent

    host = fleet["hosts"]["h100-a"]
    running(bob, acme, "web", host=host)
    rules = HostRules.objects.get(host=host)
    refusal = wire.RulesetApplied(version=0, hash="", ok=False, offered=rules.version, error="not enforced here")
    for _ in range(3):  # the periodic check asks again every 10 s
        rulesets.record_report(host=host, report=refusal)
    assert AuditEvent.objects.filter(action="network.rules.refused").count() == 1
