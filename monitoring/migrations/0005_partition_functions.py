"""Functions that make and drop day partitions, run with their owner's rights.

Only a table's owner may attach or drop its partitions, and in production the app
connects as a role that owns nothing (docs/audit.md, "Database roles"). These two
functions, owned by the role that migrates, do exactly that and nothing else: they
accept only the two telemetry tables and a day. Everyone may run them; that lets no
one remove more than the DELETE on those tables the app holds already. PostgreSQL
only; nothing runs on SQLite.
"""

from django.db import migrations

TABLES = "('monitoring_sample', 'time'), ('monitoring_rollup1m', 'bucket')"

CREATE = f"""
CREATE OR REPLACE FUNCTION monitoring_make_partition(parent text, day date) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    key text := (SELECT k FROM (VALUES {TABLES}) AS t(p, k) WHERE p = parent);
    name text := parent || '_' || to_char(day, 'YYYYMMDD');
    lo timestamptz := day::timestamp AT TIME ZONE 'UTC';
    hi timestamptz := (day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION '% is not a table partitioned by day', parent;
    END IF;
    -- One maker at a time per table: two writers missing the same day would race.
    PERFORM pg_advisory_xact_lock(hashtext('partitions:' || parent));
    IF to_regclass(name) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS)', name, parent);
    -- The check lets ATTACH skip scanning the new table to prove its range.
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I IS NOT NULL AND %I >= %L AND %I < %L)',
                   name, name || '_range', key, key, lo, key, hi);
    -- Rows of that day waiting in the default partition move in first (ATTACH
    -- refuses while the default holds rows of the new range).
    EXECUTE format('WITH moved AS (DELETE FROM %I WHERE %I >= %L AND %I < %L RETURNING *) '
                   'INSERT INTO %I SELECT * FROM moved', parent || '_default', key, lo, key, hi, name);
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', parent, name, lo, hi);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', name, name || '_range');
    RETURN true;
END $$;

CREATE OR REPLACE FUNCTION monitoring_drop_partition(parent text, day date) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    name text := parent || '_' || to_char(day, 'YYYYMMDD');
BEGIN
    IF NOT EXISTS (SELECT 1 FROM (VALUES {TABLES}) AS t(p, k) WHERE p = parent) THEN
        RAISE EXCEPTION '% is not a table partitioned by day', parent;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_inherits
                   WHERE inhrelid = to_regclass(name) AND inhparent = to_regclass(parent)) THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE %I', name);
    RETURN true;
END $$;
"""

DROP = """
DROP FUNCTION IF EXISTS monitoring_make_partition(text, date);
DROP FUNCTION IF EXISTS monitoring_drop_partition(text, date);
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
    dependencies = [("monitoring", "0004_keys_served_by_time_indexes")]

    operations = [migrations.RunPython(forward, backward)]
