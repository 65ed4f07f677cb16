"""The audit log's verbs. Every service that changes state calls ``record_event`` inside
its own transaction, so a failed audit write rolls the change back."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from console import request_context as context

from . import chain, headlog, keys, merkle, publish, sealer, signing, stream
from .models import (
    ActorType,
    AuditEvent,
    ChainHead,
    Checkpoint,
    Outcome,
    RefusalTally,
    Verification,
)

SECRET_WORDS = (
    "password", "passwd", "passphrase", "token", "secret", "key", "authorization", "cookie",
    "credential", "session", "signature", "private",
)  # fmt: skip
REDACTED = "[redacted]"
# Values that are secrets whatever their key: our API tokens, agent tokens, bearer headers.
_SECRET_VALUE = re.compile(r"(gpc_|gpa_|Bearer\s+|Token\s+)[A-Za-z0-9_\-.=]{8,}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

RETENTION_FLOOR_DAYS = 180
logger = logging.getLogger(__name__)


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


def _scrub_text(value: str, secrets: tuple[str, ...]) -> str:
    value = _plain(value)
    if any(secret in value for secret in secrets):
        return REDACTED
    return _SECRET_VALUE.sub(lambda m: m.group(1) + REDACTED, value)


def scrub(details: Any, secrets: tuple[str, ...] | None = None) -> Any:
    """Details as the database will keep them: secrets redacted by key name or by shape,
    at any depth; values turned into plain JSON that survives a jsonb round trip."""
    if secrets is None:
        secrets = _secret_values()  # once per call, not once per value
    if isinstance(details, dict):
        return {
            _scrub_text(str(k), secrets): (REDACTED if _is_secret_key(str(k)) else scrub(v, secrets))
            for k, v in details.items()
        }
    if isinstance(details, list | tuple | set | frozenset):
        return [scrub(v, secrets) for v in details]
    if isinstance(details, bool) or details is None or isinstance(details, int):
        return details
    if isinstance(details, float):
        if not math.isfinite(details):
            return str(details)
        # jsonb prints 1e+20 as 100000000000000000000, which reads back as an int.
        return int(details) if details.is_integer() and abs(details) >= 1e15 else details
    if isinstance(details, datetime):
        return details.isoformat()
    return _scrub_text(str(details), secrets)


def clean_text(value: str, limit: int) -> str:
    """One-line fields (names, ids, user agent): control characters become visible
    ``\\xNN`` escapes, so no CR/LF or NUL ever reaches a log line, page or CSV cell."""
    if type(value) is str and value.isascii() and value.isprintable():
        return value[:limit]  # the usual case: nothing to escape
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
        event.source_ip, event.user_agent, event.request_id, event.actor_role, event.target_name,
        event.details,
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


def name_of(target) -> str:
    """What people call a target: its name, a user's username, or its text."""
    if hasattr(target, "get_username"):
        return target.get_username()
    name = getattr(target, "name", None)
    return str(name) if name else str(target)


def role_of(actor, team_id: int | None) -> str:
    """The actor's role in the team now (so, in the record, at the time)."""
    from console.models import Membership

    if team_id is not None:
        role = (
            Membership.objects.filter(user_id=actor.pk, team_id=team_id)
            .values_list("role", flat=True)
            .first()
        )
        if role:
            return role
    return "operator" if getattr(actor, "is_staff", False) else ""


def _lock_head() -> ChainHead:
    """The chain head, locked until this transaction ends (waiting for it if need be)."""
    head = ChainHead.objects.select_for_update().filter(id=1).first()
    if head is None:  # a flushed test database; the unique id makes racing creators wait
        ChainHead.objects.get_or_create(id=1)
        head = ChainHead.objects.select_for_update().get(id=1)
    return head


