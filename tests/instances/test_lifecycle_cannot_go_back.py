"""The lifecycle only moves forward: terminated and failed are final, and no change is
dated before the one it follows (metering reads events in time order)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from instances import lifecycle, preemption, transitions
from instances.models import Gpu, State


def test_a_terminated_instance_cannot_start_again(acme_instance, bob):
    lifecycle.terminate_instance(actor=bob, instance=acme_instance)
    with pytest.raises(transitions.LifecycleError, match="terminated, which is final"):
        lifecycle.mark_running(instance=acme_instance)


def test_a_preempted_instance_never_runs_again(launch, bob, acme):
    instance = lifecycle.mark_running(instance=launch(bob, acme, pricing="spot"))
    preemption.preempt_instance(instance=instance)
    with pytest.raises(transitions.LifecycleError, match="cannot become running"):
        lifecycle.mark_running(instance=instance)


def test_a_change_dated_before_the_last_is_refused(launch, bob, acme):
    now = timezone.now()
    instance = lifecycle.mark_running(instance=launch(bob, acme, at=now - timedelta(hours=1)), at=now)
    with pytest.raises(transitions.LifecycleError, match="cannot be dated before that"):
        lifecycle.terminate_instance(actor=bob, instance=instance, at=now - timedelta(minutes=30))
    instance.refresh_from_db()
    assert instance.state == State.RUNNING
    assert Gpu.objects.filter(instance=instance).count() == 1


def test_a_pending_instance_that_fails_gives_its_gpus_back(launch, bob, acme):
    instance = lifecycle.fail_instance(instance=launch(bob, acme, count=2), reason="image pull failed")
    assert instance.state == State.FAILED
    assert not Gpu.objects.filter(instance=instance).exists()
    assert AuditEvent.objects.filter(action="instance.fail", target_id=str(instance.pk)).exists()
    with pytest.raises(transitions.LifecycleError, match="failed, which is final"):
        lifecycle.terminate_instance(actor=bob, instance=instance)


def test_only_a_pending_instance_can_fail(acme_instance):
    with pytest.raises(transitions.LifecycleError, match="only a pending instance"):
        lifecycle.fail_instance(instance=acme_instance, reason="boot timeout")


def test_a_change_without_a_time_behind_another_servers_clock_is_dated_at_the_last(launch, bob, acme):
    ahead = timezone.now() + timedelta(seconds=5)  # launched by a server whose clock runs ahead
    instance = lifecycle.mark_running(instance=launch(bob, acme, at=ahead))
    assert instance.state == State.RUNNING and instance.state_changed_at == ahead
