"""Periodic alerting work: the periodic rules and notification delivery. Each run is
bounded and idempotent."""

from celery import shared_task

from . import notify, periodic

SCHEDULE = {
    "alerting.evaluate": (15, "alerting.tasks.evaluate_alerts"),
    "alerting.notify": (5, "alerting.tasks.deliver_notifications"),
}


@shared_task
def evaluate_alerts() -> None:
    periodic.evaluate()


@shared_task
def deliver_notifications() -> int:
    return notify.dispatch()
