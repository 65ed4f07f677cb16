"""A writer never waits for another's transaction: when the chain head is held, its event
is written pending and sealed (given its place in the chain) once someone holds the head."""

import threading
from contextlib import contextmanager

import pytest
from audit_support import on_postgres
from django.db import DatabaseError, connection, transaction

from audit import checkpoints, recording, sealer
from audit.models import AuditEvent, ChainHead
from audit.verification import verify


@contextmanager
def head_held():
    """Another transaction appends an event and keeps the chain head until the block ends."""
    ChainHead.objects.get_or_create(id=1)  # as migrated (transactional tests flush it)
    holding, release = threading.Event(), threading.Event()

    def holder():
        try:
            with transaction.atomic():
                recording.record_event(actor="holder", action="test.hold")
                holding.set()
                release.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=holder)
    thread.start()
    assert holding.wait(10)
    try:
        yield
    finally:
        release.set()
        thread.join(10)


def seqs(action):
    return list(AuditEvent.objects.filter(action=action).values_list("seq", flat=True))


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_a_writer_does_not_wait_for_the_head_and_is_sealed_after_its_holder():
    with head_held():
        with transaction.atomic():
            mine = recording.record_event(actor="writer", action="test.pending")
        assert mine.seq is None
        assert seqs("test.pending") == [None]  # committed, pending: the head is still held
    assert seqs("test.hold") == [1] and seqs("test.pending") == [2]
    assert verify().valid


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_events_are_sealed_in_commit_order_and_a_rollback_leaves_no_gap():
    with head_held():
        with pytest.raises(RuntimeError), transaction.atomic():
            recording.record_event(actor="writer", action="test.rolled_back")
            raise RuntimeError("the caller fails")
        with transaction.atomic():
            recording.record_event(actor="writer", action="test.late")  # written first …
            with head_held():  # (a second holder cannot get the head either)
                pass
            recording.record_event(actor="writer", action="test.late")
    assert seqs("test.rolled_back") == []
    all_seqs = list(AuditEvent.objects.order_by("seq").values_list("seq", flat=True))
    assert all_seqs == list(range(1, len(all_seqs) + 1))
    assert verify().valid


@on_postgres
def test_a_pending_event_is_sealed_once_and_never_edited(events):
    events(2)
    pending = AuditEvent.objects.create(actor_type="system", actor_name="system", action="test.pending")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=pending.pk).update(action="test.other")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=pending.pk).update(seq=2, prev_hash="ab" * 32, hash="cd" * 32)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=pending.pk).delete()
    assert sealer.seal_pending() == 1
    assert AuditEvent.objects.get(pk=pending.pk).seq == 3
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=pending.pk).update(seq=4)
    assert verify().valid


def test_sealing_continues_the_chain_and_the_tree_head(events):
    events(3)
    AuditEvent.objects.create(actor_type="system", actor_name="system", action="test.pending")
    AuditEvent.objects.create(actor_type="system", actor_name="system", action="test.pending")
    checkpoint = checkpoints.write_checkpoint()  # seals what is pending before it signs
    assert checkpoint.seq == 5 and seqs("test.pending") == [4, 5]
    assert recording.record_event(actor="system", action="test.after").seq == 6
    assert verify().valid


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_with_a_seal_delay_the_sealer_thread_seals_what_waits(settings):
    import time

    from audit.sealer import sealer

    settings.AUDIT_SEAL_DELAY_MS = 5
    try:
        with head_held():
            for _ in range(3):
                with transaction.atomic():
                    recording.record_event(actor="writer", action="test.pending")
            assert seqs("test.pending") == [None, None, None]
        # nobody calls anything now: the thread's look, after the holder's commit, seals them
        for _ in range(200):
            if None not in seqs("test.pending"):
                break
            time.sleep(0.02)
        assert sorted(seqs("test.pending")) == [2, 3, 4]
    finally:
        sealer.stop()
    assert verify().valid


def _sealed_soon(action, count):
    import time

    for _ in range(250):
        if len(seqs(action)) == count and None not in seqs(action):
            return sorted(seqs(action))
        time.sleep(0.02)
    return seqs(action)


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_with_a_seal_delay_a_writer_leaves_the_head_alone_and_the_sealer_thread_seals(
    settings, alice, acme
):
    from audit.sealer import sealer

    settings.AUDIT_SEAL_DELAY_MS = 5
    ChainHead.objects.get_or_create(id=1)
    try:
        with transaction.atomic():
            first = recording.record_event(
                actor=alice, action="test.queued", team=acme, details={"n": 1}
            )
            # written pending although nothing held the head: one INSERT, no head taken
            assert first.seq is None and first.pk is not None and first.actor_role == "admin"
            assert ChainHead.objects.get(id=1).seq == 0
        recording.record_event(actor="system", action="test.queued")  # outside a transaction
        assert _sealed_soon("test.queued", 2) == [1, 2]
    finally:
        sealer.stop()
    first.refresh_from_db()
    assert (first.seq, first.actor_role, first.details) == (1, "admin", {"n": 1})
    assert ChainHead.objects.get(id=1).seq == 2
    assert verify().valid


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_with_a_seal_delay_a_rolled_back_append_leaves_nothing_and_no_gap(settings):
    from audit.sealer import sealer

    settings.AUDIT_SEAL_DELAY_MS = 5
    ChainHead.objects.get_or_create(id=1)
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            recording.record_event(actor="writer", action="test.rolled_back")
            raise RuntimeError("the caller fails")
        with transaction.atomic():
            recording.record_event(actor="writer", action="test.kept")
        assert _sealed_soon("test.kept", 1) == [1]
    finally:
        sealer.stop()
    assert seqs("test.rolled_back") == []
    assert verify().valid


@pytest.mark.django_db(transaction=True)
def test_stop_ends_the_sealer_thread_at_once_and_starts_no_other(settings):
    import time

    settings.AUDIT_SEAL_DELAY_MS = 20
    ChainHead.objects.get_or_create(id=1)
    one = sealer.sealer  # the process's own: sealing asks it to publish
    for _ in range(3):
        AuditEvent.objects.create(actor_type="system", actor_name="system", action="test.pending")
        one.request()
        thread = one._thread
        time.sleep(0.008)  # stop() lands while the thread waits out its delay
        began = time.monotonic()
        one.stop()  # its own last look seals the record, and starts no thread
        assert time.monotonic() - began < 5
        assert not thread.is_alive() and one._thread is None
    assert None not in seqs("test.pending")
    assert verify().valid


@on_postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("delay_ms", [0, 20])
def test_the_append_is_a_statement_prepared_once_per_connection(settings, delay_ms):
    """PostgreSQL parses and plans the append once per connection, not once per event:
    the values travel apart from the statement's text."""
    settings.AUDIT_SEAL_DELAY_MS = delay_ms
    ChainHead.objects.get_or_create(id=1)
    for n in range(3):
        recording.record_event(actor="writer", action="test.prepared", details={"n": n})
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", ["%audit_auditevent%"
                       if delay_ms else "%audit_append(%"])
        prepared = [row[0] for row in cursor.fetchall()]
    assert len(prepared) == 1
    sealer.seal_pending()
    assert [e["details"]["n"] for e in AuditEvent.objects.filter(action="test.prepared").order_by("seq").values("details")] == [0, 1, 2]
    assert verify().valid


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_a_database_error_in_the_prepared_append_is_djangos():
    from django.db import DataError

    with pytest.raises(DataError):
        recording._run_prepared("SELECT 1 / %s", [0])
