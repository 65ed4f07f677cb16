"""The operators' alert "host has not applied its network rules": a host whose latest
version is not in force APPLY_WITHIN after it was made. Opened, refreshed and resolved
through alerting's one entry point (``alerting.feed``), so it is audited and pushed like
every alert."""

from __future__ import annotations

from datetime import datetime

from alerting import feed
from alerting.feed import AlertKind, Category, Severity

from . import rulesets


def key(host_id: int) -> str:
    return f"network:host{host_id}"


def conditions(now: datetime) -> list[feed.Condition]:
    out = []
    for rules in rulesets.overdue(now):
        late = (now - rules.changed_at).total_seconds()
        why = f" ({rules.error})" if rules.error else " (no report from its agent)"
        out.append(feed.Condition(
            key=key(rules.host_id), host_id=rules.host_id, severity=Severity.CRITICAL, category=Category.TELEMETRY,
            value=round(late), threshold=rulesets.APPLY_WITHIN.total_seconds(),
            message=f"Host {rules.host.name} has not applied network rules version {rules.version} "
                    f"after {late:.0f} s; version {rules.applied_version} is in force{why}.",
        ))
    return out


def reconcile(now: datetime) -> None:
    feed.reconcile(AlertKind.NETWORK_RULES, conditions(now), now=now)