def _try_head() -> tuple[int, str, bool]:
    """(seq, hash, records pending) with the chain head locked until this transaction
    ends, where the database has no ``audit_append``. SQLite serialises writers anyway
    (IMMEDIATE transactions), so there the head is always free."""
    head = _lock_head()
    return head.seq, head.hash, _any_pending()


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
    target_name: str = "",
) -> AuditEvent:
    """Append one event. When the chain head is free the event is sealed at once (its
    ``seq`` and ``hash`` are set, and the head stays locked until the caller commits);
    when another transaction holds the head the event is written *pending* and sealed
    right after the caller commits, by this process or by the head's holder, so no
    writer ever waits for another's transaction. On PostgreSQL all of that is one
    statement (``audit_append``, which also looks up the actor's role)."""
    if outcome not in Outcome.values:
        raise ValueError(f"outcome must be one of {', '.join(Outcome.values)}, not {outcome!r}")
    ctx = context.current()
    actor_type, actor_id, actor_name = describe_actor(actor)
    if target is not None:
        target_type = target_type or target._meta.label_lower
        target_id = target_id or str(target.pk)
        target_name = target_name or name_of(target)
    team_id = getattr(team, "pk", team)
    # The text the database keeps and the chain hashes, byte for byte.
    details_text = chain.canonical_details(scrub(details) if details else {})
    event = AuditEvent(
        time=context.recorded_time() or timezone.now(),
        actor_type=actor_type,
        actor_id=clean_text(actor_id, 64),
        actor_name=clean_text(actor_name, 150),
        team_id=team_id,
        action=clean_text(action, 64),
        target_type=clean_text(target_type, 64),
        target_id=clean_text(target_id, 64),
        target_name=clean_text(target_name, 150),
        outcome=outcome,
        source_ip=ctx.source_ip,
        user_agent=clean_text(ctx.user_agent, 400),
        request_id=clean_text(ctx.request_id, 64),
        details=json.loads(details_text) if details else {},
    )
    held = _held.get()
    if held is not None:
        held.append((event, details_text, actor if actor_type == ActorType.USER else None))
        return event
    _store(event, details_text, actor if actor_type == ActorType.USER else None)
    return event


def _store(event: AuditEvent, details_text: str, user) -> None:
    if connection.vendor == "postgresql":
        _append(event, details_text, user)
    else:
        with transaction.atomic(savepoint=False):
            event.actor_role = role_of(user, event.team_id) if user is not None else ""
            _append_python(event)


# Demo seeding writes each app's history in turn (the fleet's months, then billing's,
# then the last hour's jobs); the chain must still read oldest first.
_held: ContextVar[list | None] = ContextVar("audit_held", default=None)


@contextmanager
def in_time_order() -> Iterator[None]:
    """Events recorded inside are held, then appended oldest first (ties in the order
    they were recorded) when the block ends without an error; call it inside the
    transaction that makes the changes, so they and their events commit together.
    Demo seeding only: everything else appends as it happens."""
    held: list = []
    token = _held.set(held)
    try:
        yield
    finally:
        _held.reset(token)
    for _, (event, details_text, user) in sorted(enumerate(held), key=lambda item: (item[1][0].time, item[0])):
        _store(event, details_text, user)


def _append_python(event: AuditEvent) -> None:
    """The append where the database has no ``audit_append`` (SQLite, whose IMMEDIATE
    transactions serialise writers anyway, so the head is always free)."""
    head_seq, prev, pending = _try_head()
    seq = head_seq
    if pending:  # others' records, committed while another held the head: first
        seq, prev = _seal_batch(seq, prev)
    event.seq, event.prev_hash = seq + 1, prev
    event.hash = chain_hash(event, prev)
    event.save(force_insert=True)
    _move_head(head_seq, event.seq, event.hash)


_APPEND_SQL = None


def _append_sql() -> str:
    """``audit_append`` with the actor's role looked up in the same statement: their
    membership's role in the event's team, else "operator" for staff, else empty."""
    global _APPEND_SQL
    if _APPEND_SQL is None:
        from console.models import Membership

        role = (
            f"COALESCE(NULLIF((SELECT m.role FROM {Membership._meta.db_table} m "
            "WHERE m.user_id = %s AND m.team_id = %s), ''), %s)"
        )
        _APPEND_SQL = (
            "SELECT o_id, o_seq, o_prev, o_hash, o_head, r.role FROM (SELECT "
            f"{role} AS role) r, LATERAL audit_append(%s::timestamptz, %s, %s, %s, %s::bigint, "
            "r.role::text, %s, %s, %s, %s, %s, %s::inet, %s, %s, %s)"
        )
    return _APPEND_SQL


