"""The queue's periodic pass (also run after a submit and whenever GPUs free)."""

from celery import shared_task

from . import scheduler

SCHEDULE = {
    "jobs.run-queue": (30, "jobs.tasks.run_queue"),
}


@shared_task
def run_queue() -> int:
    """Settle running jobs, expire late ones and start what fits; returns how many started."""
    return len(scheduler.run_queue().started)
