"""The audit log's verbs. Every service that changes state calls ``record_event`` inside
its own transaction, so a failed audit write rolls the change back."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from . import chain, context
from .models import ActorType, AuditEvent, ChainHead, Checkpoint, Outcome, Verification

SECRET_WORDS = (
    "password", "passwd", "passphrase", "token", "secret", "key", "authorization", "cookie",
    "credential", "session", "signature", "private",
)  # fmt: skip
REDACTED = "[redacted]"
# Values that are secrets whatever their key: our API tokens, agent tokens, bearer headers.
_SECRET_VALUE = re.compile(r"(gpc_|gpa_|Bearer\s+|Token\s+)[A-Za-z0-9_\-.=]{8,}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

RETENTION_FLOOR_DAYS = 180


def _is_secret_key(key: str) -> bool:
    lowered = key.lower()
    return any(word in lowered for word in SECRET_WORDS)


def _secret_values() -> tuple[str, ...]:
    return tuple(v for v in (settings.SECRET_KEY, getattr(settings, "AUDIT_SIGNING_KEY", "")) if v)


def _plain(value: str) -> str:
    # PostgreSQL text holds neither NUL nor lone surrogates.
    if not value.isascii():
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value.replace("\x00", "\ufffd")


def _scrub_text(value: str) -> str:
    value = _plain(value)
    if any(secret in value for secret in _secret_values()):
        return REDACTED
    return _SECRET_VALUE.sub(lambda m: m.group(1) + REDACTED, value)


def scrub(details: Any) -> Any:
    """Details as the database will keep them: secrets redacted by key name or by shape,
    at any depth; values turned into plain JSON that survives a jsonb round trip."""
    if isinstance(details, dict):
        return {
            _scrub_text(str(k)): (REDACTED if _is_secret_key(str(k)) else scrub(v))
            for k, v in details.items()
        }
    if isinstance(details, list | tuple | set | frozenset):
        return [scrub(v) for v in details]
    if isinstance(details, bool) or details is None or isinstance(details, int):
        return details
    if isinstance(details, float):
        if not math.isfinite(details):
            return str(details)
        # jsonb prints 1e+20 as 100000000000000000000, which reads back as an int.
        return int(details) if details.is_integer() and abs(details) >= 1e15 else details
    if isinstance(details, datetime):
        return details.isoformat()
    return _scrub_text(str(details))


def clean_text(value: str, limit: int) -> str:
    """One-line fields (names, ids, user agent): control characters become visible
    ``\\xNN`` escapes, so no CR/LF or NUL ever reaches a log line, page or CSV cell."""
    value = _plain(_CONTROL.sub(_escape_control, str(value)))
    return value[:limit]


def _escape_control(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}"


def canonical(event: AuditEvent) -> bytes:
    """The bytes the chain hashes: every field that says what happened, in a fixed form."""
    return chain.canonical_row(
        event.seq, chain.iso_time(event.time), event.actor_type, event.actor_id, event.actor_name,
        event.team_id, event.action, event.target_type, event.target_id, event.outcome,
        event.source_ip, event.user_agent, event.request_id, event.details,
    )  # fmt: skip


def chain_hash(event: AuditEvent, prev_hash: str) -> str:
    return chain.link(canonical(event), prev_hash)


def describe_actor(actor) -> tuple[str, str, str]:
    """(actor_type, actor_id, actor_name) for a user, a host (agent), a string or None."""
    if actor is None or actor == "system":
        return ActorType.SYSTEM, "", "system"
    if isinstance(actor, str):
        return ActorType.SYSTEM, "", actor
    if getattr(actor, "is_anonymous", False):
        return ActorType.ANONYMOUS, "", "anonymous"
    if hasattr(actor, "get_username"):
        return ActorType.USER, str(actor.pk), actor.get_username()
    return ActorType.AGENT, str(actor.pk), str(getattr(actor, "name", actor))


def _lock_head() -> ChainHead:
    """The chain head, locked until this transaction ends: appends are serialised here
    (a row lock on PostgreSQL; SQLite's IMMEDIATE transactions already serialise)."""
    head = ChainHead.objects.select_for_update().filter(id=1).first()
    if head is None:  # a flushed test database; the unique id makes racing creators wait
        ChainHead.objects.get_or_create(id=1)
        head = ChainHead.objects.select_for_update().get(id=1)
    return head


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
    if outcome not in Outcome.values:
        raise ValueError(f"outcome must be one of {', '.join(Outcome.values)}, not {outcome!r}")
    ctx = context.current()
    actor_type, actor_id, actor_name = describe_actor(actor)
    if target is not None:
        target_type = target_type or target._meta.label_lower
        target_id = target_id or str(target.pk)
    # JSON round trip so the hash covers exactly what the database will hand back.
    clean_details = json.loads(json.dumps(scrub(details or {}), sort_keys=True))
    head = _lock_head()
    event = AuditEvent(
        seq=head.seq + 1,
        time=timezone.now(),
        actor_type=actor_type,
        actor_id=clean_text(actor_id, 64),
        actor_name=clean_text(actor_name, 150),
        team_id=getattr(team, "pk", team),
        action=clean_text(action, 64),
        target_type=clean_text(target_type, 64),
        target_id=clean_text(target_id, 64),
        outcome=outcome,
        source_ip=ctx.source_ip,
        user_agent=clean_text(ctx.user_agent, 400),
        request_id=clean_text(ctx.request_id, 64),
        details=clean_details,
        prev_hash=head.hash or chain.GENESIS_HASH,
    )
    event.hash = chain_hash(event, event.prev_hash)
    event.save(force_insert=True)
    ChainHead.objects.filter(id=1).update(seq=event.seq, hash=event.hash)
    return event


# --- checkpoints -------------------------------------------------------------------


def signing_key() -> str:
    key = getattr(settings, "AUDIT_SIGNING_KEY", "") or settings.SECRET_KEY
    return key


def write_checkpoint(*, now: datetime | None = None) -> Checkpoint | None:
    """Sign the chain's current head, after checking the events since the last signed
    checkpoint, so a signature never blesses a chain that was already broken.
    Returns None when the head has not moved or the unsigned tail does not verify."""
    from .verification import verify

    # No lock: every event up to a committed head is committed and never changes.
    head = ChainHead.objects.filter(id=1).first()
    last = Checkpoint.objects.order_by("-seq").first()
    if head is None or head.seq == 0 or (last is not None and last.seq >= head.seq):
        return None
    report = verify(start=(last.seq + 1) if last else None, end=head.seq, tail_checks=False)
    if not report.valid or report.last_seq != head.seq or report.last_hash != head.hash:
        return None
    time = now or timezone.now()
    key = signing_key()
    try:
        with transaction.atomic():
            return Checkpoint.objects.create(
                seq=head.seq,
                hash=head.hash,
                time=time,
                key_id=chain.key_id(key),
                signature=chain.sign_checkpoint(key, head.seq, head.hash, chain.iso_time(time)),
            )
    except IntegrityError:  # another worker signed the same head a moment ago
        return Checkpoint.objects.filter(seq=head.seq).first()


def covering_checkpoint() -> Checkpoint | None:
    """A checkpoint at the head (written now if needed), or the newest one there is."""
    return write_checkpoint() or Checkpoint.objects.order_by("-seq").first()


# --- verification ------------------------------------------------------------------


def run_verification(*, actor, start=None, end=None) -> Verification:
    """Walk the chain (or part of it), keep the result for the audit page, audit it.
    The walk reads outside any transaction, so writers are never held up by it."""
    from .verification import verify

    report = verify(start=start, end=end)
    _, _, actor_name = describe_actor(actor)
    with transaction.atomic():
        run = Verification.objects.create(
            actor_name=clean_text(actor_name, 150),
            valid=report.valid,
            checked=report.checked,
            first_seq=report.first_seq,
            last_seq=report.last_seq,
            first_broken_seq=report.first_broken_seq,
            reason=report.reason[:300],
            seconds=report.seconds,
            segments=[s.as_dict() for s in report.segments],
        )
        record_event(
            actor=actor,
            action="audit.verify",
            target=run,
            outcome=Outcome.SUCCESS if report.valid else Outcome.FAILURE,
            details={
                "valid": report.valid, "checked": report.checked, "first_broken_seq": report.first_broken_seq,
                "reason": report.reason, "from": _bound_text(start), "to": _bound_text(end),
            },
        )  # fmt: skip
    run.report = report
    return run


def _bound_text(value) -> str | int | None:
    return value.isoformat() if isinstance(value, datetime) else value


# --- retention ---------------------------------------------------------------------


def retention_cutoff(now: datetime | None = None) -> datetime:
    days = max(RETENTION_FLOOR_DAYS, int(getattr(settings, "AUDIT_RETENTION_DAYS", 365)))
    return (now or timezone.now()) - timedelta(days=days)


@transaction.atomic
def apply_retention(*, actor="system", now: datetime | None = None, batch: int = 100_000) -> int:
    """Delete the oldest events, only up to a signed checkpoint older than the cutoff, so
    the first remaining event still chains to a signature. Never touches anything younger
    than 180 days (PostgreSQL's trigger refuses it too). Returns how many were deleted."""
    cutoff = retention_cutoff(now)
    first = AuditEvent.objects.order_by("seq").values_list("seq", flat=True).first()
    if first is None:
        return 0
    young = (
        AuditEvent.objects.filter(time__gte=cutoff)
        .order_by("seq")
        .values_list("seq", flat=True)
        .first()
    )
    limit = min(first + batch - 1, (young - 1) if young is not None else first + batch - 1)
    anchor = (
        Checkpoint.objects.filter(seq__gte=first, seq__lte=limit, time__lt=cutoff)
        .order_by("-seq")
        .first()
    )
    if anchor is None:
        return 0
    doomed = AuditEvent.objects.filter(seq__lte=anchor.seq)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL audit.allow_retention = 'on'")
    deleted, _ = doomed.delete()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL audit.allow_retention = 'off'")
    record_event(
        actor=actor,
        action="audit.retention",
        target=anchor,
        details={
            "deleted": deleted, "from_seq": first, "through_seq": anchor.seq,
            "cutoff": cutoff.isoformat(), "anchor_hash": anchor.hash,
        },
    )  # fmt: skip
    return deleted


# --- exports -----------------------------------------------------------------------


def prepare_export(*, actor, queryset, fmt: str, filters: dict, team=None):
    """Freeze what an export will contain (every matching event up to a signed head),
    audit it, and hand back the stream's description. The event is committed before the
    first byte is sent, so an export that is cut off midway is still on record."""
    from .export import FORMATS, Export

    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    head_seq = ChainHead.objects.filter(id=1).values_list("seq", flat=True).first() or 0
    checkpoint = covering_checkpoint()
    through = checkpoint.seq if checkpoint is not None and checkpoint.seq >= head_seq else head_seq
    rows = queryset.filter(seq__lte=through)
    export = Export(
        fmt=fmt, queryset=queryset, through_seq=through, count=rows.count(), checkpoint=checkpoint,
        filters=filters, generated_at=chain.iso_time(timezone.now()),
    )  # fmt: skip
    record_event(
        actor=actor,
        action="audit.export",
        team=team,
        details={
            "format": fmt, "filters": filters, "count": export.count, "through_seq": through,
            "checkpoint_seq": checkpoint.seq if checkpoint else None,
        },
    )  # fmt: skip
    return export