def _append(event: AuditEvent, details_text: str, user) -> None:
    """The append on PostgreSQL: one statement, and after the commit one more look for
    records left waiting (``seal_pending``)."""
    if user is not None:
        lookup = [user.pk, event.team_id, "operator" if getattr(user, "is_staff", False) else ""]
    else:
        lookup = [None, None, ""]
    params = [
        *lookup, event.time, event.actor_type, event.actor_id, event.actor_name, event.team_id,
        event.action, event.target_type, event.target_id, event.target_name, event.outcome,
        event.source_ip, event.user_agent, event.request_id, details_text,
    ]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(_append_sql(), params)
        event.id, event.seq, prev, digest, head_seq, event.actor_role = cursor.fetchone()
    event.prev_hash, event.hash = prev or "", digest or ""
    event._state.adding, event._state.db = False, connection.alias
    if event.seq is not None:
        _after_move(head_seq, event.seq)
    # Whoever found the head held left their records pending and counts on its holder to
    # look again once it lets go: this is that look (one round trip when nothing waits),
    # made at once or, with AUDIT_SEAL_DELAY_MS, by this process's sealer thread a moment
    # later for every commit meanwhile. Once per transaction; outside one, the statement
    # has committed and it runs now.
    look = sealer.sealer.request if sealer.delay_seconds() else seal_pending
    if not any(hook[1] == look for hook in connection.run_on_commit):
        transaction.on_commit(look, robust=True)


def _move_head(old_seq: int, new_seq: int, new_hash: str) -> None:
    with connection.cursor() as cursor:  # raw: this runs once per append
        cursor.execute("UPDATE audit_chainhead SET seq = %s, hash = %s WHERE id = 1", [new_seq, new_hash])
    _after_move(old_seq, new_seq)


def _after_move(old_seq: int, new_seq: int) -> None:
    # The head that pins this batch outside the database, once it commits: by this
    # process's sealer thread (which publishes after each look, so the writer does not
    # wait for the fsync and commits meanwhile share one head), or by the committing
    # thread itself (AUDIT_PUBLISH_IN_THREAD off). Once per transaction.
    publish_soon = sealer.sealer.request if sealer.delay_seconds() or publish.in_thread() else publish.request
    if not any(hook[1] == publish_soon for hook in connection.run_on_commit):
        transaction.on_commit(publish_soon, robust=True)
    every = getattr(settings, "AUDIT_CHECKPOINT_EVENTS", 1000)
    if new_seq // every != old_seq // every:
        # Besides the minute tick: no more than that many events ever wait unsigned.
        transaction.on_commit(_checkpoint_soon, robust=True)


_PENDING_SQL = (
    f"SELECT id, {stream.TIME_SQL}, actor_type, actor_id, actor_name, team_id, action, "
    "target_type, target_id, outcome, host(source_ip), user_agent, request_id, actor_role, "
    "target_name, details::text FROM audit_auditevent WHERE seq IS NULL ORDER BY id LIMIT %s"
)


def _pending_rows(limit: int) -> list[tuple]:
    """Pending records in id order as (id, fields in the form the chain hashes)."""
    pending = AuditEvent.objects.filter(seq__isnull=True).order_by("id")[:limit]
    return [(e.id, *chain_fields(e)) for e in pending]


def _seal_batch(seq: int, prev: str, limit: int = 10_000) -> tuple[int, str]:
    """Give the pending records visible now the next places after #seq, in id order.
    The caller holds the chain head; returns the new (seq, hash) of the head, which the
    caller moves (``_move_head``) after adding its own record, or at once. (On
    PostgreSQL the database does this itself: ``audit_seal_locked``.)"""
    rows = _pending_rows(limit)
    link, canonical_text = chain.link, chain.canonical_text
    for rid, *fields in rows:
        seq += 1
        digest = link(canonical_text(seq, *fields), prev)
        AuditEvent.objects.filter(id=rid).update(seq=seq, prev_hash=prev, hash=digest)
        prev = digest
    return seq, prev


