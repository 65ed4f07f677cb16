"""On PostgreSQL raw samples and 1-minute rollups live in day partitions: made ahead,
made on demand for rows outside them, dropped whole by retention, and Django's
queries on them work as on a plain table."""

import importlib
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from telemetry_wire import add_samples, utc

from monitoring import ingest, partitions, rollups
from monitoring.frames import Metrics, Record, Samples
from monitoring.models import AgentSession, Rollup1m, RollupCursor, Sample

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="partitions exist on PostgreSQL only (set DATABASE_URL)"
)

NOW = utc(2026, 12, 3, 12, 0, 0)
TODAY = NOW.date()


@pytest.fixture(autouse=True)
def _fresh():
    partitions.forget()
    yield
    partitions.forget()


@pytest.fixture
def gpu(fleet):
    return fleet["hosts"]["h100-a"].gpus.first()


def days(table="monitoring_sample"):
    return partitions.days(table)


def in_default(table="monitoring_sample") -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}_default")
        return cursor.fetchone()[0]


def rows_in(table: str, day) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {partitions.name_of(table, day)}")
        return cursor.fetchone()[0]


def test_it_makes_today_and_the_days_ahead(db, settings):
    settings.PARTITION_DAYS_AHEAD = 3
    partitions.maintain(now=NOW)
    wanted = [TODAY + timedelta(days=i) for i in range(4)]
    assert set(wanted) <= set(days()) and set(wanted) <= set(days("monitoring_rollup1m"))
    assert partitions.maintain(now=NOW) == {"monitoring_sample": [], "monitoring_rollup1m": []}


def test_samples_of_a_day_without_a_partition_get_one(gpu):
    far_ahead, long_ago = NOW + timedelta(days=40), utc(2003, 5, 1, 8, 0, 0)
    add_samples(gpu, far_ahead, [{"gpu_util": 1}] * 3)
    add_samples(gpu, long_ago, [{"gpu_util": 2}] * 2)
    assert {far_ahead.date(), long_ago.date()} <= set(days())
    assert rows_in("monitoring_sample", far_ahead.date()) == 3 and rows_in("monitoring_sample", long_ago.date()) == 2
    assert in_default() == 0


def test_a_row_written_around_the_writers_waits_in_default_then_moves(gpu):
    when = NOW + timedelta(days=20)
    Sample.objects.create(gpu=gpu, time=when, gpu_util=5)
    assert in_default() == 1
    made = partitions.maintain(now=NOW)["monitoring_sample"]
    assert partitions.name_of("monitoring_sample", when.date()) in made
    assert in_default() == 0 and rows_in("monitoring_sample", when.date()) == 1
    assert Sample.objects.get(time=when).gpu_util == 5


def test_the_database_key_holds_the_partition_key_and_orm_queries_work(gpu):
    add_samples(gpu, NOW, [{"gpu_util": 10}, {"gpu_util": 20}])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'monitoring_sample'::regclass "
            "AND contype = 'p'"
        )
        assert cursor.fetchone()[0] == 'PRIMARY KEY (id, "time")'
    first = Sample.objects.order_by("time").first()
    assert Sample.objects.get(pk=first.pk).gpu_util == 10
    Sample.objects.filter(pk=first.pk).update(gpu_util=11)
    first.refresh_from_db()
    assert first.gpu_util == 11
    gpu.delete()  # cascades into the partitions
    assert not Sample.objects.exists()


def test_ids_stay_unique_across_days(gpu):
    add_samples(gpu, NOW - timedelta(days=1), [{"gpu_util": 1}] * 5)
    add_samples(gpu, NOW, [{"gpu_util": 1}] * 5)
    ids = list(Sample.objects.values_list("id", flat=True))
    assert len(ids) == len(set(ids)) == 10


def hours_rolled_up_to(when):
    RollupCursor.objects.update_or_create(name="1m", defaults={"done_until": when})
    RollupCursor.objects.update_or_create(name="1h", defaults={"done_until": when})


