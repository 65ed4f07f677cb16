"""Rules evaluated by the periodic task (``evaluate``): agent silence, idle-but-billed
GPUs, spot prices against max prices, stale ingest alerts, audit verification failures
and spot preemption notices."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Avg, Count, Min, Q
from django.utils import timezone

from audit.models import Verification
from instances.models import Gpu, GpuSlice, Instance, NoticeStatus, PreemptionNotice, State
from monitoring.activity import real_activity
from monitoring.models import AgentState, Sample

from . import rules
from .alerts import Condition, reconcile, resolve_alert, thresholds
from .models import ACTIVE_STATES, Alert, AlertKind, AlertRule, Category, Severity
from .watch import rule_key


def _periodic_rules(metric: str) -> list[AlertRule]:
    return list(AlertRule.objects.filter(enabled=True, metric=metric))


def agent_silent_conditions(now: datetime) -> list[tuple[AlertRule, list[Condition]]]:
    out = []
    agents = list(AgentState.objects.filter(last_seen_at__isnull=False).select_related("host"))
    held = _hosts_by_team()
    for rule in _periodic_rules("agent_silent"):
        found = []
        for state in agents:
            if not _host_in_scope(rule, state.host_id, held):
                continue
            silent = (now - state.last_seen_at).total_seconds()
            if not rules.holds(rule.comparison, silent, rule.threshold):
                continue
            found.append(Condition(
                key=f"r{rule.pk}:host{state.host_id}", host_id=state.host_id, threshold=rule.threshold,
                value=round(silent), team_id=rule.team_id, rule_id=rule.pk, severity=rule.severity,
                message=f"{rule.name}: the agent on {state.host.name} has sent nothing since "
                        f"{state.last_seen_at:%Y-%m-%d %H:%M:%S} UTC.",
            ))
        out.append((rule, found))
    return out


def _hosts_by_team() -> dict[int, set[int]]:
    held: dict[int, set[int]] = {}
    for team_id, host_id in Gpu.objects.filter(team__isnull=False).values_list("team_id", "host_id"):
        held.setdefault(team_id, set()).add(host_id)
    for team_id, host_id in GpuSlice.objects.filter(team__isnull=False).values_list("team_id", "gpu__host_id"):
        held.setdefault(team_id, set()).add(host_id)
    return held


def _host_in_scope(rule: AlertRule, host_id: int, held: dict[int, set[int]]) -> bool:
    if rule.team_id is not None:
        return host_id in held.get(rule.team_id, set())
    if rule.host_id is not None:
        return rule.host_id == host_id
    if rule.gpu_model_id is not None:
        return Gpu.objects.filter(host_id=host_id, model_id=rule.gpu_model_id).exists()
    return True


def idle_conditions(now: datetime) -> list[tuple[AlertRule, list[Condition]]]:
    """Per GPU (or slice) of each running instance, busy instances included: real
    activity over the rule's hold time, from raw samples that cover the whole window."""
    out = []
    by_window: dict[int, list[dict]] = {}
    for rule in _periodic_rules("idle_billed"):
        window = max(rule.hold_s, 5)
        if window not in by_window:
            by_window[window] = _activity_rows(now, window)
        found = []
        for row in by_window[window]:
            if not _instance_in_scope(rule, row) or not rules.holds(rule.comparison, row["activity"], rule.threshold):
                continue
            found.append(Condition(
                key=rule_key(rule.pk, row["uuid"], row["instance_id"]), instance_id=row["instance_id"],
                team_id=rule.team_id, host_id=row["host_id"], gpu_id=row["gpu_id"], uuid=row["uuid"],
                value=round(row["activity"], 2), threshold=rule.threshold, rule_id=rule.pk, severity=rule.severity,
                message=f"{rule.name}: {row['uuid']} of {row['name']} was billed but at most "
                        f"{row['activity']:.1f}% busy (real activity) for the last {_span(window)}.",
            ))
        out.append((rule, found))
    return out