def _any_pending() -> bool:
    with connection.cursor() as cursor:  # raw: this runs after every audited commit
        cursor.execute("SELECT EXISTS (SELECT 1 FROM audit_auditevent WHERE seq IS NULL)")
        return cursor.fetchone()[0]


def seal_pending(*, batch: int = 10_000) -> int:
    """Seal every pending record committed so far, in batches, unless another
    transaction holds the chain head (it looks again when it lets go). Returns how many
    it sealed. Runs after each audited transaction on PostgreSQL and before each tree
    head is signed."""
    sealed = 0
    if connection.vendor == "postgresql":
        # One statement, its own transaction outside any other (it holds the head only
        # while it seals), so the next look comes after letting go.
        while True:
            with connection.cursor() as cursor:
                cursor.execute("SELECT o_old, o_new FROM audit_seal(%s)", [batch])
                old, new = cursor.fetchone()
            if old is None or new is None or new == old:
                return sealed
            _after_move(old, new)
            sealed += new - old
    # A plain look first: taking the head's row lock writes (and commits) even when
    # there is nothing to seal.
    while _any_pending():
        with transaction.atomic():
            head = _try_head()
            if not head[2]:
                return sealed
            seq, prev = _seal_batch(head[0], head[1], batch)
            if seq == head[0]:
                return sealed
            _move_head(head[0], seq, prev)
        sealed += seq - head[0]
    return sealed


def chain_fields(event: AuditEvent) -> tuple:
    """An event's hashed fields after ``seq``, as ``chain.canonical_text`` takes them."""
    return (
        chain.iso_time(event.time), event.actor_type, event.actor_id, event.actor_name, event.team_id,
        event.action, event.target_type, event.target_id, event.outcome, event.source_ip,
        event.user_agent, event.request_id, event.actor_role, event.target_name,
        chain.canonical_details(event.details),
    )  # fmt: skip


def _checkpoint_soon() -> None:
    from .tasks import write_checkpoint

    write_checkpoint.delay()


# --- checkpoints -------------------------------------------------------------------


_LEAVES_SQL = (
    "SELECT string_agg(sha256('\\x00'::bytea || decode(hash, 'hex')), ''::bytea ORDER BY seq) "
    "FROM audit_auditevent WHERE seq >= %s AND seq <= %s"
)


def leaf_blob(first: int, last: int) -> bytes:
    """The Merkle leaves of events #first..#last back to back (32 bytes each, the leaf
    hash of each chain hash); on PostgreSQL hashed by the server in one aggregate."""
    if last < first:
        return b""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_LEAVES_SQL, [first, last])
            blob = bytes(cursor.fetchone()[0] or b"")
    else:
        hashes = AuditEvent.objects.filter(seq__gte=first, seq__lte=last).order_by("seq")
        blob = b"".join(
            merkle.event_leaf(h) for h in hashes.values_list("hash", flat=True).iterator(10_000)
        )
    if len(blob) != 32 * (last - first + 1):
        raise ValueError(f"events #{first}..#{last}: {len(blob) // 32} found, the log has a gap")
    return blob


def leaf_hashes(first: int, last: int) -> list[bytes]:
    blob = leaf_blob(first, last)
    return [blob[i : i + 32] for i in range(0, len(blob), 32)]


def sign_head(
    *, seq: int, head_hash: str, frontier: list[bytes], time: datetime, recheck_key: bool = True
) -> Checkpoint:
    """A Checkpoint (unsaved) for the tree of ``seq`` leaves tiled by ``frontier``."""
    signer = keys.signer(recheck=recheck_key)
    root = merkle.frontier_root(frontier).hex()
    message = signing.head_message(seq, root, head_hash, chain.iso_time(time))
    return Checkpoint(
        seq=seq, hash=head_hash, root=root, frontier=[f.hex() for f in frontier], time=time,
        key_id=signer.fingerprint, signature=signing.sign(signer.private, message),
    )  # fmt: skip


