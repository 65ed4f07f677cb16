"""Alert rules and the one way alerts open, update and resolve.

Each rule names the conditions that hold now, keyed like ``temperature:GPU-…``;
``reconcile`` opens an alert for a new key, refreshes an active one, and resolves
active alerts of that kind whose key no longer holds. Opening and resolving are
audited (``alert.open``, ``alert.resolve``) and pushed live as ``alert`` events.
Thresholds are settings; docs/telemetry.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Avg, Count, Max, Min, Q
from django.utils import timezone

from audit.services import record_event
from console.live import FLEET_GROUP, host_group, instance_group, publish_on_commit, team_group
from instances.models import Gpu, GpuSlice, Instance, State

from .activity import real_activity
from .models import ACTIVE_STATES, AgentState, Alert, AlertKind, AlertState, GpuLatest, Sample


def setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def thresholds() -> dict[str, float]:
    return {
        "temp_c": setting("ALERT_TEMP_C", 85),
        "temp_clear_c": setting("ALERT_TEMP_CLEAR_C", 80),
        "power_pct": setting("ALERT_POWER_PCT", 98),
        "window_s": setting("ALERT_WINDOW_S", 60),
        "agent_silent_s": setting("ALERT_AGENT_SILENT_S", 60),
        "xid_quiet_s": setting("ALERT_XID_QUIET_S", 3600),
        "idle_pct": setting("IDLE_THRESHOLD_PCT", 10),
        "idle_window_s": setting("IDLE_WINDOW_S", 1800),
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


def alert_data(alert: Alert) -> dict:
    return {
        "id": alert.pk,
        "kind": alert.kind,
        "state": alert.state,
        "message": alert.message,
        "uuid": alert.uuid,
        "instance": alert.instance_id,
        "team": alert.team_id,
        "host": alert.host_id,
        "value": alert.value,
        "opened_at": alert.opened_at.isoformat(),
        "updated_at": alert.updated_at.isoformat(),
        "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
    }


@transaction.atomic
def raise_alert(kind: str, condition: Condition, *, now: datetime | None = None) -> Alert:
    """Open an alert for ``condition``, or refresh the active one with the same key."""
    now = now or timezone.now()
    alert = Alert.objects.select_for_update().filter(key=condition.key, state__in=ACTIVE_STATES).first()
    if alert is not None:
        alert.message = condition.message[:300]
        alert.value = condition.value
        alert.count += 1
        alert.updated_at = now
        alert.save(update_fields=["message", "value", "count", "updated_at"])
        return alert
    alert = Alert.objects.create(
        kind=kind,
        key=condition.key,
        message=condition.message[:300],
        value=condition.value,
        threshold=condition.threshold,
        host_id=condition.host_id,
        gpu_id=condition.gpu_id,
        uuid=condition.uuid,
        instance_id=condition.instance_id,
        team_id=condition.team_id,
        opened_at=now,
        updated_at=now,
    )
    record_event(
        actor="system", action="alert.open", target=alert, team=alert.team_id,
        details={"kind": kind, "key": alert.key, "message": alert.message, "value": alert.value},
    )
    announce(alert)
    return alert


@transaction.atomic
def resolve_alert(alert: Alert, *, now: datetime | None = None, why: str = "") -> Alert:
    alert = Alert.objects.select_for_update().get(pk=alert.pk)
    if alert.state == AlertState.RESOLVED:
        return alert
    now = now or timezone.now()
    alert.state = AlertState.RESOLVED
    alert.resolved_at = alert.updated_at = now
    alert.save(update_fields=["state", "resolved_at", "updated_at"])
    record_event(
        actor="system", action="alert.resolve", target=alert, team=alert.team_id,
        details={"kind": alert.kind, "key": alert.key, "why": why},
    )
    announce(alert)
    return alert


def is_active(key: str) -> bool:
    return Alert.objects.filter(key=key, state__in=ACTIVE_STATES).exists()


def resolve_key(key: str, *, now: datetime | None = None, why: str = "") -> None:
    for alert in Alert.objects.filter(key=key, state__in=ACTIVE_STATES):
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


# --- rules ---------------------------------------------------------------------------


def _holders() -> tuple[dict[int, tuple], dict[int, tuple]]:
    gpus = {g["id"]: g for g in Gpu.objects.values("id", "uuid", "host_id", "instance_id", "team_id")}
    slices = {s["id"]: s for s in GpuSlice.objects.values("id", "uuid", "gpu__host_id", "instance_id", "team_id")}
    return gpus, slices


def threshold_conditions(now: datetime) -> tuple[list[Condition], list[Condition]]:
    """(temperature, power) conditions over the last ALERT_WINDOW_S of raw samples."""
    limits = thresholds()
    since = now - timedelta(seconds=limits["window_s"])
    rows = (
        Sample.objects.filter(time__gt=since, time__lte=now, slice__isnull=True)
        .values("gpu_id")
        .annotate(
            temp=Max("temp_c"),
            power=Avg("power_mw"),
            limit=Max("power_limit_mw"),
            model_limit_w=Max("gpu__model__power_limit_w"),
        )
    )
    gpus, _ = _holders()
    temperature, power = [], []
    active_temp = set(
        Alert.objects.filter(kind=AlertKind.TEMPERATURE, state__in=ACTIVE_STATES).values_list("gpu_id", flat=True)
    )
    for row in rows:
        gpu = gpus.get(row["gpu_id"])
        if gpu is None:
            continue
        where = {"host_id": gpu["host_id"], "gpu_id": gpu["id"], "uuid": gpu["uuid"],
                 "instance_id": gpu["instance_id"], "team_id": gpu["team_id"]}
        temp = row["temp"]
        # Hysteresis: an open temperature alert clears only below the lower mark.
        mark = limits["temp_clear_c"] if gpu["id"] in active_temp else limits["temp_c"]
        if temp is not None and temp >= mark:
            temperature.append(Condition(
                key=f"temperature:{gpu['uuid']}", value=temp, threshold=limits["temp_c"],
                message=f"{gpu['uuid']} reached {temp:.0f} °C (threshold {limits['temp_c']:.0f} °C).", **where,
            ))
        limit_mw = row["limit"] or (row["model_limit_w"] or 0) * 1000
        if row["power"] is not None and limit_mw:
            share = 100.0 * row["power"] / limit_mw
            if share >= limits["power_pct"]:
                power.append(Condition(
                    key=f"power:{gpu['uuid']}", value=row["power"] / 1000, threshold=limit_mw * limits["power_pct"] / 100_000,
                    message=f"{gpu['uuid']} drew {row['power'] / 1000:.0f} W on average over "
                            f"{limits['window_s']:.0f} s, {share:.0f}% of its {limit_mw / 1000:.0f} W limit.",
                    **where,
                ))
    return temperature, power


def ecc_conditions() -> list[Condition]:
    out = []
    latest = GpuLatest.objects.filter(slice__isnull=True).values(
        "uuid", "host_id", "gpu_id", "instance_id", "team_id", "metrics"
    )
    for row in latest:
        count = (row["metrics"] or {}).get("ecc_uncorrected_volatile")
        if isinstance(count, int | float) and count > 0:
            out.append(Condition(
                key=f"ecc_uncorrected:{row['uuid']}", value=count, threshold=0,
                message=f"{row['uuid']} reports {count:.0f} uncorrected ECC errors since the driver loaded.",
                host_id=row["host_id"], gpu_id=row["gpu_id"], uuid=row["uuid"],
                instance_id=row["instance_id"], team_id=row["team_id"],
            ))
    return out


def agent_silent_conditions(now: datetime) -> list[Condition]:
    limits = thresholds()
    since = now - timedelta(seconds=limits["agent_silent_s"])
    silent = AgentState.objects.filter(last_seen_at__lt=since).select_related("host")
    return [
        Condition(
            key=f"agent_silent:{state.host.name}", host_id=state.host_id, threshold=limits["agent_silent_s"],
            value=(now - state.last_seen_at).total_seconds(),
            message=f"The agent on {state.host.name} has sent nothing since "
                    f"{state.last_seen_at:%Y-%m-%d %H:%M:%S} UTC.",
        )
        for state in silent
    ]


def idle_conditions(now: datetime, *, window_s: float | None = None, threshold_pct: float | None = None) -> list[Condition]:
    """Running instances whose every GPU did less real work than the threshold over the
    whole window (and reported across it). See activity.real_activity."""
    limits = thresholds()
    window_s = window_s if window_s is not None else limits["idle_window_s"]
    threshold_pct = threshold_pct if threshold_pct is not None else limits["idle_pct"]
    since = now - timedelta(seconds=window_s)
    running = Instance.objects.filter(state=State.RUNNING, state_changed_at__lte=since)
    rows = (
        Sample.objects.filter(time__gt=since, time__lte=now, instance__in=running)
        .values("instance_id", "instance__team_id", "instance__name", "gpu_id", "slice_id")
        .annotate(
            first=Min("time"),
            n=Count("id"),
            util=Avg("gpu_util"),
            occupancy=Avg("sm_occupancy_pct"),
            tensor=Avg("tensor_active_pct"),
            dram=Avg("dram_bw_util_pct"),
        )
    )
    busiest: dict[int, float] = {}
    covered: dict[int, bool] = {}
    names: dict[int, tuple[str, int]] = {}
    # A window is covered when the first reading is within a tenth of it of its start.
    slack = timedelta(seconds=max(window_s * 0.1, 2.0))
    for row in rows:
        activity = real_activity(row["util"], row["occupancy"], row["tensor"], row["dram"])
        iid = row["instance_id"]
        names[iid] = (row["instance__name"], row["instance__team_id"])
        covered[iid] = covered.get(iid, True) and row["first"] - since <= slack
        if activity is None:
            covered[iid] = False
            continue
        busiest[iid] = max(busiest.get(iid, 0.0), activity)
    out = []
    for iid, activity in busiest.items():
        if not covered[iid] or activity >= threshold_pct:
            continue
        name, team_id = names[iid]
        minutes = window_s / 60
        out.append(Condition(
            key=f"idle:{iid}", instance_id=iid, team_id=team_id, value=round(activity, 2), threshold=threshold_pct,
            message=f"{name}: its GPUs were allocated but less than {threshold_pct:.0f}% busy "
                    f"(at most {activity:.1f}%) for the last {minutes:.0f} min.",
        ))
    return out


def expire_xid(now: datetime) -> None:
    quiet = timedelta(seconds=thresholds()["xid_quiet_s"])
    for alert in Alert.objects.filter(kind=AlertKind.XID, state__in=ACTIVE_STATES, updated_at__lt=now - quiet):
        resolve_alert(alert, now=now, why="no new XID error")


def evaluate(now: datetime | None = None) -> None:
    """Run every periodic rule once."""
    now = now or timezone.now()
    temperature, power = threshold_conditions(now)
    reconcile(AlertKind.TEMPERATURE, temperature, now=now)
    reconcile(AlertKind.POWER, power, now=now)
    reconcile(AlertKind.ECC, ecc_conditions(), now=now)
    reconcile(AlertKind.AGENT_SILENT, agent_silent_conditions(now), now=now)
    reconcile(AlertKind.IDLE, idle_conditions(now), now=now)
    expire_xid(now)
