"""Periodic network work: thin adapters over network.services."""

from datetime import datetime

from celery import shared_task
from django.utils import timezone

from . import alerting, services

SCHEDULE = {
    "network.check": (10, "network.tasks.check_hosts"),
}


@shared_task
def check_hosts(now: str | None = None) -> int:
    """Send each host whose rules are not in force its current version again, and alert
    operators on hosts past APPLY_WITHIN. ``now`` (ISO 8601) checks as of that time."""
    now = datetime.fromisoformat(now) if now else timezone.now()
    behind = services.not_in_force()
    for rules in behind:
        if len(rules.frame) <= services.wire.MAX_FRAME_BYTES:
            services.push(rules.host_id, rules.frame)
    alerting.reconcile(now)
    return len(behind)
