"""A job whose instance never started (its host did not confirm the boot) did not run:
it goes back to the head of the queue and its next run is a new instance."""

from datetime import timedelta

from django.utils import timezone

from instances import lifecycle as instance_lifecycle
from instances.models import State
from jobs import scheduler
from jobs.models import EventKind, JobState


def test_a_failed_boot_puts_the_job_back_and_the_next_run_is_a_new_instance(submit, bob, acme):
    t0 = timezone.now() - timedelta(hours=1)
    job = submit(bob, acme, count=2, priority="normal", now=t0)
    scheduler.run_queue(now=t0, provision=False)
    job.refresh_from_db()
    first = job.instance
    instance_lifecycle.fail_overdue(now=t0 + timedelta(minutes=31))
    result = scheduler.run_queue(now=t0 + timedelta(minutes=32), provision=False)
    job.refresh_from_db()
    assert [j.pk for j in result.started] == [job.pk]
    assert job.state == JobState.RUNNING and job.instance != first
    first.refresh_from_db()
    assert first.state == State.FAILED
    assert [e.kind for e in job.events.all()] == [EventKind.SUBMIT, EventKind.START, EventKind.RETRY, EventKind.RESUME]
    assert "did not confirm the boot within 31 minutes" in job.events.get(kind=EventKind.RETRY).reason


def test_charlie_cannot_see_bobs_retried_job(submit, bob, acme, api, charlie):
    t0 = timezone.now() - timedelta(hours=1)
    job = submit(bob, acme, count=1, priority="normal", now=t0)
    scheduler.run_queue(now=t0, provision=False)
    instance_lifecycle.fail_overdue(now=t0 + timedelta(minutes=31))
    assert api(charlie).get(f"/api/v1/jobs/{job.pk}/").status_code == 404
