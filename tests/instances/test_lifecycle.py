import pytest

from instances import lifecycle, preemption, transitions
from instances.models import Gpu, LifecycleEvent, State


def states(instance):
    return list(instance.events.values_list("to_state", flat=True))


def test_launch_holds_gpus_and_records_pending(launch, bob, acme):
    instance = launch(bob, acme, count=2)
    assert instance.state == State.PENDING
    assert Gpu.objects.filter(instance=instance, team=acme).count() == 2
    assert states(instance) == ["pending"]


def test_full_lifecycle_is_recorded_in_order(launch, bob, acme):
    instance = launch(bob, acme)
    lifecycle.mark_running(instance=instance)
    lifecycle.stop_instance(actor=bob, instance=instance, finish=False)
    lifecycle.finish_stop(instance=instance)
    lifecycle.start_instance(actor=bob, instance=instance, provision=False)
    lifecycle.mark_running(instance=instance)
    lifecycle.terminate_instance(actor=bob, instance=instance)
    assert states(instance) == ["pending", "running", "stopping", "stopped", "pending", "running", "terminated"]


def test_stop_releases_gpus(acme_instance, bob, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.stop_instance(actor=bob, instance=acme_instance)
    acme_instance.refresh_from_db()
    assert acme_instance.state == State.STOPPED
    assert not Gpu.objects.filter(instance=acme_instance).exists()


def test_stop_runs_through_stopping_then_stopped(acme_instance, bob, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.stop_instance(actor=bob, instance=acme_instance)
    assert states(acme_instance)[-2:] == ["stopping", "stopped"]


def test_it_refuses_to_start_a_running_instance(acme_instance, bob):
    with pytest.raises(transitions.LifecycleError, match="only a stopped instance can start"):
        lifecycle.start_instance(actor=bob, instance=acme_instance)


def test_terminated_is_final(acme_instance, bob):
    lifecycle.terminate_instance(actor=bob, instance=acme_instance)
    with pytest.raises(transitions.LifecycleError, match="already terminated"):
        lifecycle.terminate_instance(actor=bob, instance=acme_instance)


def test_only_spot_is_preempted(acme_instance):
    with pytest.raises(transitions.LifecycleError, match="only spot"):
        preemption.preempt_instance(instance=acme_instance)


def test_preemption_is_marked_as_platform_caused(launch, bob, acme):
    instance = lifecycle.mark_running(instance=launch(bob, acme, pricing="spot"))
    preemption.preempt_instance(instance=instance, reason="capacity")
    event = LifecycleEvent.objects.filter(instance=instance).last()
    assert (event.to_state, event.by_platform, event.reason) == ("preempted", True, "capacity")
    assert not Gpu.objects.filter(instance=instance).exists()


def test_a_failed_transition_writes_nothing(acme_instance, bob):
    before = LifecycleEvent.objects.count()
    with pytest.raises(transitions.LifecycleError):
        lifecycle.start_instance(actor=bob, instance=acme_instance)
    assert LifecycleEvent.objects.count() == before


def test_provisioning_task_marks_launched_instance_running(fleet, bob, acme, django_capture_on_commit_callbacks):
    from instances.models import GpuModel

    with django_capture_on_commit_callbacks(execute=True):
        instance = lifecycle.launch_instance(
            actor=bob, team=acme, name="auto", gpu_model=GpuModel.objects.get(name="H100-80GB"),
            gpu_count=1, pricing_model="on_demand",
        )
    instance.refresh_from_db()
    assert instance.state == State.RUNNING