def write_checkpoint(*, now: datetime | None = None) -> Checkpoint | None:
    """Sign the tree head, after checking the events since the last signed head, so a
    signature never blesses a log that was already broken. Returns None when the head
    has not moved or the unsigned tail does not verify (then ``audit.tamper`` is
    recorded, once per break, and logged)."""
    from .verification import verify

    seal_pending()
    # No lock: every event up to a committed head is committed and never changes.
    head = ChainHead.objects.filter(id=1).first()
    last = Checkpoint.objects.order_by("-seq").first()
    if last is not None and (head is None or head.seq < last.seq):
        _tamper_found(
            (head.seq if head else 0) + 1,
            f"missing tail: tree head #{last.seq} was signed but the chain head is #{head.seq if head else 0}",
        )
        return None
    if head is None or head.seq == 0 or (last is not None and last.seq >= head.seq):
        return None
    report = verify(start=(last.seq + 1) if last else None, end=head.seq, tail_checks=False)
    if not report.valid or report.last_seq != head.seq or report.last_hash != head.hash:
        _tamper_found(
            report.first_broken_seq, report.reason or "the chain head does not match its event"
        )
        return None
    try:
        leaves = leaf_hashes((last.seq + 1) if last else 1, head.seq)
    except ValueError as exc:
        _tamper_found((last.seq + 1) if last else 1, f"gap: {exc}")
        return None
    base, base_frontier = (last.seq, last.frontier_bytes()) if last else (0, [])
    if not _matches_published(base, base_frontier, leaves, head.seq):
        return None
    frontier, size = merkle.extend(base_frontier, base, leaves)
    if size != head.seq:
        _tamper_found(
            size + 1, f"gap: the log holds {size} events up to the chain head #{head.seq}"
        )
        return None
    checkpoint = sign_head(
        seq=head.seq, head_hash=head.hash, frontier=frontier, time=now or timezone.now()
    )
    try:
        with transaction.atomic():
            checkpoint.save(force_insert=True)
            return checkpoint
    except IntegrityError:  # another worker signed the same head a moment ago
        return Checkpoint.objects.filter(seq=head.seq).first()


def _matches_published(base: int, frontier: list[bytes], leaves: list[bytes], head_seq: int) -> bool:
    """Before a checkpoint signs #base+1..#head_seq: the newest heads published outside the
    database must agree (none beyond the chain head; the newest one in that span has the
    root these leaves give at its size), so a rewritten or rolled back tail is reported
    (``audit.tamper``), not signed."""
    from .verification import _head_signed

    path = publish.heads_path()
    heads = headlog.newest(path) if path else []
    if not heads:
        return True
    trusted = keys.public_keys()
    heads = [h for h in heads if _head_signed(h, trusted)]
    beyond = max((h["tree_size"] for h in heads if h["tree_size"] > head_seq), default=None)
    if beyond is not None and ChainHead.objects.values_list("seq", flat=True).get(id=1) < beyond:
        # (re-read: the head may have moved, and been published, since it was read)
        _tamper_found(head_seq + 1, f"rollback: tree head #{beyond} was published but the chain head is #{head_seq}")
        return False
    within = [h for h in heads if base < h["tree_size"] <= head_seq]
    if not within:
        return True
    newest = max(within, key=lambda h: h["tree_size"])
    size = newest["tree_size"]
    edge, _ = merkle.extend(frontier, base, leaves[: size - base])
    if merkle.frontier_root(edge).hex() != newest["root"]:
        _tamper_found(
            base + 1,
            f"rewritten: events #{base + 1}..#{size} do not match the tree head published at {newest['time']}",
        )
        return False
    return True


def _tamper_found(seq, reason: str) -> None:
    logger.error("audit log does not verify at #%s: %s", seq, reason)
    latest = AuditEvent.objects.filter(action="audit.tamper").order_by("-seq").first()
    if latest is not None and latest.details.get("first_broken_seq") == seq:
        return
    record_event(
        actor="system", action="audit.tamper", outcome=Outcome.FAILURE,
        details={"first_broken_seq": seq, "reason": str(reason)[:300]},
    )  # fmt: skip


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


class ArchiveError(Exception):
    pass


