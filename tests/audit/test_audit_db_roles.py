"""On PostgreSQL the app's role (owning nothing, with the printed grants) records events
but can neither disable the audit triggers nor edit, truncate or drop the audit tables."""

import uuid

import pytest
from audit_support import on_postgres
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from audit import checkpoints, recording
from audit.roles import grant_statements

pytestmark = on_postgres


@pytest.fixture
def as_app_role(db):
    role = f"gpc_app_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE ROLE "{role}" NOLOGIN')  # rolled back with the test
        for statement in grant_statements(role):
            cursor.execute(statement)
        cursor.execute(f'SET LOCAL ROLE "{role}"')
    yield role
    with connection.cursor() as cursor:
        cursor.execute("RESET ROLE")


def _refused(sql, match):
    with (
        pytest.raises(DatabaseError, match=match),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql)


def test_the_app_role_appends_and_signs(as_app_role):
    recording.record_event(actor="system", action="test.event")
    assert checkpoints.write_checkpoint().seq >= 1


def test_the_app_role_cannot_disable_the_triggers(as_app_role):
    recording.record_event(actor="system", action="test.event")
    for table in ("audit_auditevent", "audit_checkpoint", "audit_chainhead", "audit_signingkey"):
        _refused(f"ALTER TABLE {table} DISABLE TRIGGER USER", "must be owner")


def test_the_app_role_cannot_edit_truncate_or_drop(as_app_role):
    recording.record_event(actor="system", action="test.event")
    checkpoints.write_checkpoint()
    _refused("UPDATE audit_auditevent SET action = 'x'", "permission denied")
    _refused("UPDATE audit_checkpoint SET root = 'x'", "permission denied")
    _refused("TRUNCATE audit_auditevent CASCADE", "permission denied")
    _refused("DROP TABLE audit_checkpoint", "must be owner")


def test_the_command_prints_the_grants(capsys):
    call_command("audit_db_roles", "gpuconsole_app", "--owner", "gpuconsole_owner")
    out = capsys.readouterr().out
    assert 'GRANT SELECT, INSERT ON audit_checkpoint TO "gpuconsole_app";' in out
    assert 'ALTER DEFAULT PRIVILEGES FOR ROLE "gpuconsole_owner"' in out
