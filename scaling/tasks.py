"""Periodic scaling: thin adapters over scaling.services."""

from datetime import datetime

from celery import shared_task
from django.utils import timezone

from . import alerting, services
from .models import ScalingGroup

SCHEDULE = {
    "scaling.evaluate": (30, "scaling.tasks.evaluate_groups"),
    "scaling.prune": (3600, "scaling.tasks.prune_decisions"),
}


@shared_task
def evaluate_groups(now: str | None = None) -> int:
    """Evaluate every group once; alert on those at their max with work waiting.
    ``now`` (ISO 8601) evaluates as of that time."""
    now = datetime.fromisoformat(now) if now else timezone.now()
    decisions = services.evaluate_all(now=now)
    alerting.reconcile(decisions, now=now)
    return len(decisions)


@shared_task
def evaluate_group(group_id: int) -> None:
    """Evaluate one group at once (after its team pushed a queue depth)."""
    group = ScalingGroup.objects.live().filter(pk=group_id).first()
    if group is not None:
        now = timezone.now()
        decision = services.evaluate_group(group, now=now)
        alerting.reconcile_group(decision, now=now)


@shared_task
def prune_decisions() -> int:
    return services.prune_decisions()
