"""Alerting verbs that people take: acknowledge, resolve and silence alerts; manage
alert rules and notification channels. Each is audited in its own transaction."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.recording import record_event
from console.errors import Conflict

from . import alerts, rule_cache
from .alerts import announce
from .models import (
    Alert,
    AlertRule,
    AlertState,
    ChannelKind,
    Delivery,
    Notification,
    NotificationChannel,
    Severity,
    Silence,
)

# --- alerts -------------------------------------------------------------------------


def _user(actor):
    return actor if getattr(actor, "is_authenticated", False) else None


class AlertError(Conflict):
    """The alert is not in a state that allows the change (answers 409)."""

    code = "alert_state"


@transaction.atomic
def acknowledge_alert(*, actor, alert: Alert) -> Alert:
    alert = Alert.objects.select_for_update().get(pk=alert.pk)
    if alert.state == AlertState.RESOLVED:
        raise AlertError("This alert is resolved; there is nothing to acknowledge.")
    if alert.state == AlertState.OPEN:
        now = timezone.now()
        alert.state = AlertState.ACKNOWLEDGED
        alert.acknowledged_at = now
        alert.acknowledged_by = actor
        alert.save(update_fields=["state", "acknowledged_at", "acknowledged_by"])
        record_event(
            actor=actor, action="alert.acknowledge", target=alert, team=alert.team_id,
            details={"kind": alert.kind, "key": alert.key},
        )
        announce(alert)
    return alert


def resolve_alert(*, actor, alert: Alert) -> Alert:
    if alert.state == AlertState.RESOLVED:
        raise AlertError("This alert is already resolved.")
    return alerts.resolve_alert(alert, actor=actor, why="resolved by hand")


MAX_SILENCE = timedelta(days=30)


@transaction.atomic
def silence(*, actor, ends_at: datetime, alert: Alert | None = None, rule: AlertRule | None = None,
            reason: str = "", now: datetime | None = None) -> Silence:
    """No notifications for ``alert`` (its key) or every alert of ``rule`` until ``ends_at``."""
    now = now or timezone.now()
    if (alert is None) == (rule is None):
        raise ValidationError({"alert": "Silence one alert or one rule."})
    if not now < ends_at <= now + MAX_SILENCE:
        raise ValidationError({"ends_at": "A silence ends in the future, within 30 days."})
    team_id = alert.team_id if alert is not None else rule.team_id
    found = Silence.objects.create(
        team_id=team_id, rule=rule if rule is not None else None, key=alert.key if alert is not None else "",
        reason=reason[:200], starts_at=now, ends_at=ends_at, created_by=_user(actor),
    )
    record_event(
        actor=actor, action="alert.silence", target=found, team=team_id,
        details={"key": found.key, "rule": found.rule_id, "until": ends_at.isoformat(), "reason": found.reason},
    )
    return found


@transaction.atomic
def end_silence(*, actor, silence: Silence, now: datetime | None = None) -> Silence:
    now = now or timezone.now()
    if silence.ends_at > now:
        silence.ends_at = max(now, silence.starts_at)
        silence.save(update_fields=["ends_at"])
        record_event(actor=actor, action="alert.unsilence", target=silence, team=silence.team_id,
                     details={"key": silence.key, "rule": silence.rule_id})
    return silence


# --- alert rules ------------------------------------------------------------------------
# Each rule saved or deleted changes the rules' version once committed (rule_cache, by
# signals), so ingest reads the rules again on its next flush.

RULE_FIELDS = ("name", "metric", "comparison", "threshold", "hold_s", "severity", "enabled")
MAX_HOLD_S = 7 * 86_400


def _check_rule(values: dict, team) -> None:
    from .rules import METRICS, OPERATOR_ONLY

    if values["metric"] not in METRICS:
        raise ValidationError({"metric": f"Unknown metric; choose one of {', '.join(METRICS)}."})
    if team is not None and values["metric"] in OPERATOR_ONLY:
        raise ValidationError({"metric": f"{METRICS[values['metric']].label} is shown to operators only; "
                                         "only an operators' rule watches it."})
    threshold = values["threshold"]
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or threshold != threshold \
            or abs(threshold) > 1e12:
        raise ValidationError({"threshold": "A finite number."})
    if not 0 <= values["hold_s"] <= MAX_HOLD_S:
        raise ValidationError({"hold_s": f"Between 0 and {MAX_HOLD_S} seconds."})
    if values["metric"] == "idle_billed" and values["hold_s"] < 5:
        raise ValidationError({"hold_s": "Idle-but-billed rules look back at least 5 seconds."})


def _check_scope(team, instance, host, gpu_model) -> None:
    if team is not None and (host is not None or gpu_model is not None):
        raise ValidationError({"host": "A team's rule watches the team's instances; hosts and GPU models are for operators."})
    if team is None and instance is not None:
        raise ValidationError({"instance": "Only a team's rule watches one instance."})
    if instance is not None and instance.team_id != team.pk:
        raise ValidationError({"instance": "That instance belongs to another team."})
    if host is not None and gpu_model is not None:
        raise ValidationError({"host": "Scope an operators' rule to a host or to a GPU model, not both."})


def _rule_snapshot(rule: AlertRule) -> dict:
    return {"name": rule.name, "metric": rule.metric, "comparison": rule.comparison, "threshold": rule.threshold,
            "hold_s": rule.hold_s, "severity": rule.severity, "enabled": rule.enabled, "scope": rule.scope,
            "instance": rule.instance_id, "host": rule.host_id, "gpu_model": rule.gpu_model_id}


@transaction.atomic
def create_rule(*, actor, team=None, name: str, metric: str, threshold, comparison: str = ">=", hold_s: int = 0,
                severity: str = Severity.WARNING, enabled: bool = True, instance=None, host=None,
                gpu_model=None) -> AlertRule:
    values = {"name": name, "metric": metric, "comparison": comparison, "threshold": threshold, "hold_s": hold_s,
              "severity": severity, "enabled": enabled}
    _check_rule(values, team)
    _check_scope(team, instance, host, gpu_model)
    now = timezone.now()
    rule = AlertRule.objects.create(team=team, instance=instance, host=host, gpu_model=gpu_model,
                                    created_by=_user(actor), created_at=now, updated_at=now, **values)
    record_event(actor=actor, action="alert_rule.create", target=rule, team=rule.team_id,
                 details=_rule_snapshot(rule))
    return rule


@transaction.atomic
def update_rule(*, actor, rule: AlertRule, **changes) -> AlertRule:
    rule = AlertRule.objects.select_for_update().get(pk=rule.pk)
    before = _rule_snapshot(rule)
    values = {f: changes.get(f, getattr(rule, f)) for f in RULE_FIELDS}
    _check_rule(values, rule.team)
    instance = changes.get("instance", rule.instance)
    _check_scope(rule.team, instance, rule.host, rule.gpu_model)
    for f, v in values.items():
        setattr(rule, f, v)
    rule.instance = instance
    rule.updated_at = timezone.now()
    rule.save()
    after = _rule_snapshot(rule)
    record_event(actor=actor, action="alert_rule.update", target=rule, team=rule.team_id,
                 details={"before": {k: v for k, v in before.items() if after[k] != v},
                          "after": {k: v for k, v in after.items() if before[k] != v}})
    return rule


@transaction.atomic
def delete_rule(*, actor, rule: AlertRule) -> None:
    record_event(actor=actor, action="alert_rule.delete", target=rule, team=rule.team_id,
                 details=_rule_snapshot(rule))
    for alert in Alert.objects.filter(rule=rule, state__in=("open", "acknowledged")):
        alerts.resolve_alert(alert, actor=actor, why="its rule was deleted")
    rule.delete()


def ensure_default_rules(team, *, actor="system", fleet: bool = False, audit: bool = True) -> list[AlertRule]:
    """The rules every team (or, with ``fleet``, the operators) starts with; rules that
    exist under the same name are left as they are. A new team's defaults come with
    its ``team.create`` audit event (``audit=False``)."""
    from .rules import FLEET_DEFAULTS, TEAM_DEFAULTS

    owner = None if fleet else team
    have = set(AlertRule.objects.filter(team=owner, default=True).values_list("name", flat=True))
    made = [
        AlertRule(team=owner, name=d.name, metric=d.metric, comparison=d.comparison, threshold=d.threshold,
                  hold_s=d.hold_s, severity=d.severity, default=True)
        for d in (FLEET_DEFAULTS if fleet else TEAM_DEFAULTS) if d.name not in have
    ]
    if made:
        with transaction.atomic():
            AlertRule.objects.bulk_create(made)
            rule_cache.changed()  # bulk_create sends no post_save
            if audit:
                record_event(actor=actor, action="alert_rule.defaults", target=owner, team=owner,
                             details={"rules": [r.name for r in made]})
    return made


# --- notification channels -----------------------------------------------------------------


def _check_channel(kind: str, target: str) -> str:
    from . import notify

    target = (target or "").strip()
    if kind not in ChannelKind.values:
        raise ValidationError({"kind": f"Choose one of {', '.join(ChannelKind.values)}."})
    if not target or len(target) > 500:
        raise ValidationError({"target": "Give the URL (webhook, Slack) or email addresses, at most 500 characters."})
    if kind == ChannelKind.EMAIL:
        try:
            notify.emails(target)
        except ValidationError:
            raise ValidationError({"target": "Comma-separated email addresses."}) from None
        return target
    try:
        notify.check_target(target)
    except notify.Refused as exc:
        raise ValidationError({"target": str(exc)}) from None
    return target


def _channel_snapshot(channel: NotificationChannel) -> dict:
    # The target may hold a token (Slack URLs do): only its scheme and host are kept.
    from urllib.parse import urlsplit

    target = channel.target if channel.kind == ChannelKind.EMAIL else urlsplit(channel.target).hostname
    return {"name": channel.name, "kind": channel.kind, "target": target, "min_severity": channel.min_severity,
            "enabled": channel.enabled}


@transaction.atomic
def create_channel(*, actor, team, name: str, kind: str, target: str, min_severity: str = Severity.INFO,
                   enabled: bool = True) -> NotificationChannel:
    target = _check_channel(kind, target)
    channel = NotificationChannel.objects.create(
        team=team, name=name, kind=kind, target=target, min_severity=min_severity, enabled=enabled,
        secret=NotificationChannel.new_secret() if kind == ChannelKind.WEBHOOK else "", created_by=_user(actor),
    )
    record_event(actor=actor, action="notification_channel.create", target=channel, team=channel.team_id,
                 details=_channel_snapshot(channel))
    return channel


@transaction.atomic
def update_channel(*, actor, channel: NotificationChannel, **changes) -> NotificationChannel:
    channel = NotificationChannel.objects.select_for_update().get(pk=channel.pk)
    before = _channel_snapshot(channel)
    if "target" in changes:
        changes["target"] = _check_channel(channel.kind, changes["target"])
    for f in ("name", "target", "min_severity", "enabled"):
        if f in changes:
            setattr(channel, f, changes[f])
    if changes.pop("rotate_secret", False) and channel.kind == ChannelKind.WEBHOOK:
        channel.secret = NotificationChannel.new_secret()
        before["secret"], changes["secret"] = "old", "rotated"
    channel.save()
    after = _channel_snapshot(channel) | ({"secret": "rotated"} if "secret" in changes else {})
    record_event(actor=actor, action="notification_channel.update", target=channel, team=channel.team_id,
                 details={"before": {k: v for k, v in before.items() if after.get(k) != v},
                          "after": {k: v for k, v in after.items() if before.get(k) != v}})
    return channel


@transaction.atomic
def delete_channel(*, actor, channel: NotificationChannel) -> None:
    record_event(actor=actor, action="notification_channel.delete", target=channel, team=channel.team_id,
                 details=_channel_snapshot(channel))
    channel.delete()


def send_test(*, actor, channel: NotificationChannel) -> Delivery:
    """Send one test message now (the caller waits at most ALERT_WEBHOOK_TIMEOUT_S)."""
    from . import notify

    with transaction.atomic():
        notification = Notification.objects.create(
            channel=channel, team_id=channel.team_id, group_key="test", test=True
        )
        record_event(actor=actor, action="notification_channel.test", target=channel, team=channel.team_id,
                     details={"kind": channel.kind})
    return notify.attempt(notification)
