"""Recording audit events. Every service that changes state calls ``record_event``
inside its own transaction, so a failed audit write rolls the change back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import psycopg
from django.db import connection, transaction
from django.utils import timezone

from console import request_context as context

from . import chain, sealer
from .hashing import chain_hash
from .models import (
    ActorType,
    AuditEvent,
    Outcome,
)
from .redaction import clean_text, scrub
from .sealer import after_move, move_head, seal_batch, seal_pending, try_head


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


_OUTCOMES = frozenset(Outcome.values)


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
    statement (``audit_append``, which also looks up the actor's role). With
    ``AUDIT_SEAL_DELAY_MS`` set, on PostgreSQL, the writer leaves the head alone: every
    event is written pending (one ``INSERT``) and the sealer threads seal them in
    batches, within that delay plus one sealing."""
    if outcome not in _OUTCOMES:
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
    head_seq, prev, pending = try_head()
    seq = head_seq
    if pending:  # others' records, committed while another held the head: first
        seq, prev = seal_batch(seq, prev)
    event.seq, event.prev_hash = seq + 1, prev
    event.hash = chain_hash(event, prev)
    event.save(force_insert=True)
    move_head(head_seq, event.seq, event.hash)


_SQL: dict[str, str] = {}


def _role_sql() -> str:
    """The actor's role, looked up in the append's own statement: their membership's
    role in the event's team, else "operator" for staff, else empty."""
    from console.models import Membership

    return (
        f"COALESCE(NULLIF((SELECT m.role FROM {Membership._meta.db_table} m "
        "WHERE m.user_id = %s AND m.team_id = %s), ''), %s)"
    )


def _append_sql(queued: bool) -> str:
    """``audit_append`` (the head taken when free), or with ``queued`` a plain
    ``INSERT`` of the pending record; the same parameters, the same columns back."""
    key = "queued" if queued else "append"
    if key not in _SQL:
        values = "%s::timestamptz, %s, %s, %s, %s::bigint, r.role::text, %s, %s, %s, %s, %s, %s::inet, %s, %s, %s"
        _SQL["append"] = (
            f"SELECT o_id, o_seq, o_prev, o_hash, o_head, r.role FROM (SELECT {_role_sql()} AS role) r, "
            f"LATERAL audit_append({values})"
        )
        _SQL["queued"] = (
            f"WITH r AS (SELECT {_role_sql()} AS role) "
            "INSERT INTO audit_auditevent (time, actor_type, actor_id, actor_name, team_id, actor_role, "
            "action, target_type, target_id, target_name, outcome, source_ip, user_agent, request_id, "
            f"details, seq, prev_hash, hash) SELECT {values}::json, NULL, '', '' FROM r "
            "RETURNING id, NULL::bigint, NULL::text, NULL::text, NULL::bigint, actor_role"
        )
    return _SQL[key]


def _run_prepared(sql: str, params: list) -> tuple:
    """One row of ``sql`` run as a prepared statement on this thread's connection.

    Django's PostgreSQL cursors bind parameters on the client: every append would send
    its statement as new text, for PostgreSQL to parse and plan again, after Python has
    quoted each value into it. A server-side binding cursor on the same connection (the
    same transaction) sends the values apart, and psycopg prepares the statement once
    per connection and reuses it. Errors still come out as Django's."""
    connection.ensure_connection()
    connection.validate_no_broken_transaction()  # as Django's own cursors check first
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchone()


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
    delayed = bool(sealer.delay_seconds())
    event.id, event.seq, prev, digest, head_seq, event.actor_role = _run_prepared(_append_sql(queued=delayed), params)
    event.prev_hash, event.hash = prev or "", digest or ""
    event._state.adding, event._state.db = False, connection.alias
    if event.seq is not None:
        after_move(head_seq, event.seq)
    # Whoever found the head held (or, with AUDIT_SEAL_DELAY_MS, never tried it) left
    # their records pending and counts on a look after their commit: made at once by
    # this thread (one round trip when nothing waits), or by this process's sealer
    # thread a moment later for every commit meanwhile. Once per transaction; outside
    # one, the statement has committed and it runs now.
    look = sealer.sealer.request if delayed else seal_pending
    if not any(hook[1] == look for hook in connection.run_on_commit):
        transaction.on_commit(look, robust=True)
