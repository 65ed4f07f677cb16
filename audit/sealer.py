"""Sealing: pending records given their places in the chain (``seal_pending``), the
chain head moved, and the look for waiting records after a commit, a moment later and
from one thread per process, so that an audited append costs one statement.

``record_event`` owes one look for pending records after each audited commit (see
``seal_pending``: a holder of the chain head looks once it lets go, a writer
that found the head held looks after its own commit, so nothing is left waiting). With
``AUDIT_SEAL_DELAY_MS`` = 0 (the default) the look is made at once, by the committing
thread: one more round trip per audited transaction. With a delay, the commit only wakes
this process's sealer thread, which waits that long (more commits gather meanwhile) and
makes one look for all of them. Every look still comes after the commit that asked for
it, so the rule holds; a pending record is sealed within the delay plus one sealing.
After each look it publishes the signed tree head of what is sealed (``publish``).
At exit the thread is stopped and a last look is made.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import connection, transaction

from . import chain, publish, stream
from .hashing import chain_fields
from .models import (
    AuditEvent,
    ChainHead,
)

logger = logging.getLogger(__name__)


def delay_seconds() -> float:
    return max(0, settings.AUDIT_SEAL_DELAY_MS) / 1000


# Set on a thread while it looks and publishes for the sealer (the sealer thread, or
# stop()'s last look): the head it moves asks for no further look.
_looking = threading.local()


class Sealer:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def request(self) -> None:
        """Ask for a look after this (committed) moment."""
        with self._lock:
            if getattr(_looking, "now", False):
                return  # asked by a sealer's own look (sealing moves the head): it publishes next
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid, self._stop = os.getpid(), threading.Event()
                self._wake = threading.Event()
                self._thread = threading.Thread(target=self._run, name="audit-sealer", daemon=True)
                self._thread.start()
            self._wake.set()

    def _run(self) -> None:
        wake, stop = self._wake, self._stop
        _looking.now = True
        try:
            # stop() sets ``stop`` before it wakes the thread, and a wake-up may be
            # cleared below after a look: so ``stop`` is checked before every wait.
            while not stop.is_set():
                wake.wait()
                if stop.is_set():
                    return
                time.sleep(delay_seconds())
                # Requests made before this point are covered by the look below; later
                # ones set the flag again and get a look of their own.
                wake.clear()
                for attempt in (1, 2):
                    try:
                        if delay_seconds():  # without a delay each committer looked itself
                            seal_pending()  # on this thread's own connection, kept between looks
                            if _any_pending():  # the head was held, or more came: look again
                                wake.set()
                        publish.request()  # the signed head of what this look sealed, outside the database
                        break
                    except Exception:  # e.g. the server dropped an idle connection
                        connection.close()  # the next attempt connects afresh
                        if attempt == 2:  # the next request looks again; each signing seals too
                            logger.exception("audit: sealing pending records failed")
        finally:
            connection.close()

    def stop(self) -> None:
        """Stop the thread (its connection closed), then look once more from here."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
            self._wake.set()
        if thread is not None and thread.is_alive():
            thread.join(10)
        _looking.now = True
        try:
            seal_pending()
            publish.request()
        finally:
            _looking.now = False


sealer = Sealer()


def _at_exit() -> None:
    if sealer._thread is not None and sealer._pid == os.getpid():
        try:
            sealer.stop()
        except Exception:  # the interpreter is going away; the next signing seals
            logger.exception("audit: last sealing at exit failed")


atexit.register(_at_exit)


def _lock_head() -> ChainHead:
    """The chain head, locked until this transaction ends (waiting for it if need be)."""
    head = ChainHead.objects.select_for_update().filter(id=1).first()
    if head is None:  # a flushed test database; the unique id makes racing creators wait
        ChainHead.objects.get_or_create(id=1)
        head = ChainHead.objects.select_for_update().get(id=1)
    return head


def try_head() -> tuple[int, str, bool]:
    """(seq, hash, records pending) with the chain head locked until this transaction
    ends, where the database has no ``audit_append``. SQLite serialises writers anyway
    (IMMEDIATE transactions), so there the head is always free."""
    head = _lock_head()
    return head.seq, head.hash, _any_pending()


def move_head(old_seq: int, new_seq: int, new_hash: str) -> None:
    with connection.cursor() as cursor:  # raw: this runs once per append
        cursor.execute("UPDATE audit_chainhead SET seq = %s, hash = %s WHERE id = 1", [new_seq, new_hash])
    after_move(old_seq, new_seq)


def after_move(old_seq: int, new_seq: int) -> None:
    # The head that pins this batch outside the database, once it commits: by this
    # process's sealer thread (which publishes after each look, so the writer does not
    # wait for the fsync and commits meanwhile share one head), or by the committing
    # thread itself (AUDIT_PUBLISH_IN_THREAD off). Once per transaction.
    publish_soon = sealer.request if delay_seconds() or publish.in_thread() else publish.request
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


def seal_batch(seq: int, prev: str, limit: int = 10_000) -> tuple[int, str]:
    """Give the pending records visible now the next places after #seq, in id order.
    The caller holds the chain head; returns the new (seq, hash) of the head, which the
    caller moves (``move_head``) after adding its own record, or at once. (On
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
            after_move(old, new)
            sealed += new - old
    # A plain look first: taking the head's row lock writes (and commits) even when
    # there is nothing to seal.
    while _any_pending():
        with transaction.atomic():
            head = try_head()
            if not head[2]:
                return sealed
            seq, prev = seal_batch(head[0], head[1], batch)
            if seq == head[0]:
                return sealed
            move_head(head[0], seq, prev)
        sealed += seq - head[0]
    return sealed


# Signing is a task, and the task's module imports this one: AuditConfig.ready
# registers it here.
_checkpoint_due: Callable[[], object] = lambda: None  # noqa: E731


def when_checkpoint_due(run: Callable[[], object]) -> None:
    """``run()`` asks for a checkpoint soon."""
    global _checkpoint_due
    _checkpoint_due = run


def _checkpoint_soon() -> None:
    _checkpoint_due()