def write_archive(events, head: Checkpoint) -> Path:
    """Write ``events`` (up to ``head``) as a JSON Lines bundle into AUDIT_ARCHIVE_DIR and
    verify it as an auditor would, with the public keys alone, before anything is dropped."""
    from . import export as bundle
    from .offline_verify import verify_bundle

    records, nodes = proof_material(events, head)
    manifest = bundle.manifest(
        generated_at=chain.iso_time(timezone.now()), filters={"archive": True},
        head=head.as_dict(), keys=[k.as_dict() for k in keys.public_keys().values()],
        records=records, nodes=nodes,
    )  # fmt: skip
    archive = bundle.Export(
        fmt="jsonl",
        queryset=events,
        through_seq=head.seq,
        count=manifest["count"],
        manifest=manifest,
    )
    folder = Path(settings.AUDIT_ARCHIVE_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    first = records[0][0] if records else 1
    path = folder / f"audit-archive-{first}-{head.seq}.jsonl"
    partial = path.with_suffix(".jsonl.partial")
    with open(partial, "wb") as handle:
        for chunk in archive.chunks():
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())
    result = verify_bundle(str(partial), pin=head.key_id)
    if not result.ok or result.events != manifest["count"]:
        raise ArchiveError(f"archive {partial} does not verify: {'; '.join(result.problems[:3])}")
    os.replace(partial, path)
    return path


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@transaction.atomic
def apply_retention(*, actor="system", now: datetime | None = None, batch: int = 100_000) -> int:
    """Delete the oldest events, only up to a signed checkpoint older than the cutoff, so
    the first remaining event still chains to a signature, and only once they are in an
    archive bundle that verifies offline. Never touches anything younger than 180 days
    (PostgreSQL's trigger refuses it too). Returns how many were deleted."""
    cutoff = retention_cutoff(now)
    first = AuditEvent.objects.filter(seq__isnull=False).order_by("seq").values_list("seq", flat=True).first()
    if first is None:
        return 0
    young = (
        AuditEvent.objects.filter(time__gte=cutoff, seq__isnull=False)
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
    archive = write_archive(doomed, anchor)  # raises (and nothing is deleted) if it cannot
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
            "archive": archive.name, "archive_sha256": _sha256_file(archive),
        },
    )  # fmt: skip
    return deleted


# --- exports -----------------------------------------------------------------------


_tree_lock = threading.Lock()
_tree: merkle.Tree | None = None


def load_tree(size: int, root: str) -> merkle.Tree:
    """The Merkle tree of at least the first ``size`` events, in memory, for proofs (it
    answers for any smaller size too), checked against the signed ``root`` of that size.
    Events that retention retired are stood for by the compact range of the signed head
    at the edge. Kept between calls and extended with new leaves only (about 64 bytes a
    leaf); rebuilt when it no longer matches the signed root."""
    global _tree
    first = AuditEvent.objects.filter(seq__isnull=False).order_by("seq").values_list("seq", flat=True).first() or 1
    base = min(first - 1, size)
    with _tree_lock:
        for fresh in (False, True):
            tree = _tree
            if fresh or tree is None or tree.base != base or tree.size > size + 100_000:
                tree = merkle.Tree(base=base, frontier=_frontier_at(base, first))
            if tree.size < size:
                tree.extend(leaf_blob(tree.size + 1, size))
            _tree = tree
            if tree.root(size).hex() == root:
                return tree
        _tree = None
    raise ValueError(f"the events do not match the signed tree head #{size} (verify the log)")


def _frontier_at(base: int, first: int) -> list[bytes]:
    if not base:
        return []
    anchor = Checkpoint.objects.filter(seq=base).first()
    if anchor is None:
        raise ValueError(f"events before #{first} are gone and no signed head stands for them")
    return anchor.frontier_bytes()


def _rows(queryset) -> list[tuple]:
    """All rows of a values_list queryset, fetched without building one object per row."""
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def proof_material(queryset, checkpoint: Checkpoint | None) -> tuple[list | None, list]:
    """The (seq, chain hash) of every event of ``queryset`` under the signed head, and
    the tree nodes that, with those, rebuild each one's inclusion proof. (None, []) when
    the queryset is the whole log up to the head: its records are the tree."""
    if checkpoint is None:
        return [], []
    covered = queryset.filter(seq__lte=checkpoint.seq)
    if covered.count() == checkpoint.seq and covered.filter(seq=1).exists():
        return None, []
    records = _rows(covered.order_by("seq").values_list("seq", "hash"))
    if not records:
        return records, []
    tree = load_tree(checkpoint.seq, checkpoint.root)
    with _tree_lock:
        nodes = merkle.covering_nodes([seq - 1 for seq, _ in records], checkpoint.seq, tree.hash)
    return records, nodes


