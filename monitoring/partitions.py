"""Day partitions of raw samples and 1-minute rollups on PostgreSQL.

On PostgreSQL ``monitoring_sample`` (by ``time``) and ``monitoring_rollup1m`` (by
``bucket``) are declaratively partitioned by range, one partition per UTC day named
``<table>_YYYYMMDD``, plus a ``<table>_default`` partition that takes any row no day
partition holds, so an insert never fails for want of a partition. Retention drops
whole day partitions; nothing deletes rows there. SQLite keeps plain tables and this
module does nothing on it.

Where rows go:
- the periodic task (``maintain``) creates today's partition and the next
  ``PARTITION_DAYS_AHEAD`` (default 3) ahead of time;
- the writers (ingest, the rollup builder) call ``ensure`` with the days they are
  about to write; a missing day is created on demand, so a late sample (an agent's
  spool replayed after days offline) or one ahead of the server's clock lands in its
  own day and leaves with it;
- a row written by any other path into a day without a partition waits in the default
  partition; creating that day's partition (``maintain`` does it for every day found
  there) moves those rows into it first.

The primary key of a partitioned table must hold the partition key, so the database's
key is ``(id, time)`` (``(id, bucket)`` for rollups). ``id`` still comes from one
sequence per table, so it stays unique and Django's ``pk`` lookups by ``id`` hold;
the database no longer enforces that uniqueness across days.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

DAY = timedelta(days=1)
# table -> the column it is partitioned on
TABLES = {"monitoring_sample": "time", "monitoring_rollup1m": "bucket"}

# What this process knows, per (database, table): the days whose partition it has seen
# committed, and whether the table is partitioned at all.
_known: dict[tuple[str, str], set[date]] = {}
_partitioned: dict[tuple[str, str], bool] = {}


def _key(table: str) -> tuple[str, str]:
    return (connection.settings_dict["NAME"], table)


def _known_days(table: str) -> set[date]:
    return _known.setdefault(_key(table), set())


def _setting(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


def retention(table: str) -> timedelta:
    """How long ``table`` keeps rows: retention never drops a younger day."""
    if table == "monitoring_sample":
        return timedelta(hours=_setting("RAW_RETENTION_HOURS", 48))
    return timedelta(days=_setting("ROLLUP_1M_RETENTION_DAYS", 30))


def name_of(table: str, day: date) -> str:
    return f"{table}_{day:%Y%m%d}"


def day_of(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def start_of(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def partitioned(table: str) -> bool:
    """Whether ``table`` is a partitioned table in this database (never on SQLite)."""
    if connection.vendor != "postgresql":
        return False
    key = _key(table)
    if key not in _partitioned:
        with connection.cursor() as cursor:
            cursor.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(%s)", [table])
            row = cursor.fetchone()
        _partitioned[key] = bool(row and row[0])
    return _partitioned[key]


def forget() -> None:
    """Drop what this process remembers (after a migration or in tests)."""
    _partitioned.clear()
    _known.clear()


def days(table: str) -> list[date]:
    """The days that have a partition, oldest first."""
    pattern = re.compile(rf"^{re.escape(table)}_(\d{{8}})$")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%s)",
            [table],
        )
        names = [row[0] for row in cursor.fetchall()]
    found = [datetime.strptime(m.group(1), "%Y%m%d").date() for m in map(pattern.match, names) if m]
    return sorted(found)


def ensure(table: str, wanted: set[date], *, now: datetime | None = None) -> list[date]:
    """Create the partitions of ``wanted`` days that ``table`` lacks; returns those made.

    Runs in the caller's transaction (a writer makes the day it is about to write in
    the same flush), so a day made here only exists once that transaction commits.
    Until then another writer that needs the same day must not write it: its rows
    would be routed to the default partition, which PostgreSQL refuses once the new
    partition commits ("violates partition constraint"). So a day is remembered as
    made only after the commit that made it, and a writer that does not know a day
    asks the maker function, which waits on the lock the first writer holds until
    that writer commits, then finds the day made.

    A remembered day is trusted without asking while retention cannot have dropped
    it; an older day is looked up each time."""
    if not wanted or not partitioned(table):
        return []
    now = now or timezone.now()
    safe_from = day_of(now - retention(table)) + DAY
    known = _known_days(table)
    missing = {d for d in wanted if d not in known or d < safe_from}
    if not missing:
        return []
    made = []
    with transaction.atomic():
        present = set(days(table))
        for day in sorted(missing - present):
            if _call("monitoring_make_partition", table, day):
                made.append(day)
    remember = {d for d in missing if d >= safe_from}
    transaction.on_commit(lambda: known.update(remember))
    return made


def _call(function: str, table: str, day: date) -> bool:
    """Partitions are made and dropped by functions that run with the table owner's
    rights (the app's role owns nothing; see the migration that defines them). Making
    one moves in any rows of its day that wait in the default partition."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s, %s)", [table, day])
        return cursor.fetchone()[0]


