"""Idle stop: opt-in policies that stop an instance after N minutes with every device idle
by real activity (``rightsizing.IDLE_PCT``; utilization alone is not trusted), with a
notice first and through the instances' own stop verb. A minute with no telemetry breaks
an idle stretch: the console never stops what it cannot see."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.recording import record_event
from instances import lifecycle as instance_lifecycle
from instances.models import Instance, State
from monitoring.activity import real_activity
from monitoring.models import Rollup1m

from .models import IdleStopNotice, IdleStopPolicy, NoticeStatus
from .rightsizing import IDLE_PCT

MINUTE = timedelta(minutes=1)
MAX_IDLE_MINUTES = 7 * 24 * 60
WHOLE = re.compile(r"-?[0-9]+")
# The newest minute rollup may lag the clock by this much (the rollup task's cadence).
ROLLUP_LAG = timedelta(minutes=3)


def _check(idle_minutes, warn_minutes) -> tuple[int, int]:
    errors = {}
    values = {}
    for field, value in (("idle_minutes", idle_minutes), ("warn_minutes", warn_minutes)):
        text = str(value).strip()
        if isinstance(value, bool) or not WHOLE.fullmatch(text):
            errors[field] = f"{field} is a whole number of minutes."
        else:
            values[field] = int(text) if len(text) <= 9 else MAX_IDLE_MINUTES + 1  # past any range
    if not errors and not 10 <= values["idle_minutes"] <= MAX_IDLE_MINUTES:
        errors["idle_minutes"] = f"idle_minutes is between 10 and {MAX_IDLE_MINUTES} (a week)."
    if not errors and not 1 <= values["warn_minutes"] < values["idle_minutes"]:
        errors["warn_minutes"] = "warn_minutes is at least 1 and less than idle_minutes."
    if errors:
        raise ValidationError(errors)
    return values["idle_minutes"], values["warn_minutes"]


@transaction.atomic
def set_policy(*, actor, team, instance: Instance | None = None, idle_minutes, warn_minutes=10,
               enabled: bool = True, now: datetime | None = None) -> IdleStopPolicy:
    """Add or change the team's policy (``instance`` None: every instance of the team;
    an instance's own policy wins over the team's)."""
    idle_minutes, warn_minutes = _check(idle_minutes, warn_minutes)
    if instance is not None and instance.team_id != team.pk:
        raise ValidationError({"instance": f"Instance {instance.name} is not {team.name}'s."})
    policy, _ = IdleStopPolicy.objects.update_or_create(
        team=team, instance=instance,
        defaults={"idle_minutes": idle_minutes, "warn_minutes": warn_minutes, "enabled": bool(enabled),
                  "created_by": actor if getattr(actor, "pk", None) else None, "updated_at": now or timezone.now()},
    )
    action = "savings.idle_stop.set" if enabled else "savings.idle_stop.off"
    record_event(actor=actor, action=action, target=instance or team, team=team,
                 details={"idle_minutes": idle_minutes, "warn_minutes": warn_minutes, "enabled": bool(enabled),
                          "instance": getattr(instance, "name", None)})
    if not enabled:
        _cancel_notices(policy, now or timezone.now())
    return policy


@transaction.atomic
def delete_policy(*, actor, policy: IdleStopPolicy) -> None:
    _cancel_notices(policy, timezone.now())
    record_event(actor=actor, action="savings.idle_stop.delete", target=policy.instance or policy.team,
                 team=policy.team_id, details={"instance": getattr(policy.instance, "name", None)})
    policy.delete()


def _cancel_notices(policy: IdleStopPolicy, now: datetime) -> None:
    IdleStopNotice.objects.filter(policy=policy, status=NoticeStatus.PENDING).update(
        status=NoticeStatus.CANCELLED, done_at=now)


# --- enforcement ------------------------------------------------------------------------


def policies_by_instance() -> dict[int, IdleStopPolicy]:
    """{running instance id: the policy in force for it} (its own, else its team's)."""
    policies = list(IdleStopPolicy.objects.filter(enabled=True))
    own = {p.instance_id: p for p in policies if p.instance_id}
    teams = {p.team_id: p for p in policies if not p.instance_id}
    running = Instance.objects.filter(state=State.RUNNING).filter(
        team_id__in=list(teams)).values_list("pk", "team_id") if teams else []
    out = {pk: teams[team_id] for pk, team_id in running}
    live = set(Instance.objects.filter(pk__in=list(own), state=State.RUNNING).values_list("pk", flat=True))
    out.update({pk: p for pk, p in own.items() if pk in live})
    return out


def idle_since(instance_id: int, now: datetime, lookback: timedelta) -> datetime | None:
    """Where the instance's current stretch of all-idle minutes began, or None when its
    newest minute is busy or missing."""
    minutes: dict[datetime, bool] = {}
    rows = Rollup1m.objects.filter(instance_id=instance_id, bucket__gte=now - lookback - ROLLUP_LAG, bucket__lt=now)
    for bucket, *metrics in rows.values_list("bucket", "gpu_util_avg", "sm_occupancy_pct_avg",
                                             "tensor_active_pct_avg", "dram_bw_util_pct_avg"):
        activity = real_activity(*metrics)
        idle = activity is not None and activity < IDLE_PCT
        minutes[bucket] = minutes.get(bucket, True) and idle
    if not minutes:
        return None
    newest = max(minutes)
    if newest < now - ROLLUP_LAG - MINUTE:
        return None
    since, at = None, newest
    while minutes.get(at):
        since, at = at, at - MINUTE
    return since


def enforce(*, now: datetime | None = None) -> dict[str, int]:
    """Warn, stop or stand down for every instance under a policy; counts of each."""
    now = now or timezone.now()
    done = {"warned": 0, "stopped": 0, "cancelled": 0, "none": 0}
    pending = {n.instance_id: n for n in IdleStopNotice.objects.filter(status=NoticeStatus.PENDING)}
    targets = policies_by_instance()
    for notice in pending.values():
        if notice.instance_id not in targets:
            _close(notice, NoticeStatus.CANCELLED, now, "savings.idle_stop.cancel")
            done["cancelled"] += 1
    for instance_id, policy in targets.items():
        notice = pending.get(instance_id)
        lookback = timedelta(minutes=policy.idle_minutes)
        if notice is not None:  # back to the stretch the notice was given for
            lookback = max(lookback, now - notice.idle_since + MINUTE)
        since = idle_since(instance_id, now, lookback)
        done[_step(instance_id, policy, since, notice, now)] += 1
    done.pop("none", None)
    return done


def _step(instance_id: int, policy: IdleStopPolicy, since: datetime | None, notice, now: datetime) -> str:
    if notice is not None:
        if since is None or since > notice.idle_since:
            _close(notice, NoticeStatus.CANCELLED, now, "savings.idle_stop.cancel")
            return "cancelled"
        if now >= notice.stop_at:
            _stop(notice, now)
            return "stopped"
        return "none"
    if since is not None and now - since >= timedelta(minutes=policy.idle_minutes - policy.warn_minutes):
        _warn(instance_id, policy, since, now)
        return "warned"
    return "none"


@transaction.atomic
def _warn(instance_id: int, policy: IdleStopPolicy, since: datetime, now: datetime) -> IdleStopNotice:
    instance = Instance.objects.get(pk=instance_id)
    stop_at = max(since + timedelta(minutes=policy.idle_minutes), now + timedelta(minutes=1))
    notice = IdleStopNotice.objects.create(team_id=instance.team_id, instance=instance, policy=policy,
                                           idle_since=since, warned_at=now, stop_at=stop_at)
    record_event(actor="system", action="savings.idle_stop.warn", target=instance, team=instance.team_id,
                 details={"idle_since": since.isoformat(), "stop_at": stop_at.isoformat(),
                          "idle_minutes": policy.idle_minutes})
    return notice


@transaction.atomic
def _stop(notice: IdleStopNotice, now: datetime) -> None:
    instance = Instance.objects.select_for_update().get(pk=notice.instance_id)
    if instance.state == State.RUNNING:
        instance_lifecycle.stop_instance(actor="system", instance=instance, at=now)
        record_event(actor="system", action="savings.idle_stop.stop", target=instance, team=instance.team_id,
                     details={"idle_since": notice.idle_since.isoformat(), "warned_at": notice.warned_at.isoformat()})
    notice.status, notice.done_at = NoticeStatus.STOPPED, now
    notice.save(update_fields=["status", "done_at"])


@transaction.atomic
def _close(notice: IdleStopNotice, status: str, now: datetime, action: str) -> None:
    notice.status, notice.done_at = status, now
    notice.save(update_fields=["status", "done_at"])
    record_event(actor="system", action=action, target=notice.instance, team=notice.team_id,
                 details={"idle_since": notice.idle_since.isoformat()})
