"""A low-priority job runs in idle capacity, yields to an on-demand launch (with the
spot notice) and resumes when capacity frees."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from instances import lifecycle as instance_lifecycle
from instances import placement as instance_placement
from instances import preemption as instance_preemption
from instances.models import Image, PreemptionNotice, PricingModel, State
from jobs import queue_status, scheduler, submission
from jobs.models import JobState


def _pass(now):
    result = scheduler.run_queue(now=now, provision=False)
    for job in result.started:
        instance_lifecycle.mark_running(instance=job.instance, at=now)
    return result


def test_a_low_priority_job_yields_to_an_on_demand_launch_and_resumes(launch, submit, acme, globex, bob, charlie):
    busy = launch(charlie, globex, name="globex-serve", count=8)  # h100-a is taken
    job = submit(bob, acme)
    t0 = timezone.now()
    assert [j.pk for j in _pass(t0).started] == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert job.instance.pricing_model == PricingModel.IDLE
    assert job.instance.host.name == "h100-b" != busy.host.name

    with pytest.raises(instance_placement.PlacementError, match="given notice"):
        launch(charlie, globex, name="globex-train", count=8)
    instance_preemption.preempt_due(now=t0 + timedelta(minutes=3))
    _pass(t0 + timedelta(minutes=3))
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    assert "by a paying launch" in queue_status.queue_info([job])[job.pk].reason
    assert "h100-b held for a paying launch" in job.wait_note  # not taken back before the payer launches

    paying = launch(charlie, globex, name="globex-train", count=8)
    assert paying.host.name == "h100-b"
    instance_lifecycle.terminate_instance(actor=charlie, instance=paying, at=t0 + timedelta(hours=1))
    _pass(t0 + timedelta(hours=1))
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.instance.host.name == "h100-b"
    assert [e.kind for e in job.events.all()] == ["submit", "start", "preempt", "resume"]
    assert [r.end_reason.split(":")[0] for r in job.runs.all()] == ["preempted", ""]
    actions = set(AuditEvent.objects.filter(target_id=str(job.pk), target_type="jobs.job").values_list("action", flat=True))
    assert {"job.submit", "job.start", "job.preempt", "job.resume"} <= actions


def test_normal_jobs_start_before_low_ones_then_in_queue_order(submit, acme, bob):
    first_low = submit(bob, acme, name="low-1", count=8)
    second_low = submit(bob, acme, name="low-2", count=8)
    normal = submit(bob, acme, name="normal", count=8, priority="normal")
    third = submit(bob, acme, name="low-3", count=1)
    started = _pass(timezone.now()).started
    assert [j.name for j in started] == ["normal", "low-1"]
    second_low.refresh_from_db()
    info = queue_status.queue_info([second_low, third])
    assert (info[second_low.pk].position, info[third.pk].position) == (1, 2)
    assert info[third.pk].reason == "Behind 1 job for H100-80GB."
    assert "No idle capacity of H100-80GB" in info[second_low.pk].reason
    assert normal.pk != first_low.pk


def test_a_low_priority_job_never_preempts_anything(launch, submit, acme, globex, bob, charlie):
    launch(charlie, globex, name="spot-a", count=8, pricing="spot")
    launch(charlie, globex, name="spot-b", count=8, pricing="spot")
    submit(bob, acme)
    assert _pass(timezone.now()).started == []
    assert not PreemptionNotice.objects.exists()


def test_a_queued_job_past_its_deadline_expires(submit, launch, acme, globex, bob, charlie):
    launch(charlie, globex, name="a", count=8)
    launch(charlie, globex, name="b", count=8)
    now = timezone.now()
    job = submit(bob, acme, deadline=now + timedelta(minutes=5))
    _pass(now + timedelta(minutes=6))
    job.refresh_from_db()
    assert job.state == JobState.EXPIRED
    assert queue_status.queue_info([job])[job.pk].reason.startswith("Deadline passed at")


def test_stopping_a_jobs_instance_finishes_it_and_cancel_ends_a_run(submit, acme, bob):
    done, cancelled = submit(bob, acme, name="done", count=4), submit(bob, acme, name="cancelled", count=4)
    now = timezone.now()
    _pass(now)
    done.refresh_from_db()
    instance_lifecycle.terminate_instance(actor=bob, instance=done.instance, at=now + timedelta(minutes=5))
    submission.cancel_job(actor=bob, job=cancelled)
    _pass(now + timedelta(minutes=6))
    done.refresh_from_db()
    cancelled.refresh_from_db()
    assert done.state == JobState.FINISHED
    assert cancelled.state == JobState.CANCELLED and cancelled.instance.state == State.TERMINATED
    with pytest.raises(submission.JobConflict):
        submission.cancel_job(actor=bob, job=cancelled)


def test_a_job_whose_image_was_retired_waits_without_holding_back_the_queue(submit, idle_price, acme, bob):
    image = Image.objects.create(name="old-torch", reference="registry.example.com/old-torch:1")
    image.gpu_models.add(idle_price["h100"])
    stuck = submit(bob, acme, name="stuck", count=8, image=image)
    submit(bob, acme, name="behind", count=1)
    Image.objects.filter(pk=image.pk).update(retired_at=timezone.now())
    assert [j.name for j in _pass(timezone.now()).started] == ["behind"]
    stuck.refresh_from_db()
    assert stuck.state == JobState.QUEUED and "was retired" in stuck.wait_note
