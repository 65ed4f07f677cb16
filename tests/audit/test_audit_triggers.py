"""On PostgreSQL the database refuses to edit history, whatever the code path."""

from datetime import timedelta

import pytest
from audit_support import on_postgres
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from audit import checkpoints
from audit.models import AuditEvent, Checkpoint

pytestmark = on_postgres


def _refused(sql, params=()):
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, params)


def test_queryset_update_is_refused(events):
    events(2)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(seq=1).update(action="x")


def test_raw_update_and_delete_are_refused(events):
    events(2)
    _refused("UPDATE audit_auditevent SET action = 'x'")
    _refused("DELETE FROM audit_auditevent")


def test_truncate_is_refused(events):
    events(1)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SET CONSTRAINTS ALL IMMEDIATE"
        )  # or TRUNCATE fails on pending FK checks first
        cursor.execute("SET LOCAL audit.enforce_in_tests = 'on'")
        _refused("TRUNCATE audit_auditevent CASCADE")


def test_checkpoints_cannot_be_edited_or_deleted(events):
    events(1)
    checkpoints.write_checkpoint()
    _refused("UPDATE audit_checkpoint SET signature = 'x'")
    _refused("DELETE FROM audit_checkpoint")


def test_the_retention_switch_does_not_reach_young_events(events):
    events(1)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL audit.allow_retention = 'on'")
        _refused("DELETE FROM audit_auditevent")


def test_the_retention_switch_lets_old_events_go(events, monkeypatch):
    old = timezone.now() - timedelta(days=200)
    monkeypatch.setattr(timezone, "now", lambda: old)
    events(1)
    monkeypatch.undo()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL audit.allow_retention = 'on'")
        cursor.execute("DELETE FROM audit_auditevent")
    assert not AuditEvent.objects.exists()
    assert Checkpoint.objects.count() == 0


def test_the_chain_head_only_moves_forward_to_a_real_event(events):
    events(3)
    _refused(
        "UPDATE audit_chainhead SET seq = 2, hash = (SELECT hash FROM audit_auditevent WHERE seq = 2)"
    )
    _refused("UPDATE audit_chainhead SET seq = 4, hash = %s", ["ab" * 32])
    _refused("DELETE FROM audit_chainhead")


def test_signing_keys_can_only_be_retired(events):
    events(1)
    checkpoints.write_checkpoint()
    _refused("UPDATE audit_signingkey SET public_pem = 'x'")
    _refused("DELETE FROM audit_signingkey")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE audit_signingkey SET valid_until = now()")
