"""Thin Celery adapters: reload by id, return quietly if gone, call one service."""

from celery import shared_task

from . import lifecycle, preemption
from .models import Instance, State

SCHEDULE = {
    "instances.preempt-due": (10, "instances.tasks.preempt_due"),
    "instances.max-prices": (10, "instances.tasks.enforce_max_prices"),
    "instances.fail-overdue": (60, "instances.tasks.fail_overdue"),
}


@shared_task
def provision_instance(instance_id: int) -> None:
    instance = Instance.objects.filter(pk=instance_id, state=State.PENDING).first()
    if instance is not None:
        lifecycle.mark_running(actor="system", instance=instance)


@shared_task
def finish_stop(instance_id: int) -> None:
    instance = Instance.objects.filter(pk=instance_id, state=State.STOPPING).first()
    if instance is not None:
        lifecycle.finish_stop(actor="system", instance=instance)


@shared_task
def preempt_due() -> int:
    """Preempt the spot instances whose notice ran out."""
    return len(preemption.preempt_due())


@shared_task
def fail_overdue() -> int:
    """Fail the instances whose boot the host never confirmed, giving their GPUs back."""
    return len(lifecycle.fail_overdue())


@shared_task
def enforce_max_prices() -> int:
    """Give notice to spot instances whose max price the spot price went above."""
    return len(preemption.enforce_max_prices())