def test_retention_drops_whole_days_and_deletes_no_row(gpu, settings):
    settings.RAW_RETENTION_HOURS = 48
    for back in (4, 3, 2, 1, 0):
        add_samples(gpu, NOW - timedelta(days=back), [{"gpu_util": back}] * 6, step=timedelta(hours=1))
    hours_rolled_up_to(NOW)
    removed = rollups.expire(now=NOW)
    # The cutoff is 2026-12-01 12:00: 11-29 and 11-30 are wholly past it; 12-01 is not.
    assert removed["raw_days"] >= 2 and removed["raw"] == 0
    left = set(days())
    assert TODAY - timedelta(days=3) not in left and TODAY - timedelta(days=2) in left
    assert Sample.objects.count() == 18
    assert sorted(set(Sample.objects.values_list("gpu_util", flat=True))) == [0, 1, 2]


def test_retention_keeps_days_a_pending_rebuild_needs(gpu, settings):
    settings.RAW_RETENTION_HOURS = 24
    add_samples(gpu, NOW - timedelta(days=3), [{"gpu_util": 1}] * 3)
    hours_rolled_up_to(NOW)
    RollupCursor.objects.filter(name="1m").update(dirty_from=NOW - timedelta(days=3))
    rollups.expire(now=NOW)
    assert Sample.objects.count() == 3
    RollupCursor.objects.filter(name="1m").update(dirty_from=None)
    rollups.expire(now=NOW)
    assert (NOW - timedelta(days=3)).date() not in days() and not Sample.objects.exists()


def test_minute_rollups_get_day_partitions_and_leave_by_them(gpu, settings):
    settings.ROLLUP_1M_RETENTION_DAYS = 7
    start = NOW - timedelta(days=10)
    add_samples(gpu, start, [{"gpu_util": 3}] * 120)
    rollups.build_1m(start, start + timedelta(minutes=2), now=start + timedelta(minutes=3))
    assert rows_in("monitoring_rollup1m", start.date()) == 2 and in_default("monitoring_rollup1m") == 0
    assert rollups.expire(now=NOW)["1m_days"] >= 1
    assert start.date() not in days("monitoring_rollup1m") and not Rollup1m.objects.exists()


def store(gpu, boot, records):
    batch = Samples(boot_id=boot, records=[Record(seq=s, t=t.timestamp(), gpu=gpu.uuid, slice=None, m=Metrics(gpu_util=7))
                                           for s, t in records])
    return ingest.store(link=ingest.Link(gpu.host_id, gpu.host.name), batches=[batch])


def test_a_replayed_backlog_older_than_retention_is_stored_once(gpu):
    """An agent back after days offline replays its spool: the old days get partitions
    on demand, and (host, boot_id, seq) still stores each record once."""
    old = NOW - timedelta(days=5)
    backlog = [(1, old), (2, old + timedelta(days=1)), (3, NOW)]
    first = store(gpu, "ab" * 16, backlog)
    again = store(gpu, "ab" * 16, backlog)
    assert (first.stored, again.stored, again.duplicates) == (3, 0, 3)
    assert again.acks == [("ab" * 16, 3)]
    assert Sample.objects.count() == 3 and in_default() == 0
    assert AgentSession.objects.get(boot_id="ab" * 16).last_seq == 3


def test_late_samples_past_retention_fill_empty_buckets_and_keep_built_ones(fleet, settings):
    """Rolled up before their raw day left, another GPU's minutes stay as built when a
    late backlog makes the same minutes dirty."""
    settings.RAW_RETENTION_HOURS = 24
    one, two = fleet["hosts"]["h100-a"].gpus.all()[:2]
    start = NOW - timedelta(days=3)
    add_samples(one, start, [{"gpu_util": 40}] * 120)
    rollups.build_1m(start, start + timedelta(minutes=2), now=start + timedelta(minutes=3))
    partitions.drop_before("monitoring_sample", start + timedelta(days=1))
    add_samples(two, start, [{"gpu_util": 90}] * 60)
    rollups.build_1m(start, start + timedelta(minutes=2), now=NOW)
    by_gpu = dict(Rollup1m.objects.filter(bucket=start).values_list("gpu_id", "gpu_util_avg"))
    assert by_gpu == {one.pk: 40, two.pk: 90}
    assert Rollup1m.objects.filter(gpu=one).count() == 2


def migration():
    found = Path(__file__).resolve().parents[2].glob("monitoring/migrations/*_partition_samples_by_day.py")
    return importlib.import_module(f"monitoring.migrations.{next(found).stem}")


