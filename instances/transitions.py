"""How an instance changes state: the one ``transition`` every verb goes through (its
lifecycle event, GPU holds and audit event in one transaction), the graces of the
stopping and pending states, and what a state means to the person looking at it."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from agent.protocol import LiveInstance
from audit.recording import record_event
from console.errors import Conflict

from .models import (
    FINAL_STATES,
    HOLDING_STATES,
    Instance,
    LifecycleEvent,
    State,
)


class LifecycleError(Conflict):
    """A request the instance's state does not allow (answers 409)."""

    code = "invalid_transition"


def stopping_grace() -> timedelta:
    """How long ``stopping`` may last before it is flagged as stuck; billing stops here."""
    return timedelta(seconds=getattr(settings, "STOPPING_GRACE_SECONDS", 600))


def pending_grace() -> timedelta:
    """How long ``pending`` (placed, booting, not billed) may last before it is flagged as stuck."""
    return timedelta(seconds=getattr(settings, "PENDING_GRACE_SECONDS", 600))


def pending_limit() -> timedelta:
    """How long ``pending`` may last at all: past it the instance fails (``fail_overdue``)."""
    return timedelta(seconds=getattr(settings, "PENDING_FAIL_SECONDS", 1800))


def is_stuck(instance: Instance, now: datetime | None = None) -> bool:
    """Stopping past the stopping grace, or pending past the pending grace."""
    grace = {State.STOPPING: stopping_grace(), State.PENDING: pending_grace()}.get(instance.state)
    return grace is not None and (now or timezone.now()) - instance.state_changed_at > grace


def state_note(instance: Instance, now: datetime | None = None) -> str:
    """Why an instance that holds GPUs without running is where it is, in words ('' otherwise)."""
    if instance.state not in (State.PENDING, State.STOPPING):
        return ""
    now = now or timezone.now()
    since = f"since {instance.state_changed_at:%Y-%m-%d %H:%M} UTC"
    where = f" on {instance.host.name}" if instance.host_id else ""
    if instance.state == State.PENDING:
        text = (f"Placed{where} and booting {since}: its GPUs are held for it, and it is not billed until the host "
                "reports it running.")
        if is_stuck(instance, now):
            fails = instance.state_changed_at + pending_limit()
            text += (f" Stuck: the host has not confirmed the boot within {int(pending_grace().total_seconds() // 60)}"
                     f" minutes; terminate it to give the GPUs back, or it fails at {fails:%Y-%m-%d %H:%M} UTC.")
        return text
    if instance.state == State.STOPPING:
        text = f"Stopping{where} {since}: waiting for the host to confirm."
        if is_stuck(instance, now):
            text += (f" Stuck: not confirmed within {int(stopping_grace().total_seconds() // 60)} minutes; "
                     "billing stopped at the grace.")
        return text
    return ""


def transition(
    instance: Instance,
    to_state: str,
    *,
    actor,
    action: str,
    reason: str = "",
    by_platform: bool = False,
    at: datetime | None = None,
    details: dict | None = None,
) -> Instance:
    if instance.state in FINAL_STATES:
        raise LifecycleError(f"Instance {instance.name} is {instance.state}, which is final; it cannot become {to_state}.")
    if not instance.can_move_to(to_state):
        raise LifecycleError(
            f"Instance {instance.name} is {instance.state}; it cannot become {to_state}."
        )
    at = change_time(instance, at)
    # Metering reads the events in time order: one dated before the last would reorder
    # the instance's history (an end before its start bills it for ever).
    if at < instance.state_changed_at:
        raise LifecycleError(
            f"Instance {instance.name} became {instance.state} at {instance.state_changed_at:%Y-%m-%d %H:%M:%S} UTC; "
            f"a change to {to_state} cannot be dated before that ({at:%Y-%m-%d %H:%M:%S} UTC)."
        )
    from_state = instance.state
    instance.state = to_state
    instance.state_changed_at = at
    instance.save(update_fields=["state", "state_changed_at", "host"])
    LifecycleEvent.objects.create(
        instance=instance,
        time=at,
        from_state=from_state,
        to_state=to_state,
        gpu_count=instance.gpu_count,
        host=instance.host,
        reason=reason[:200],
        by_platform=by_platform,
    )
    record_event(
        actor=actor,
        action=action,
        target=instance,
        team=instance.team_id,
        details={"from": from_state, "to": to_state, "reason": reason, **(details or {})},
    )
    _announce(instance)
    return instance


def change_time(instance: Instance, at: datetime | None) -> datetime:
    """``at`` as given; else now, or the instance's last change where this server's clock
    is behind the one that wrote it (a change never goes before the last)."""
    return at if at is not None else max(timezone.now(), instance.state_changed_at)


def locked(instance: Instance) -> Instance:
    return Instance.objects.select_for_update().select_related("team", "gpu_model").get(pk=instance.pk)


def holding(instance: Instance) -> bool:
    return instance.state in HOLDING_STATES


def _announce(instance: Instance) -> None:
    from console.live import FLEET_GROUP, instance_group, publish_on_commit, team_group

    publish_on_commit(
        [team_group(instance.team_id), instance_group(instance.pk), FLEET_GROUP],
        "instance",
        LiveInstance(id=instance.pk, name=instance.name, state=instance.state, team=instance.team_id),
    )
