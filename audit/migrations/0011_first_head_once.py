"""The chain head's row is made once even when several writers find it missing at the
same moment (a flushed database): one writer makes it under a transaction-level
advisory lock, the others wait for that transaction and then take the head like any
other time (or write their record pending), instead of failing on the primary key or
on the forward-only trigger.
"""

from django.db import migrations

FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION audit_try_head(OUT o_seq bigint, OUT o_hash text)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT h.seq, h.hash INTO o_seq, o_hash FROM audit_chainhead h WHERE h.id = 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM audit_chainhead h WHERE h.id = 1) THEN
        -- the head as migrated, made by one writer: the others wait here for its
        -- transaction, then find the row (the forward-only trigger refuses a second one)
        PERFORM pg_advisory_xact_lock(hashtext('audit_chainhead'));
        IF NOT EXISTS (SELECT 1 FROM audit_chainhead h WHERE h.id = 1) THEN
            INSERT INTO audit_chainhead (id, seq, hash) VALUES (1, 0, repeat('0', 64));
        END IF;
        SELECT h.seq, h.hash INTO o_seq, o_hash FROM audit_chainhead h WHERE h.id = 1 FOR UPDATE SKIP LOCKED;
    END IF;
END
$$;
"""

PREVIOUS = r"""
CREATE OR REPLACE FUNCTION audit_try_head(OUT o_seq bigint, OUT o_hash text)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT h.seq, h.hash INTO o_seq, o_hash FROM audit_chainhead h WHERE h.id = 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM audit_chainhead h WHERE h.id = 1) THEN
        INSERT INTO audit_chainhead (id, seq, hash) VALUES (1, 0, repeat('0', 64));
        SELECT h.seq, h.hash INTO o_seq, o_hash FROM audit_chainhead h WHERE h.id = 1 FOR UPDATE;
    END IF;
END
$$;
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FUNCTIONS, params=None)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PREVIOUS, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0010_append_in_one_statement")]

    operations = [migrations.RunPython(install, uninstall)]
