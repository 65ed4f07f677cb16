"""Idle stop: off unless a team opts in; a notice before the stop, the stop through the
instances' own verb, activity or turning the policy off stands it down; all audited."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from audit.models import AuditEvent
from instances import lifecycle as instance_lifecycle
from monitoring.models import Rollup1m
from savings import idle_stop
from savings.models import IdleStopNotice


@pytest.fixture
def idle(alice, acme, running, telemetry):
    instance = running(alice, acme, "notebook")
    telemetry(instance, minutes=40, mem_gb=60, activity=0, dram=1)  # memory held, nothing computed
    return instance


def _state(instance):
    instance.refresh_from_db()
    return instance.state


def test_nothing_is_stopped_without_a_policy(idle):
    assert idle_stop.enforce() == {"warned": 0, "stopped": 0, "cancelled": 0}
    assert _state(idle) == "running"


def test_a_notice_comes_first_then_the_stop(alice, acme, idle):
    idle_stop.set_policy(actor=alice, team=acme, idle_minutes=30, warn_minutes=10)
    now = timezone.now()
    assert idle_stop.enforce(now=now)["warned"] == 1
    notice = IdleStopNotice.objects.get(instance=idle)
    assert _state(idle) == "running" and notice.stop_at > now
    assert idle_stop.enforce(now=notice.stop_at)["stopped"] == 1
    assert _state(idle) in ("stopping", "stopped")
    actions = set(AuditEvent.objects.filter(target_id=str(idle.pk)).values_list("action", flat=True))
    assert {"savings.idle_stop.warn", "savings.idle_stop.stop", "instance.stop"} <= actions


def test_activity_after_the_notice_stands_it_down(alice, acme, idle):
    idle_stop.set_policy(actor=alice, team=acme, idle_minutes=30, warn_minutes=10)
    now = timezone.now()
    idle_stop.enforce(now=now)
    hold = idle.holds.get(end=None)
    Rollup1m.objects.create(bucket=now.replace(second=0, microsecond=0), gpu_id=hold.gpu_id, instance=idle,
                            team_id=idle.team_id, samples=60, observed_s=60, gpu_util_avg=90,
                            tensor_active_pct_avg=60, sm_occupancy_pct_avg=70, dram_bw_util_pct_avg=30)
    assert idle_stop.enforce(now=now + timedelta(minutes=2))["cancelled"] == 1
    assert _state(idle) == "running"


def test_turning_the_policy_off_cancels_the_notice_and_a_stopped_instance_starts_again(alice, acme, idle):
    idle_stop.set_policy(actor=alice, team=acme, idle_minutes=30, warn_minutes=10)
    idle_stop.enforce()
    notice = IdleStopNotice.objects.get(instance=idle)
    idle_stop.set_policy(actor=alice, team=acme, idle_minutes=30, warn_minutes=10, enabled=False)
    assert idle_stop.enforce(now=notice.stop_at)["stopped"] == 0
    assert _state(idle) == "running"
    assert AuditEvent.objects.filter(action="savings.idle_stop.off").exists()
    idle_stop.set_policy(actor=alice, team=acme, idle_minutes=30, warn_minutes=10)
    idle_stop.enforce()
    idle_stop.enforce(now=IdleStopNotice.objects.get(status="pending").stop_at)
    instance_lifecycle.finish_stop(instance=idle)
    instance_lifecycle.start_instance(actor=alice, instance=idle, provision=False)
    assert _state(idle) == "pending"


def test_a_busy_instance_is_left_alone(alice, acme, running, telemetry):
    busy = running(alice, acme, "train")
    telemetry(busy, minutes=40, mem_gb=60, activity=80)
    idle_stop.set_policy(actor=alice, team=acme, idle_minutes=30, warn_minutes=10)
    assert idle_stop.enforce()["warned"] == 0


def test_bad_policies_are_named_and_write_nothing(alice, acme, globex, charlie, running):
    for idle_minutes, warn, field in (("5", 1, "idle_minutes"), ("x", 1, "idle_minutes"), (30, 30, "warn_minutes")):
        with pytest.raises(ValidationError) as raised:
            idle_stop.set_policy(actor=alice, team=acme, idle_minutes=idle_minutes, warn_minutes=warn)
        assert field in raised.value.message_dict
    theirs = running(charlie, globex, "theirs")
    with pytest.raises(ValidationError):
        idle_stop.set_policy(actor=alice, team=acme, instance=theirs, idle_minutes=30)
    assert not AuditEvent.objects.filter(action__startswith="savings.").exists()
