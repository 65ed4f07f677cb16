"""The seeded demo's audit log reads in time order (newest first is newest first), and
its rows say what the instance rows say: an instance was launched when its audit event
says, and each lifecycle change has its audit event at the same moment."""

import io

import pytest
from django.core.management import call_command

from audit.models import AuditEvent
from audit.verification import verify
from instances.models import Instance, LifecycleEvent

ACTIONS = {"running": "instance.running", "terminated": "instance.terminate", "preempted": "instance.preempt"}


@pytest.fixture
def seeded(db, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("seed_demo", stdout=io.StringIO(), stderr=io.StringIO())


def test_the_seeded_audit_log_is_in_time_order_and_agrees_with_the_instances(seeded):
    # one test: seeding the demo is the slow part
    times = list(AuditEvent.objects.order_by("seq").values_list("time", flat=True))
    assert len(times) > 300
    assert times == sorted(times)
    assert verify().valid
    launches = dict(AuditEvent.objects.filter(action="instance.launch").values_list("target_id", "time"))
    for pk, created in Instance.objects.values_list("pk", "created_at"):
        assert launches[str(pk)] == created, pk
    for event in LifecycleEvent.objects.filter(to_state__in=ACTIONS).select_related("instance"):
        assert AuditEvent.objects.filter(action=ACTIONS[event.to_state], target_id=str(event.instance_id),
                                         time=event.time).exists(), (event.instance.name, event.to_state)
