"""The network half of an agent's websocket (registered with monitoring.agent_links,
which monitoring.consumers.AgentConsumer calls): after its welcome a connected agent gets its host's current ruleset and every
new version; its ``ruleset_applied`` reports are recorded."""

from __future__ import annotations

import logging

import msgspec
from channels.db import database_sync_to_async

from agent import protocol as wire

from . import rulesets

log = logging.getLogger(__name__)

prefix = '{"type":"ruleset_applied"'  # the reports this link reads
_reports = msgspec.json.Decoder(wire.RulesetApplied)


async def joined(consumer) -> None:
    """Join the host's group, then send what the host should enforce now."""
    host_id = consumer.host.pk
    await consumer.channel_layer.group_add(rulesets.host_group(host_id), consumer.channel_name)
    frame = await database_sync_to_async(rulesets.current_frame)(host_id)
    if frame is not None:
        await consumer.send(text_data=frame)


async def left(consumer) -> None:
    if getattr(consumer, "host", None) is not None:
        await consumer.channel_layer.group_discard(rulesets.host_group(consumer.host.pk), consumer.channel_name)


async def read(consumer, text: str) -> None:
    """Record the agent's report; one it cannot be read is logged and dropped (the
    console then shows the host as not applied, and alerts after APPLY_WITHIN)."""
    try:
        applied = _reports.decode(text)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        log.warning("unreadable network report from %s: %s", consumer.host.name, exc)
        return
    await database_sync_to_async(rulesets.record_report)(host=consumer.host, report=applied)