def ensure_rows(table: str, moments) -> list[date]:
    """``ensure`` for the days of ``moments`` (the partition key of rows to write)."""
    if not partitioned(table):
        return []
    return ensure(table, {day_of(m) for m in moments})


def maintain(*, now: datetime | None = None) -> dict[str, list[str]]:
    """The periodic task: create today's partition and the days ahead, and give every
    day found in a default partition its own partition (moving its rows there)."""
    now = now or timezone.now()
    ahead = _setting("PARTITION_DAYS_AHEAD", 3)
    made: dict[str, list[str]] = {}
    for table in TABLES:
        if not partitioned(table):
            continue
        waiting = _default_days(table)
        _known_days(table).difference_update(waiting)  # rows of a day in the default: that day has none
        wanted = {day_of(now) + i * DAY for i in range(ahead + 1)} | waiting
        made[table] = [name_of(table, d) for d in ensure(table, wanted, now=now)]
    return made


def _default_days(table: str) -> set[date]:
    q = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT ({q(TABLES[table])} AT TIME ZONE 'UTC')::date FROM {q(table + '_default')}"
        )
        return {row[0] for row in cursor.fetchall()}


def drop_before(table: str, cutoff: datetime) -> list[str]:
    """Drop every day partition of ``table`` that ends at or before ``cutoff``.

    Rows of the day that holds ``cutoff`` stay until that whole day is past it, so on
    PostgreSQL retention keeps up to one day more than its setting. Each day is first
    detached (catalog work: the only moment the table's writers wait), then its table
    dropped on its own (freeing its files locks nothing they need). Gives up for this
    run (returns what it dropped) rather than wait more than a few seconds for a lock
    that a long query holds."""
    if not partitioned(table):
        return []
    dropped = []
    for day in sorted(set(days(table)) | detached(table)):
        if start_of(day + DAY) > cutoff:
            break
        try:
            detach(table, day)
        except Exception as exc:  # lock_not_available: try again on the next run
            if getattr(getattr(exc, "__cause__", None), "sqlstate", None) != "55P03":
                raise
            break
        drop_detached(table, day)
        _known_days(table).discard(day)
        dropped.append(name_of(table, day))
    return dropped


def detach(table: str, day: date) -> bool:
    """Take ``day``'s partition out of ``table`` (its rows leave the table's queries)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL lock_timeout = '5s'")
        # Rows written earlier in an enclosing transaction leave deferred foreign-key
        # checks behind, and a table with those cannot be detached or dropped.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SELECT monitoring_detach_partition(%s, %s)", [table, day])
        return cursor.fetchone()[0]


def drop_detached(table: str, day: date) -> bool:
    """Drop ``day``'s table once detached: the files go, no lock on ``table`` is held."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT monitoring_drop_detached(%s, %s)", [table, day])
        return cursor.fetchone()[0]


def detached(table: str) -> set[date]:
    """Days whose table exists but is no partition: detached by a retention run that
    stopped before dropping it; the next run drops them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' AND c.relname ~ %s "
            "AND c.relnamespace = to_regnamespace(current_schema()) "
            "AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)",
            [f"^{table}_[0-9]{{8}}$"],
        )
        names = [row[0] for row in cursor.fetchall()]
    return {datetime.strptime(name[-8:], "%Y%m%d").date() for name in names}
