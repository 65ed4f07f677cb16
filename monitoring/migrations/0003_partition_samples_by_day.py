"""Raw samples and 1-minute rollups become tables partitioned by day on PostgreSQL.

Each table is rebuilt under its own name with every row copied across: a day
partition for each day that holds rows (the next days' are made by the periodic task)
and a default partition. The database's primary key becomes ``(id, <partition key>)``
because PostgreSQL requires a partitioned table's key to hold the partition key;
``id`` keeps drawing from one sequence. Indexes and foreign keys are recreated as they
were, now one per partition. Reversible: the backward step rebuilds plain tables.
SQLite keeps plain tables; nothing runs there, and Django's model state is unchanged.
"""

from django.db import migrations

TABLES = {"monitoring_sample": "time", "monitoring_rollup1m": "bucket"}


def _fetch(cursor, sql, params=()):
    cursor.execute(sql, params)
    return cursor.fetchall()


def rebuild(cursor, table: str, key: str, *, partition: bool) -> None:
    q = '"{}"'.format
    old = f"{table}__old"
    foreign = _fetch(
        cursor,
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'",
        [table],
    )
    # Indexes that back no constraint (the primary key's is made anew). Only the
    # table's own: on a partitioned table, the parent's.
    indexes = _fetch(
        cursor,
        "SELECT pg_get_indexdef(x.indexrelid) FROM pg_index x WHERE x.indrelid = %s::regclass "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)",
        [table],
    )
    (last_id,) = _fetch(cursor, f"SELECT coalesce(max(id), 0) FROM {q(table)}")[0]
    cursor.execute(f"ALTER TABLE {q(table)} RENAME TO {q(old)}")
    how = f" PARTITION BY RANGE ({q(key)})" if partition else ""
    cursor.execute(f"CREATE TABLE {q(table)} (LIKE {q(old)} INCLUDING DEFAULTS){how}")
    cursor.execute(f"ALTER TABLE {q(table)} ALTER COLUMN id DROP DEFAULT")
    pk = f"id, {q(key)}" if partition else "id"
    if partition:
        days = _fetch(cursor, f"SELECT DISTINCT ({q(key)} AT TIME ZONE 'UTC')::date FROM {q(old)} ORDER BY 1")
        for (day,) in days:
            cursor.execute(
                f"CREATE TABLE {q(f'{table}_{day:%Y%m%d}')} PARTITION OF {q(table)} "
                f"FOR VALUES FROM (%s::date::timestamp AT TIME ZONE 'UTC') "
                f"TO ((%s::date + 1)::timestamp AT TIME ZONE 'UTC')",
                [day, day],
            )
        cursor.execute(f"CREATE TABLE {q(table + '_default')} PARTITION OF {q(table)} DEFAULT")
    cursor.execute(f"INSERT INTO {q(table)} SELECT * FROM {q(old)}")
    cursor.execute(f"DROP TABLE {q(old)}")
    cursor.execute(f"ALTER TABLE {q(table)} ADD CONSTRAINT {q(table + '_pkey')} PRIMARY KEY ({pk})")
    for (definition,) in indexes:
        cursor.execute(definition)
    for name, definition in foreign:
        cursor.execute(f"ALTER TABLE {q(table)} ADD CONSTRAINT {q(name)} {definition}")
    seq = f"{table}_id_seq"
    cursor.execute(f"CREATE SEQUENCE {q(seq)} OWNED BY {q(table)}.id")
    cursor.execute(f"ALTER TABLE {q(table)} ALTER COLUMN id SET DEFAULT nextval('{seq}')")
    cursor.execute("SELECT setval(%s, %s, %s)", [seq, max(last_id, 1), last_id > 0])


def forward(apps, schema_editor):
    _run(schema_editor, partition=True)


def backward(apps, schema_editor):
    _run(schema_editor, partition=False)


def _run(schema_editor, *, partition: bool) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for table, key in TABLES.items():
            cursor.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = %s::regclass", [table])
            if cursor.fetchone()[0] != partition:  # already in the wanted shape: nothing to do
                rebuild(cursor, table, key, partition=partition)
    from monitoring import partitions

    partitions.forget()


class Migration(migrations.Migration):
    dependencies = [("monitoring", "0002_host_token_expiry")]

    operations = [migrations.RunPython(forward, backward)]
