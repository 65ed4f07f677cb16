"""The audit log's verbs. Every service that changes state calls ``record_event`` inside
its own transaction, so a failed audit write rolls the change back."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from . import context
from .models import GENESIS_HASH, ActorType, AuditEvent, ChainHead, Outcome

SECRET_WORDS = ("password", "token", "secret", "key", "authorization", "cookie")


def scrub(details: Any) -> Any:
    """Drop values whose key names a secret, at any depth."""
    if isinstance(details, dict):
        return {
            str(k): ("[redacted]" if any(w in str(k).lower() for w in SECRET_WORDS) else scrub(v))
            for k, v in details.items()
        }
    if isinstance(details, list | tuple):
        return [scrub(v) for v in details]
    if isinstance(details, datetime):
        return details.isoformat()
    if details is None or isinstance(details, str | int | float | bool):
        return details
    return str(details)


def canonical(event: AuditEvent) -> bytes:
    """The bytes the chain hashes: every field that says what happened, in a fixed form."""
    body = {
        "seq": event.seq,
        "time": event.time.astimezone(UTC).isoformat(timespec="microseconds"),
        "actor_type": event.actor_type,
        "actor_id": event.actor_id,
        "actor_name": event.actor_name,
        "team_id": event.team_id,
        "action": event.action,
        "target_type": event.target_type,
        "target_id": event.target_id,
        "outcome": event.outcome,
        "source_ip": event.source_ip,
        "user_agent": event.user_agent,
        "request_id": event.request_id,
        "details": event.details,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def chain_hash(event: AuditEvent, prev_hash: str) -> str:
    return hashlib.sha256(canonical(event) + prev_hash.encode()).hexdigest()


def describe_actor(actor) -> tuple[str, str, str]:
    """(actor_type, actor_id, actor_name) for a user, a host (agent), a string or None."""
    if actor is None or actor == "system":
        return ActorType.SYSTEM, "", "system"
    if isinstance(actor, str):
        return ActorType.SYSTEM, "", actor[:150]
    if getattr(actor, "is_anonymous", False):
        return ActorType.ANONYMOUS, "", "anonymous"
    if hasattr(actor, "get_username"):
        return ActorType.USER, str(actor.pk), actor.get_username()
    return ActorType.AGENT, str(actor.pk), getattr(actor, "name", str(actor))[:150]


@transaction.atomic
def record_event(
    *,
    actor,
    action: str,
    target=None,
    target_type: str = "",
    target_id: str = "",
    team=None,
    outcome: str = Outcome.SUCCESS,
    details: dict | None = None,
) -> AuditEvent:
    ctx = context.current()
    actor_type, actor_id, actor_name = describe_actor(actor)
    if target is not None:
        target_type = target_type or target._meta.label_lower
        target_id = target_id or str(target.pk)
    head, _ = ChainHead.objects.select_for_update().get_or_create(id=1)
    event = AuditEvent(
        seq=head.seq + 1,
        time=timezone.now(),
        actor_type=actor_type,
        actor_id=actor_id,
        actor_name=actor_name,
        team_id=getattr(team, "pk", team),
        action=action,
        target_type=target_type,
        target_id=str(target_id),
        outcome=outcome,
        source_ip=ctx.source_ip,
        user_agent=ctx.user_agent,
        request_id=ctx.request_id,
        details=scrub(details or {}),
        prev_hash=head.hash or GENESIS_HASH,
    )
    # JSON round trip so the hash covers exactly what the database will hand back.
    event.details = json.loads(json.dumps(event.details, sort_keys=True))
    event.hash = chain_hash(event, event.prev_hash)
    event.save(force_insert=True)
    ChainHead.objects.filter(id=1).update(seq=event.seq, hash=event.hash)
    return event
