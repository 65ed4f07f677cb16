"""On PostgreSQL, the database itself refuses UPDATE, DELETE and TRUNCATE of audit events
and checkpoints, so no code path (ORM, queryset.update(), raw SQL) can edit history.

Retention is the one exception, and it is narrow: a DELETE of an event passes only when
the transaction has ``SET LOCAL audit.allow_retention = 'on'`` *and* the event is older
than 180 days. A session setting was chosen over a SECURITY DEFINER function because it
needs no second database role to manage; the age check keeps the floor in the database.

TRUNCATE is refused too, except in Django's own test databases (named ``test_…``), whose
flush between transactional tests truncates every table; a test can still see the refusal
with ``SET LOCAL audit.enforce_in_tests = 'on'``.
"""

from django.db import migrations

FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION audit_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND TG_TABLE_NAME = 'audit_auditevent'
       AND current_setting('audit.allow_retention', true) = 'on'
       AND OLD.time < now() - interval '180 days' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE OR REPLACE FUNCTION audit_refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_database() LIKE 'test\_%'
       AND coalesce(current_setting('audit.enforce_in_tests', true), '') <> 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only: TRUNCATE on % refused', TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;
"""

TABLES = ("audit_auditevent", "audit_checkpoint")


def install(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(FUNCTIONS, params=None)
    for table in TABLES:
        schema_editor.execute(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION audit_refuse_change()"
        )
        schema_editor.execute(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_truncate()"
        )


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
    schema_editor.execute("DROP FUNCTION IF EXISTS audit_refuse_change(); DROP FUNCTION IF EXISTS audit_refuse_truncate();")


class Migration(migrations.Migration):
    dependencies = [("audit", "0003_checkpoints")]
    operations = [migrations.RunPython(install, uninstall)]
