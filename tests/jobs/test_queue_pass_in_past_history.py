"""History written at a past moment (the demo's) runs its own queue passes: a submit
inside ``recorded_at`` does not start the job at today's time, so a job's instance is
launched, run and ended at the history's times, in that order."""

from datetime import timedelta

from django.utils import timezone

from console.request_context import recorded_at
from instances import lifecycle as instance_lifecycle
from jobs import scheduler
from jobs.models import JobState


def test_a_submit_written_in_the_past_waits_for_the_writers_pass(submit, bob, acme,
                                                                  django_capture_on_commit_callbacks):
    at = timezone.now() - timedelta(hours=1)
    with django_capture_on_commit_callbacks(execute=True), recorded_at(at):
        job = submit(bob, acme, count=2, priority="normal", now=at)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED


def test_a_past_job_run_ends_after_it_began(submit, bob, acme, django_capture_on_commit_callbacks):
    at = timezone.now() - timedelta(hours=1)
    with django_capture_on_commit_callbacks(execute=True), recorded_at(at):
        job = submit(bob, acme, count=2, priority="normal", now=at)
        scheduler.run_queue(now=at, provision=False)
    job.refresh_from_db()
    instance_lifecycle.mark_running(instance=job.instance, at=at + timedelta(minutes=1))
    instance_lifecycle.terminate_instance(actor=bob, instance=job.instance, at=at + timedelta(minutes=5))
    times = list(job.instance.events.order_by("id").values_list("time", flat=True))
    assert times == sorted(times) and times[0] == at