def consistency(*, first: int, second: int | None = None) -> dict:
    """Two signed tree heads and the proof that the later extends the earlier."""
    heads = Checkpoint.objects.order_by("-seq")
    later = heads.filter(seq=second).first() if second is not None else heads.first()
    earlier = heads.filter(seq=first).first()
    if earlier is None or later is None:
        missing = first if earlier is None else second
        raise ValueError(f"no signed tree head of size {missing}")
    if earlier.seq > later.seq:
        raise ValueError("'first' must not be larger than 'second'")
    tree = load_tree(later.seq, later.root)
    with _tree_lock:
        proof = tree.consistency(earlier.seq, later.seq)
    return {
        "first": earlier.as_dict(), "second": later.as_dict(), "proof": [p.hex() for p in proof],
        "public_keys": [k.as_dict() for k in keys.public_keys().values()],
    }  # fmt: skip


def prepare_export(*, actor, queryset, fmt: str, filters: dict, team=None):
    """Freeze what an export will contain (every matching event up to a tree head signed
    now), gather its proofs, audit it, and hand back the stream's description. The event
    is committed before the first byte is sent, so an export cut off midway is on record."""
    from . import export as bundle

    if fmt not in bundle.FORMATS:
        raise ValueError(f"format must be one of {', '.join(bundle.FORMATS)}, not {fmt!r}")
    checkpoint = covering_checkpoint()
    through = checkpoint.seq if checkpoint is not None else 0
    records, nodes = proof_material(queryset, checkpoint)
    manifest = bundle.manifest(
        generated_at=chain.iso_time(timezone.now()), filters=filters,
        head=checkpoint.as_dict() if checkpoint else None,
        keys=[k.as_dict() for k in keys.public_keys().values()], records=records, nodes=nodes,
    )  # fmt: skip
    export = bundle.Export(
        fmt=fmt, queryset=queryset, through_seq=through, count=manifest["count"], manifest=manifest
    )
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


# --- repeated anonymous refusals -------------------------------------------------------


def record_refusal(*, action: str, details: dict | None = None, now: datetime | None = None) -> None:
    """Count an anonymous refusal against this request's source address and minute; no
    chain row, no chain lock. ``flush_refusals`` writes each finished minute as one
    event with the count (details of the minute's first refusal)."""
    now = now or timezone.now()
    minute = now.replace(second=0, microsecond=0)
    key = {"minute": minute, "action": clean_text(action, 64), "source_ip": context.current().source_ip or ""}
    if RefusalTally.objects.filter(**key).update(count=F("count") + 1):
        return
    try:
        with transaction.atomic():
            RefusalTally.objects.create(**key, count=1, user_agent=clean_text(context.current().user_agent, 400),
                                        details=json.loads(json.dumps(scrub(details or {}))))
    except IntegrityError:  # another worker counted this minute's first one meanwhile
        RefusalTally.objects.filter(**key).update(count=F("count") + 1)


def flush_refusals(*, now: datetime | None = None) -> int:
    """One ``outcome=denied`` event per counted (action, source, minute) that has ended;
    returns how many were written."""
    current = (now or timezone.now()).replace(second=0, microsecond=0)
    written = 0
    while True:
        with transaction.atomic():
            tally = (RefusalTally.objects.select_for_update(skip_locked=True)
                     .filter(minute__lt=current).order_by("minute", "id").first())
            if tally is None:
                return written
            source = context.RequestContext(source_ip=tally.source_ip or None, user_agent=tally.user_agent)
            with context.bound(source):
                record_event(
                    actor="agent" if tally.action.startswith("agent.") else AnonymousUser(),
                    action=tally.action, outcome=Outcome.DENIED,
                    details={**tally.details, "count": tally.count, "minute": tally.minute.isoformat()},
                )
            tally.delete()
            written += 1
