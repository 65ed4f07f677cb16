"""The one way other apps raise, refresh, resolve and reconcile alerts.

Billing (budgets, unrated usage), network (rules not applied), scaling (a group at its
maximum) and instances push their conditions here; alerting never imports them. Every
alert opened or resolved through here is audited, pushed live and routed to its owner's
notification channels (``alerts``). Telemetry reaches the same verbs through its own
hooks (``monitoring.alert_hooks``), which ``Telemetry`` below fills in.

A condition's ``key`` names one condition of one holder; at most one alert per key is
active at a time, so raising an active key refreshes that alert.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from . import alerts, rules, watch
from .alerts import Condition
from .models import Alert, AlertKind, AlertRule, Category, Severity

__all__ = [
    "AlertKind", "Category", "Condition", "Severity", "fleet_rules", "holds", "is_active", "raise_alert",
    "reconcile", "resolve", "resolve_others",
]


def raise_alert(kind: str, condition: Condition, *, now: datetime | None = None) -> Alert:
    """Open an alert for ``condition``, or refresh the active one with its key."""
    return alerts.raise_alert(kind, condition, now=now)


def resolve(*keys: str, now: datetime | None = None, why: str = "") -> None:
    """Resolve the active alert of each key given, where there is one."""
    alerts.resolve_keys(keys, now=now, why=why)


def is_active(key: str) -> bool:
    return alerts.is_active(key)


def reconcile(kind: str, conditions: list[Condition], *, now: datetime | None = None, scope: Q | None = None) -> None:
    """Make the active alerts of ``kind`` (within ``scope``) match ``conditions``."""
    alerts.reconcile(kind, conditions, now=now, scope=scope)


def resolve_others(kind: str, keep: set[str], *, now: datetime | None = None, why: str) -> None:
    """Resolve the active alerts of ``kind`` whose key is not in ``keep``."""
    alerts.resolve_others(kind, keep, now=now, why=why)


def fleet_rules(metric: str) -> list[AlertRule]:
    """The operators' enabled rules on ``metric``, for apps that evaluate their own
    figures (billing's ``unrated_usage``)."""
    return list(AlertRule.objects.filter(metric=metric, enabled=True, team__isnull=True))


def holds(comparison: str, value, threshold: float) -> bool:
    """Whether ``value`` meets a rule's comparison with its threshold."""
    return rules.holds(comparison, value, threshold)


class Telemetry:
    """What ``monitoring.alert_hooks`` calls: conditions come as keyword arguments."""

    def watch(self, host_id: int, host_name: str) -> watch.Watch:
        return watch.Watch(host_id, host_name)

    def load_watches(self, items: list) -> None:
        watch.load_many(items)

    def raise_alert(self, kind: str, *, now: datetime | None = None, **condition) -> None:
        raise_alert(kind, Condition(**condition), now=now)

    def resolve(self, *keys: str, now: datetime | None = None, why: str = "") -> None:
        resolve(*keys, now=now, why=why)

    def is_active(self, key: str) -> bool:
        return is_active(key)

    def reconcile(self, kind: str, conditions: list[dict], *, now: datetime | None = None) -> None:
        reconcile(kind, [Condition(**c) for c in conditions], now=now)

    def alerts(self):
        return Alert.objects.all()
