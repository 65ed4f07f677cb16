"""Publish to browsers subscribed on /ws/live/.

Groups: ``team.<id>`` (a team's members), ``instance.<id>``, ``host.<id>`` and ``fleet``
(operators). Every message is ``{"type": "live.event", "event": <name>, "data": {...}}``;
the live consumer forwards it to the browser as ``{"event": <name>, "data": {...}}``.
Events: ``gpus`` (coalesced GPU samples), ``alert``, ``instance`` (state change),
``budget``, ``preemption``.
"""

from __future__ import annotations

from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction


def team_group(team_id) -> str:
    return f"team.{team_id}"


def instance_group(instance_id) -> str:
    return f"instance.{instance_id}"


def host_group(host_id) -> str:
    return f"host.{host_id}"


FLEET_GROUP = "fleet"


def message(event: str, data: dict) -> dict:
    return {"type": "live.event", "event": event, "data": data}


async def apublish(groups: Iterable[str], event: str, data: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    msg = message(event, data)
    for group in dict.fromkeys(groups):
        await layer.group_send(group, msg)


def publish(groups: Iterable[str], event: str, data: dict) -> None:
    """From sync code; call inside a transaction with ``publish_on_commit``."""
    async_to_sync(apublish)(list(groups), event, data)


def publish_on_commit(groups: Iterable[str], event: str, data: dict) -> None:
    groups = list(groups)
    transaction.on_commit(lambda: publish(groups, event, data))
