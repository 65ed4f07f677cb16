"""Rules over a window run in the periodic task: agent silence, GPUs idle but billed
(each GPU, also inside a busy instance); alerts of stale, disabled or deleted rules
end; failed audit verifications and spot preemption notices are alerts too."""

from datetime import timedelta

import pytest
from django.utils import timezone
from telemetry_wire import add_samples

from alerting import alerts, periodic, services
from alerting.models import Alert, AlertRule
from audit.models import Verification
from instances import lifecycle as instance_lifecycle
from instances import preemption as instance_preemption
from monitoring.models import AgentState


def active(**filters):
    return list(Alert.objects.filter(state__in=("open", "acknowledged"), **filters))


@pytest.fixture
def busy_and_idle(launch, bob, acme):
    """An Acme instance of two GPUs running for an hour: GPU 0 busy, GPU 1 idle."""
    began = timezone.now() - timedelta(hours=1)
    instance = launch(bob, acme, name="half-idle", count=2, at=began)
    instance_lifecycle.mark_running(instance=instance, at=began)
    busy, idle = instance.gpus.order_by("index")
    start = timezone.now() - timedelta(seconds=125)
    add_samples(busy, start, [{"gpu_util": 95, "sm_occupancy_pct": 80}] * 24, step=timedelta(seconds=5), instance=instance)
    add_samples(idle, start, [{"gpu_util": 0, "sm_occupancy_pct": 0}] * 24, step=timedelta(seconds=5), instance=instance)
    return instance, busy, idle


def test_an_idle_gpu_inside_a_busy_instance_raises_its_own_alert(busy_and_idle, alice, acme):
    instance, busy, idle = busy_and_idle
    rule = services.create_rule(actor=alice, team=acme, name="idle 2 min", metric="idle_billed", comparison="<",
                                threshold=10, hold_s=120, severity="info")
    periodic.evaluate()
    [alert] = active(rule=rule)
    assert (alert.uuid, alert.instance_id, alert.team_id) == (idle.uuid, instance.pk, acme.pk)


def test_another_teams_idle_rule_ignores_it(busy_and_idle, charlie, globex):
    rule = services.create_rule(actor=charlie, team=globex, name="idle", metric="idle_billed", comparison="<",
                                threshold=10, hold_s=120)
    periodic.evaluate()
    assert active(rule=rule) == []


def test_a_silent_agent_alerts_the_teams_on_that_host_and_the_operators(acme_instance, acme, globex):
    host = acme_instance.host
    AgentState.objects.create(host=host, last_seen_at=timezone.now() - timedelta(minutes=5))
    periodic.evaluate()
    assert {a.rule.team_id for a in active(kind="agent_silent")} == {acme.pk, None}
    assert host.name in active(kind="agent_silent")[0].message


def test_it_resolves_when_the_agent_speaks_again(acme_instance):
    state = AgentState.objects.create(host=acme_instance.host, last_seen_at=timezone.now() - timedelta(minutes=5))
    periodic.evaluate()
    AgentState.objects.filter(pk=state.pk).update(last_seen_at=timezone.now())
    periodic.evaluate()
    assert active(kind="agent_silent") == []


def test_a_disabled_rule_ends_its_alerts(acme_instance, acme, alice):
    AgentState.objects.create(host=acme_instance.host, last_seen_at=timezone.now() - timedelta(minutes=5))
    periodic.evaluate()
    rule = AlertRule.objects.get(team=acme, metric="agent_silent")
    services.update_rule(actor=alice, rule=rule, enabled=False)
    periodic.evaluate()
    assert active(rule=rule) == []


def test_an_ingest_alert_no_reading_refreshes_goes_stale(acme_instance, acme, settings):
    rule = AlertRule.objects.get(team=acme, metric="temp_c")
    old = timezone.now() - timedelta(minutes=10)
    alerts.raise_alert("temperature", alerts.Condition(key=f"r{rule.pk}:GPU-x:i0", message="hot", rule_id=rule.pk,
                                                       team_id=acme.pk), now=old)
    periodic.evaluate()
    assert active(rule=rule) == []


def test_a_failed_audit_verification_is_an_operators_alert(db):
    Verification.objects.create(actor_name="system", valid=False, checked=10, first_broken_seq=7, reason="hash differs",
                                seconds=0.1)
    periodic.evaluate()
    [alert] = active(category="audit")
    assert alert.team_id is None and "record 7" in alert.message and alert.severity == "critical"
    Verification.objects.create(actor_name="system", valid=True, checked=10, seconds=0.1)
    periodic.evaluate()
    assert active(category="audit") == []


def test_a_spot_preemption_notice_is_a_billing_alert_for_the_team(launch, bob, acme, ops):
    instance = instance_lifecycle.mark_running(instance=launch(bob, acme, name="spotty", pricing="spot"))
    instance_preemption.issue_preemption_notice(actor=ops, instance=instance, reason="capacity")
    periodic.evaluate()
    [alert] = active(category="billing")
    assert (alert.team_id, alert.instance_id, alert.kind) == (acme.pk, instance.pk, "preemption")