def test_the_migration_converts_a_plain_table_keeping_every_row(gpu, transactional_db):
    rebuild = migration().rebuild
    with connection.cursor() as cursor:
        rebuild(cursor, "monitoring_sample", "time", partition=False)
    partitions.forget()
    add_samples(gpu, NOW - timedelta(days=2), [{"gpu_util": i} for i in range(30)], step=timedelta(hours=2))
    before = list(Sample.objects.order_by("id").values_list("id", "time", "gpu_util"))
    with connection.cursor() as cursor:
        rebuild(cursor, "monitoring_sample", "time", partition=True)
    partitions.forget()
    assert partitions.partitioned("monitoring_sample")
    assert list(Sample.objects.order_by("id").values_list("id", "time", "gpu_util")) == before
    assert set(days()) == {t.date() for _, t, _ in before} and in_default() == 0
    add_samples(gpu, NOW, [{"gpu_util": 99}])
    assert Sample.objects.get(gpu_util=99).id > before[-1][0]


def test_the_periodic_task_makes_them(db):
    from monitoring.tasks import SCHEDULE, make_partitions

    assert SCHEDULE["monitoring.partitions"] == (3600, "monitoring.tasks.make_partitions")
    make_partitions()
    assert partitions.day_of(timezone.now()) + timedelta(days=1) in days()


def test_each_day_holds_one_index_per_lookup(gpu):
    add_samples(gpu, NOW, [{"gpu_util": 1}])
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s",
                       [partitions.name_of("monitoring_sample", TODAY)])
        columns = sorted(row[0].split(" USING btree ")[1] for row in cursor.fetchall())
    assert columns == ['("time")', '(gpu_id, "time")', '(id, "time")', '(instance_id, "time")', "(slice_id)",
                       "(team_id)"]


@pytest.fixture
def as_app_role(gpu):
    """The role production's app connects as: owns nothing, holds the printed grants."""
    from audit.roles import grant_statements

    role = f"gpc_app_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE ROLE "{role}" NOLOGIN')  # rolled back with the test
        for statement in grant_statements(role):
            cursor.execute(statement)
        cursor.execute(f'SET LOCAL ROLE "{role}"')
    yield role
    with connection.cursor() as cursor:
        cursor.execute("RESET ROLE")


def test_the_app_role_makes_and_drops_days_only_through_the_functions(gpu, as_app_role):
    old = NOW - timedelta(days=6)
    add_samples(gpu, old, [{"gpu_util": 1}] * 2)
    add_samples(gpu, NOW, [{"gpu_util": 2}])
    assert old.date() in days()
    with pytest.raises(DatabaseError, match="must be owner"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {partitions.name_of('monitoring_sample', old.date())}")
    hours_rolled_up_to(NOW)
    rollups.expire(now=NOW)
    assert old.date() not in days() and list(Sample.objects.values_list("gpu_util", flat=True)) == [2]


def test_a_day_wrongly_remembered_as_made_is_made_by_the_next_run(gpu):
    """A writer whose partition creation rolled back still remembers the day: its rows
    wait in the default partition, and the periodic run makes the day after all."""
    when = NOW + timedelta(days=10)
    partitions._known_days("monitoring_sample").add(when.date())
    add_samples(gpu, when, [{"gpu_util": 4}] * 2)
    assert in_default() == 2 and when.date() not in days()
    partitions.maintain(now=NOW)
    assert in_default() == 0 and rows_in("monitoring_sample", when.date()) == 2


def test_retention_detaches_a_day_then_drops_it_and_finishes_a_day_left_detached(gpu):
    old, older = NOW - timedelta(days=5), NOW - timedelta(days=6)
    add_samples(gpu, old, [{"gpu_util": 1}] * 2)
    add_samples(gpu, older, [{"gpu_util": 2}] * 2)
    assert partitions.detach("monitoring_sample", older.date())  # a run that stopped here
    assert older.date() not in days() and partitions.detached("monitoring_sample") == {older.date()}
    with pytest.raises(DatabaseError, match="detach it first"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT monitoring_drop_detached('monitoring_sample', %s)", [old.date()])
    dropped = partitions.drop_before("monitoring_sample", NOW - timedelta(days=3))
    assert dropped == [partitions.name_of("monitoring_sample", d.date()) for d in (older, old)]
    assert partitions.detached("monitoring_sample") == set() and not Sample.objects.exists()
