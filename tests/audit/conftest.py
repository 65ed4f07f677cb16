"""Audit fixtures: logged-in page clients, a way to append events quickly, and a way to
tamper with the log as a database superuser would (triggers disabled on PostgreSQL)."""

from contextlib import contextmanager

import pytest
from audit_support import SIGNING_PEM
from django.db import connection

from audit import recording


@pytest.fixture(autouse=True)
def _signing_key(settings):
    settings.AUDIT_SIGNING_KEY = SIGNING_PEM


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    # The shared user fixtures hash a password; PBKDF2 would dominate these tests' time.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def logged_in(client):
    def _as(user):
        client.force_login(user)
        return client

    return _as


@pytest.fixture
def events(db):
    """Append ``n`` events for ``team`` (default none); returns them in order."""

    def _events(n, team=None, action="test.event", **kwargs):
        return [
            recording.record_event(
                actor="system", action=action, team=team, details={"i": i}, **kwargs
            )
            for i in range(n)
        ]

    return _events


@contextmanager
def _tampering():
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # ALTER TABLE refuses pending FK checks
            cursor.execute("ALTER TABLE audit_auditevent DISABLE TRIGGER USER")
            cursor.execute("ALTER TABLE audit_checkpoint DISABLE TRIGGER USER")
            cursor.execute("ALTER TABLE audit_chainhead DISABLE TRIGGER USER")
        try:
            yield connection
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                cursor.execute("ALTER TABLE audit_auditevent ENABLE TRIGGER USER")
                cursor.execute("ALTER TABLE audit_checkpoint ENABLE TRIGGER USER")
                cursor.execute("ALTER TABLE audit_chainhead ENABLE TRIGGER USER")
    else:
        yield connection


@pytest.fixture
def tamper():
    """Run raw SQL against the audit tables with the append-only triggers off."""

    def _sql(sql, params=()):
        with _tampering(), connection.cursor() as cursor:
            cursor.execute(sql, params)

    return _sql


@pytest.fixture
def committed(db, django_capture_on_commit_callbacks):
    """Append events, each batch in its own transaction whose commit hooks run."""

    def _batch(n, **kwargs):
        start = len(connection.run_on_commit)
        with django_capture_on_commit_callbacks(execute=True):
            made = [
                recording.record_event(actor="system", action="test.event", details={"i": i}, **kwargs)
                for i in range(n)
            ]
        del connection.run_on_commit[start:]  # run, as a commit would have
        return made

    return _batch
