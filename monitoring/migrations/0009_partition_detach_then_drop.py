"""Retention detaches a day partition, then drops the detached table.

Dropping a partition holds an ACCESS EXCLUSIVE lock on the partitioned table until the
dropping transaction has freed the partition's files, which at fleet scale (a day of
raw samples is gigabytes) stalls every writer of the table for seconds. Detaching is
catalog work only; the detached table is then dropped in a transaction of its own that
locks nothing the writers need. Two functions with the owner's rights, as in
0005_partition_functions: one detaches a day of one of the two telemetry tables, the
other drops such a day's table only while it is no partition. PostgreSQL only.
"""

from django.db import migrations

TABLES = "('monitoring_sample'), ('monitoring_rollup1m')"

CREATE = f"""
CREATE OR REPLACE FUNCTION monitoring_detach_partition(parent text, day date) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    name text := parent || '_' || to_char(day, 'YYYYMMDD');
BEGIN
    IF NOT EXISTS (SELECT 1 FROM (VALUES {TABLES}) AS t(p) WHERE p = parent) THEN
        RAISE EXCEPTION '% is not a table partitioned by day', parent;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_inherits
                   WHERE inhrelid = to_regclass(name) AND inhparent = to_regclass(parent)) THEN
        RETURN false;
    END IF;
    EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', parent, name);
    RETURN true;
END $$;

CREATE OR REPLACE FUNCTION monitoring_drop_detached(parent text, day date) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    name text := parent || '_' || to_char(day, 'YYYYMMDD');
BEGIN
    IF NOT EXISTS (SELECT 1 FROM (VALUES {TABLES}) AS t(p) WHERE p = parent) THEN
        RAISE EXCEPTION '% is not a table partitioned by day', parent;
    END IF;
    IF to_regclass(name) IS NULL THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass(name)) THEN
        RAISE EXCEPTION '% is a partition: detach it first', name;
    END IF;
    EXECUTE format('DROP TABLE %I', name);
    RETURN true;
END $$;
"""

DROP = """
DROP FUNCTION IF EXISTS monitoring_detach_partition(text, date);
DROP FUNCTION IF EXISTS monitoring_drop_detached(text, date);
"""


def _run(schema_editor, sql: str) -> None:
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(sql)  # no parameters: the % of format() stay as they are


def forward(apps, schema_editor):
    _run(schema_editor, CREATE)


def backward(apps, schema_editor):
    _run(schema_editor, DROP)


class Migration(migrations.Migration):
    dependencies = [("monitoring", "0008_alert_kind_scaling_at_max")]

    operations = [migrations.RunPython(forward, backward)]
