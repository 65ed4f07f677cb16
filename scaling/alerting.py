"""The alert "scaling group at its maximum with work waiting": a group held at its max
bound with all its instances up while its queue needs more. Opened, refreshed and
resolved through alerting's one entry point (alerting.feed.reconcile), so it is
audited, pushed live and sent to the team's channels like every other alert."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from alerting import feed
from alerting.feed import AlertKind, Category, Severity

from .models import Reason, ScalingDecision


def key(group_id: int) -> str:
    return f"scaling:{group_id}:at_max"


def waiting(decision: ScalingDecision) -> int:
    """Queued items beyond what the group's maximum is meant to work through."""
    group = decision.group
    return max(0, (decision.queue_depth or 0) - group.max_instances * group.target_per_instance)


def at_max(decision: ScalingDecision) -> bool:
    return (decision.reason == Reason.AT_MAX and decision.running >= decision.group.max_instances
            and waiting(decision) > 0)


def conditions(decisions: list[ScalingDecision]) -> list[feed.Condition]:
    return [
        feed.Condition(
            key=key(d.group_id), team_id=d.group.team_id, severity=Severity.WARNING, category=Category.CAPACITY,
            value=d.queue_depth,
            threshold=d.group.max_instances * d.group.target_per_instance,
            message=f"Scaling group {d.group.name} is at its maximum of {d.group.max_instances} instances with "
                    f"{d.queue_depth} items queued ({waiting(d)} more than its maximum works through at "
                    f"{d.group.target_per_instance} per instance).",
        )
        for d in decisions if at_max(d)
    ]


def reconcile(decisions: list[ScalingDecision], *, now: datetime) -> None:
    """Open or refresh the alert of each group at max with work waiting; resolve the rest."""
    feed.reconcile(AlertKind.SCALING_AT_MAX, conditions(decisions), now=now)


def reconcile_group(decision: ScalingDecision, *, now: datetime) -> None:
    """The same for one group, after an evaluation of its own."""
    feed.reconcile(AlertKind.SCALING_AT_MAX, conditions([decision]), now=now, scope=Q(key=key(decision.group_id)))