def _span(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def spot_max_conditions(now: datetime) -> list[tuple[AlertRule, list[Condition]]]:
    """Per running spot instance with a max price: the spot price in effect as a
    percentage of it."""
    from instances.preemption import price_text, spot_against_max

    out, rows = [], None
    for rule in _periodic_rules("spot_vs_max"):
        rows = spot_against_max(now=now) if rows is None else rows
        found = []
        for instance, spot in rows:
            pct = float(spot / instance.max_price * 100)
            row = {"team_id": instance.team_id, "instance_id": instance.pk, "host_id": instance.host_id,
                   "model_id": instance.gpu_model_id}
            if not _instance_in_scope(rule, row) or not rules.holds(rule.comparison, pct, rule.threshold):
                continue
            found.append(Condition(
                key=f"r{rule.pk}:i{instance.pk}", instance_id=instance.pk, team_id=instance.team_id,
                host_id=instance.host_id, value=round(pct, 1), threshold=rule.threshold, rule_id=rule.pk,
                severity=rule.severity, category=Category.BILLING,
                message=f"{rule.name}: the spot price of {instance.sku} is {price_text(spot)}/GPU-hour at "
                        f"{now:%H:%M} UTC, {pct:.0f}% of {instance.name}'s max price {price_text(instance.max_price)}.",
            ))
        out.append((rule, found))
    return out


def _instance_in_scope(rule: AlertRule, row: dict) -> bool:
    if rule.team_id is not None:
        return row["team_id"] == rule.team_id and rule.instance_id in (None, row["instance_id"])
    if rule.host_id is not None:
        return row["host_id"] == rule.host_id
    return rule.gpu_model_id in (None, row["model_id"])


def _activity_rows(now: datetime, window_s: float) -> list[dict]:
    since = now - timedelta(seconds=window_s)
    running = Instance.objects.filter(state=State.RUNNING, state_changed_at__lte=since)
    rows = (
        Sample.objects.filter(time__gt=since, time__lte=now, instance__in=running)
        .values("instance_id", "instance__team_id", "instance__name", "gpu_id", "slice_id", "gpu__uuid",
                "slice__uuid", "gpu__host_id", "gpu__model_id")
        .annotate(first=Min("time"), n=Count("id"), util=Avg("gpu_util"), occupancy=Avg("sm_occupancy_pct"),
                  tensor=Avg("tensor_active_pct"), dram=Avg("dram_bw_util_pct"))
    )
    # A window is covered when the first reading is within a tenth of it of its start.
    slack = timedelta(seconds=max(window_s * 0.1, 2.0))
    out = []
    for row in rows:
        activity = real_activity(row["util"], row["occupancy"], row["tensor"], row["dram"])
        if activity is None or row["first"] - since > slack:
            continue
        out.append({
            "instance_id": row["instance_id"], "team_id": row["instance__team_id"], "name": row["instance__name"],
            "gpu_id": row["gpu_id"], "uuid": row["slice__uuid"] or row["gpu__uuid"], "host_id": row["gpu__host_id"],
            "model_id": row["gpu__model_id"], "activity": activity,
        })
    return out


def resolve_stale(now: datetime) -> None:
    """Ingest-rule alerts no reading refreshed for ALERT_STALE_S: their GPU stopped
    reporting (agent silence has its own rule)."""
    ingest_metrics = [m for m, spec in rules.METRICS.items() if spec.how == rules.INGEST]
    cutoff = now - timedelta(seconds=thresholds()["stale_s"])
    stale = Alert.objects.filter(state__in=ACTIVE_STATES, rule__metric__in=ingest_metrics, updated_at__lt=cutoff)
    for alert in stale:
        resolve_alert(alert, now=now, why="no fresh readings")


def expire_xid(now: datetime) -> None:
    quiet = timedelta(seconds=thresholds()["xid_quiet_s"])
    for alert in Alert.objects.filter(kind=AlertKind.XID, state__in=ACTIVE_STATES, updated_at__lt=now - quiet):
        resolve_alert(alert, now=now, why="no new XID error")


def audit_conditions() -> list[Condition]:
    """The latest audit verification failed: operators (and auditors' teams) must know."""
    latest = Verification.objects.order_by("-id").first()
    if latest is None or latest.valid:
        return []
    return [Condition(
        key="audit_verify", category=Category.AUDIT, severity=Severity.CRITICAL, value=latest.first_broken_seq,
        message=f"Audit log verification failed at record {latest.first_broken_seq}: {latest.reason}"[:300],
    )]


def preemption_conditions() -> list[Condition]:
    pending = PreemptionNotice.objects.filter(status=NoticeStatus.PENDING).select_related("instance")
    return [Condition(
        key=f"preempt:{n.pk}", category=Category.BILLING, severity=Severity.WARNING, team_id=n.team_id,
        instance_id=n.instance_id, host_id=n.instance.host_id,
        # The reason quotes the spot price when the notice was given, which may have
        # moved since: the time says which price it is.
        message=f"Spot instance {n.instance.name} will be preempted at {n.preempt_at:%Y-%m-%d %H:%M:%S} UTC"
                f"{': ' + n.reason if n.reason else ''} (notice given at {n.notice_at:%H:%M:%S} UTC).",
    ) for n in pending]


def evaluate(now: datetime | None = None) -> None:
    """Run every periodic rule once."""
    now = now or timezone.now()
    for kind, found in ((AlertKind.AGENT_SILENT, agent_silent_conditions(now)), (AlertKind.IDLE, idle_conditions(now)),
                        (AlertKind.SPOT_MAX, spot_max_conditions(now))):
        for rule, conditions in found:
            reconcile(kind, conditions, now=now, scope=Q(rule=rule))
    # Alerts of rules since disabled or deleted end too.
    ended = Alert.objects.filter(state__in=ACTIVE_STATES).filter(
        Q(rule__enabled=False) | Q(rule__isnull=True, key__regex=r"^r[0-9]+:")
    )
    for alert in ended:
        resolve_alert(alert, now=now, why="the rule was disabled or deleted")
    resolve_stale(now)
    expire_xid(now)
    reconcile(AlertKind.AUDIT, audit_conditions(), now=now)
    reconcile(AlertKind.PREEMPTION, preemption_conditions(), now=now)
