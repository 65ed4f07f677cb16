"""GPU events from the agent (XID errors, a GPU lost or back): stored as rows, and a
lost GPU raises its alert until the agent reports it back. A "health" event carries the
GPU's health facts, kept with its verdict (``verdicts``), not as a row of its own."""

from __future__ import annotations

from . import alert_hooks, verdicts
from .models import GpuEvent


def store(host_id: int, host_name: str, events: list) -> None:
    """``events``: (record, device, when, instance_id, team_id) of known event kinds."""
    if not events:
        return
    rows = []
    for record, device, when, instance_id, team_id in events:
        e = record.event
        if e.kind == "health":
            verdicts.store_facts(device.gpu_id, e.facts or {}, when)
            continue
        rows.append(GpuEvent(
            time=when, kind=e.kind, host_id=host_id, gpu_id=device.gpu_id, uuid=record.device,
            code=e.code, message=e.message, instance_id=instance_id, team_id=team_id,
            details={"seq": record.seq},
        ))
        where = dict(host_id=host_id, gpu_id=device.gpu_id, uuid=record.device, instance_id=instance_id,
                     team_id=team_id)
        if e.kind == "gpu_lost":
            alert_hooks.raise_alert(
                "gpu_lost", key=f"gpu_lost:{record.device}",
                message=f"{record.device} on {host_name} is lost: {e.message or 'no detail'}", **where, now=when,
            )
        elif e.kind == "gpu_back":
            alert_hooks.resolve(f"gpu_lost:{record.device}", now=when, why="the agent reports it back")
    GpuEvent.objects.bulk_create(rows)
