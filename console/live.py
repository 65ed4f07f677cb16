"""Publish to browsers subscribed on /ws/live/.

Groups: ``team.<id>`` (a team's members), ``instance.<id>``, ``host.<id>`` and ``fleet``
(operators). GPU readings travel as ``{"type": "live.gpus", "readings": <packed text>}``
and are merged by each socket (``monitoring.fanout``). Every other message is
``{"type": "live.event", "text": <JSON text>}``, the text
being the browser's message ``{"event": <name>, "data": {...}}`` serialised once by the
publisher from ``agent.protocol.LiveMessage``, whose ``data`` is the event's struct
(``LIVE_EVENTS``); the live consumer forwards it verbatim (the channel layer copies or packs a
string cheaply, and no consumer serialises the same payload again).
Events: ``gpus`` (coalesced GPU samples), ``alert``, ``instance`` (state change),
``budget``, ``preemption``, ``maintenance``.

Every live socket also joins ``user.<id>`` (``user_group``) and ``session.<hash>`` of its
login session; ``end_user_sockets`` sends one of them ``{"type": "live.end"}`` and each
such socket, in whichever server process holds it, closes with 4401 (after a logout,
a sign-out everywhere or a role change).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

from agent.protocol import LiveData, live_text


def team_group(team_id) -> str:
    return f"team.{team_id}"


def instance_group(instance_id) -> str:
    return f"instance.{instance_id}"


def host_group(host_id) -> str:
    return f"host.{host_id}"


FLEET_GROUP = "fleet"


def user_group(user_id) -> str:
    """Every /ws/live/ socket of one user (never subscribed to by the browser)."""
    return f"user.{user_id}"


def session_group(session_key: str) -> str:
    """The /ws/live/ sockets opened with one login session (a logout ends only those)."""
    return "session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


END = {"type": "live.end"}


def encode(event: str, data: LiveData) -> str:
    """The text a browser receives (``agent.protocol.LiveMessage``, the one schema of
    every frame the console sends); ``data`` is the struct ``LIVE_EVENTS`` names for
    ``event``, anything else is refused (``TypeError``, ``ValueError``)."""
    return live_text(event, data)


def message(event: str, data: LiveData) -> dict:
    return {"type": "live.event", "text": encode(event, data)}


CONCURRENT_SENDS = 32


async def watched(layer, groups: list[str]) -> set[str]:
    """The groups among ``groups`` that have a member now (a socket subscribed to them,
    in any server process), or all of them when the layer cannot tell: in memory, a
    look at the layer's own dict; with Redis, the layer's ``watched``
    (gpuconsole/channel_layer.py, one round trip per shard)."""
    if isinstance(layer, InMemoryChannelLayer):
        return {group for group in groups if layer.groups.get(group)}
    ask = getattr(layer, "watched", None)
    return await ask(groups) if ask is not None else set(groups)


async def send_each(sends: Iterable[tuple[str, dict]], *, watched_only: bool = False) -> None:
    """``group_send`` each (group, message), up to ``CONCURRENT_SENDS`` at a time, in
    order: with Redis each costs a few round trips, an empty group as much as a busy one.

    ``watched_only``: first ask the layer which groups have members (one round trip) and
    send to those only; for publishers that reach many groups few watch (the live GPU
    fan-out names every host's group each time). A socket that joins meanwhile hears
    from the next message on, as if it had joined a moment later."""
    layer = get_channel_layer()
    if layer is None:
        return
    if watched_only:
        sends = list(sends)
        found = await watched(layer, list(dict.fromkeys(group for group, _ in sends)))
        sends = [(group, msg) for group, msg in sends if group in found]
    gate = asyncio.Semaphore(CONCURRENT_SENDS)

    async def send(group: str, msg: dict) -> None:
        async with gate:
            await layer.group_send(group, msg)

    await asyncio.gather(*(send(group, msg) for group, msg in sends))


async def apublish(groups: Iterable[str], event: str, data: LiveData) -> None:
    msg = message(event, data)
    await send_each((group, msg) for group in dict.fromkeys(groups))


def publish(groups: Iterable[str], event: str, data: LiveData) -> None:
    """From sync code; call inside a transaction with ``publish_on_commit``."""
    async_to_sync(apublish)(list(groups), event, data)


def publish_on_commit(groups: Iterable[str], event: str, data: LiveData) -> None:
    groups = list(groups)
    transaction.on_commit(lambda: publish(groups, event, data))


async def aend_user_sockets(user_id, *, session_key: str | None = None) -> None:
    """Close every /ws/live/ socket of the user with 4401, in every server process;
    with ``session_key``, only the sockets opened with that login session."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(session_group(session_key) if session_key else user_group(user_id), END)


def end_user_sockets(user_id, *, session_key: str | None = None) -> None:
    """From sync code. Inside a transaction it waits for the commit (a rolled-back
    logout or role change ends nothing); outside one it sends at once."""
    transaction.on_commit(lambda: async_to_sync(aend_user_sockets)(user_id, session_key=session_key))
