"""Periodic savings work: a thin adapter over savings.idle_stop."""

from datetime import datetime

from celery import shared_task

from . import idle_stop

SCHEDULE = {
    "savings.idle_stop": (60, "savings.tasks.enforce_idle_stop"),
}


@shared_task
def enforce_idle_stop(now: str | None = None) -> dict:
    """Warn before, and then stop, instances idle past their team's policy."""
    return idle_stop.enforce(now=datetime.fromisoformat(now) if now else None)
