"""The one way alerts open, update and resolve.

An alert's ``key`` names one condition of one holder, e.g. ``r12:GPU-…:i40`` (rule 12
on that GPU while instance 40 held it); the database keeps at most one active alert
per key (a partial unique index), so concurrent writers never open two.
Opening and resolving are audited (``alert.open``, ``alert.resolve``), pushed live as
``alert`` events, and queued for the owner's notification channels (notify.py).
Other apps reach these verbs through ``feed``; rules are evaluated on readings by
``watch`` and periodically by ``periodic``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from agent.protocol import LiveAlert
from audit.recording import record_event
from console.live import FLEET_GROUP, host_group, instance_group, publish_on_commit, team_group

from . import notify, rule_cache
from .models import ACTIVE_STATES, Alert, AlertState, Category, Severity


def setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def thresholds() -> dict[str, float]:
    return {
        "xid_quiet_s": setting("ALERT_XID_QUIET_S", 3600),
        "refresh_s": setting("ALERT_REFRESH_S", 30),
        "stale_s": setting("ALERT_STALE_S", 300),
        # Only a safety net where the cache is shared; with each process's own cache,
        # how soon another process's rule change applies here.
        "rules_max_age_s": setting("ALERT_RULES_MAX_AGE_S", 300 if rule_cache.shared() else 5),
    }


@dataclass
class Condition:
    """One alert-worthy condition that holds now."""

    key: str
    message: str
    value: float | None = None
    threshold: float | None = None
    host_id: int | None = None
    gpu_id: int | None = None
    uuid: str = ""
    instance_id: int | None = None
    team_id: int | None = None
    rule_id: int | None = None
    severity: str = Severity.WARNING
    category: str = Category.TELEMETRY


# --- open / update / resolve ---------------------------------------------------------


def announce(alert: Alert) -> None:
    groups = [FLEET_GROUP]
    if alert.team_id:
        groups.append(team_group(alert.team_id))
    if alert.instance_id:
        groups.append(instance_group(alert.instance_id))
    if alert.host_id:
        groups.append(host_group(alert.host_id))
    publish_on_commit(groups, "alert", alert_data(alert))


def alert_data(alert: Alert) -> LiveAlert:
    return LiveAlert(
        id=alert.pk,
        kind=alert.kind,
        category=alert.category,
        severity=alert.severity,
        state=alert.state,
        message=alert.message,
        uuid=alert.uuid,
        instance=alert.instance_id,
        team=alert.team_id,
        host=alert.host_id,
        rule=alert.rule_id,
        value=alert.value,
        opened_at=alert.opened_at.isoformat(),
        updated_at=alert.updated_at.isoformat(),
        resolved_at=alert.resolved_at.isoformat() if alert.resolved_at else None,
    )


def _refresh(condition: Condition, now: datetime) -> Alert | None:
    alert = Alert.objects.select_for_update().filter(key=condition.key, state__in=ACTIVE_STATES).first()
    if alert is not None:
        alert.message = condition.message[:300]
        alert.value = condition.value
        alert.count += 1
        alert.updated_at = max(now, alert.updated_at)
        alert.save(update_fields=["message", "value", "count", "updated_at"])
    return alert


@transaction.atomic
def raise_alert(kind: str, condition: Condition, *, now: datetime | None = None) -> Alert:
    """Open an alert for ``condition``, or refresh the active one with the same key."""
    now = now or timezone.now()
    alert = _refresh(condition, now)
    if alert is not None:
        return alert
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                kind=kind, category=condition.category, severity=condition.severity, rule_id=condition.rule_id,
                key=condition.key, message=condition.message[:300], value=condition.value,
                threshold=condition.threshold, host_id=condition.host_id, gpu_id=condition.gpu_id,
                uuid=condition.uuid, instance_id=condition.instance_id, team_id=condition.team_id,
                opened_at=now, updated_at=now,
            )
    except IntegrityError:
        # Another writer opened this key between our look and our insert (the unique
        # index waited for its commit); theirs is the alert.
        alert = _refresh(condition, now)
        if alert is None:
            raise
        return alert
    record_event(
        actor="system", action="alert.open", target=alert, team=alert.team_id,
        details={"kind": kind, "key": alert.key, "message": alert.message, "value": alert.value,
                 "rule": alert.rule_id, "severity": alert.severity},
    )
    announce(alert)
    notify.enqueue(alert, now=now)
    return alert


@transaction.atomic
def resolve_alert(alert: Alert, *, now: datetime | None = None, why: str = "", actor="system") -> Alert:
    alert = Alert.objects.select_for_update().get(pk=alert.pk)
    if alert.state == AlertState.RESOLVED:
        return alert
    now = now or timezone.now()
    alert.state = AlertState.RESOLVED
    alert.resolved_at = alert.updated_at = max(now, alert.opened_at)
    if getattr(actor, "is_authenticated", False):
        alert.resolved_by = actor
    alert.save(update_fields=["state", "resolved_at", "updated_at", "resolved_by"])
    record_event(
        actor=actor, action="alert.resolve", target=alert, team=alert.team_id,
        details={"kind": alert.kind, "key": alert.key, "why": why},
    )
    announce(alert)
    notify.enqueue_resolved(alert, now=now)
    return alert


def is_active(key: str) -> bool:
    return Alert.objects.filter(key=key, state__in=ACTIVE_STATES).exists()


def resolve_keys(keys, *, now: datetime | None = None, why: str = "") -> None:
    """Resolve the active alerts of these keys: one query to find them, whatever their number."""
    for alert in Alert.objects.filter(key__in=list(keys), state__in=ACTIVE_STATES).order_by("id"):
        resolve_alert(alert, now=now, why=why)


def reconcile(kind: str, conditions: list[Condition], *, now: datetime | None = None, scope: Q | None = None) -> None:
    """Make the active alerts of ``kind`` (within ``scope``) match ``conditions``."""
    now = now or timezone.now()
    firing = {c.key: c for c in conditions}
    for condition in firing.values():
        raise_alert(kind, condition, now=now)
    active = Alert.objects.filter(kind=kind, state__in=ACTIVE_STATES).exclude(key__in=list(firing))
    if scope is not None:
        active = active.filter(scope)
    for alert in active:
        resolve_alert(alert, now=now, why="condition cleared")


def resolve_others(kind: str, keep: set[str], *, now: datetime | None = None, why: str) -> None:
    for alert in Alert.objects.filter(kind=kind, state__in=ACTIVE_STATES).exclude(key__in=list(keep)):
        resolve_alert(alert, now=now, why=why)
