"""Periodic network work: thin adapters over network.rulesets."""

from datetime import datetime

from celery import shared_task
from django.utils import timezone

from agent import protocol as wire

from . import alerting, rulesets

SCHEDULE = {
    "network.check": (10, "network.tasks.check_hosts"),
}


@shared_task
def check_hosts(now: str | None = None) -> int:
    """Send each host whose rules are not in force its current version again, and alert
    operators on hosts past APPLY_WITHIN. ``now`` (ISO 8601) checks as of that time."""
    now = datetime.fromisoformat(now) if now else timezone.now()
    behind = rulesets.not_in_force()
    for rules in behind:
        if len(rules.frame) <= wire.MAX_FRAME_BYTES:
            rulesets.push(rules.host_id, rules.frame)
    alerting.reconcile(now)
    return len(behind)
