"""An event's place in the hash chain: the bytes the chain hashes and the link to the
previous record, from an event's fields."""

from __future__ import annotations

from . import chain
from .models import (
    AuditEvent,
)


def canonical(event: AuditEvent) -> bytes:
    """The bytes the chain hashes: every field that says what happened, in a fixed form."""
    return chain.canonical_row(
        event.seq, chain.iso_time(event.time), event.actor_type, event.actor_id, event.actor_name,
        event.team_id, event.action, event.target_type, event.target_id, event.outcome,
        event.source_ip, event.user_agent, event.request_id, event.actor_role, event.target_name,
        event.details,
    )  # fmt: skip


def chain_hash(event: AuditEvent, prev_hash: str) -> str:
    return chain.link(canonical(event), prev_hash)


def chain_fields(event: AuditEvent) -> tuple:
    """An event's hashed fields after ``seq``, as ``chain.canonical_text`` takes them."""
    return (
        chain.iso_time(event.time), event.actor_type, event.actor_id, event.actor_name, event.team_id,
        event.action, event.target_type, event.target_id, event.outcome, event.source_ip,
        event.user_agent, event.request_id, event.actor_role, event.target_name,
        chain.canonical_details(event.details),
    )  # fmt: skip
