"""Raw-sample retention on PostgreSQL: dropping a day partition against deleting the
same day's rows, at fleet scale.

    DATABASE_URL=postgres://… .venv/bin/python bench/retention.py [--gpus 10000] [--interval 60]

Builds a scratch database on DATABASE_URL's server (dropped at the end), migrates it
(``monitoring_sample`` partitioned by day) and registers ``--gpus`` GPUs. Then writes
48 hours of raw samples, one per GPU every ``--interval`` seconds, twice:

* into ``monitoring_sample``'s two day partitions, as the console stores them now;
* into ``plain_sample``, a plain table with the same columns and indexes, as the
  console stored them before (one table, retention deleting rows).

Side by side in one run, each after a CHECKPOINT: wall time and WAL bytes to drop
the older day's partition (the two steps of ``partitions.drop_before``, what
retention calls: detach the day, then drop the detached table), to
delete that day's rows from the plain table hour by hour (what retention did), and
the VACUUM the deletion leaves behind. Goal (docs/benchmarks.md): drop ≥ 100× faster.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLAIN = "plain_sample"
METRICS = "gpu_util, mem_util, mem_used, power_mw, temp_c, sm_clock_mhz, mem_clock_mhz, energy_mj, mem_total, power_limit_mw"


def configure() -> tuple[str, str]:
    """Point Django at a scratch database; returns (admin URL, its name) to drop it."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        sys.exit("bench/retention.py measures PostgreSQL: set DATABASE_URL=postgres://…")
    import psycopg

    parts = urlsplit(url)
    admin, name = urlunsplit(parts._replace(path="/postgres")), f"bench_retention_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = urlunsplit(parts._replace(path="/" + name))
    os.environ["INPROCESS_SCHEDULER"] = "false"
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuconsole.settings")
    return admin, name


def drop_database(admin: str, name: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sql(statement: str, params=None):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else None


def register_gpus(n: int) -> None:
    from instances.models import Gpu, GpuModel, Host, Region

    region = Region.objects.create(name="bench")
    model = GpuModel.objects.create(name="H100-80GB", memory_gb=80, power_limit_w=700)
    hosts = Host.objects.bulk_create(Host(name=f"host-{h:05d}", region=region) for h in range((n + 7) // 8))
    Gpu.objects.bulk_create(
        (Gpu(host=hosts[k // 8], index=k % 8, uuid=f"GPU-{k:06d}", model=model, memory_total=80 * 2**30)
         for k in range(n)),
        batch_size=5000,
    )


def generate(table: str, day: datetime, gpus: int, interval: int, day_number: int) -> None:
    """One day of samples of every GPU into ``table``, in arrival order (time-major);
    ids as the sequence would give them."""
    per_day = 86_400 // interval
    sql(
        f"INSERT INTO {table} (id, time, gpu_id, {METRICS}) "
        f"SELECT ({day_number} * {per_day} + s.n) * {gpus} + g.k + 1, %s + s.n * interval '{interval} seconds', g.id, "
        "(g.k * 7 + s.n) %% 101, (g.k + 3 * s.n) %% 101, (40 + (g.k + s.n) %% 40)::bigint << 30, "
        "300000 + ((g.k * 13 + s.n) %% 400) * 1000, 35 + (g.k + s.n) %% 50, 1980, 2619, "
        f"5000000000 + (s.n * {interval}) * 350000, 85899345920, 700000 "
        f"FROM generate_series(0::bigint, {per_day - 1}) AS s(n) "
        "CROSS JOIN (SELECT id, (row_number() OVER (ORDER BY id) - 1) AS k FROM instances_gpu) AS g",
        [day],
    )


def load(days: list[datetime], gpus: int, interval: int) -> None:
    """Each day into a table of its own, attached as a partition (PostgreSQL builds its
    indexes in one pass); then the plain table from the same rows, indexed alike."""
    from monitoring import partitions

    for number, day in enumerate(days):
        name = partitions.name_of("monitoring_sample", day.date())
        sql(f"CREATE TABLE {name} (LIKE monitoring_sample INCLUDING DEFAULTS)")
        generate(name, day, gpus, interval, number)
        sql(f"ALTER TABLE {name} ADD CONSTRAINT {name}_range CHECK (time >= %s AND time < %s)",
            [day, day + timedelta(days=1)])
        sql(f"ALTER TABLE monitoring_sample ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)",
            [day, day + timedelta(days=1)])
        sql(f"ALTER TABLE {name} DROP CONSTRAINT {name}_range")
        print(f"  loaded {day:%Y-%m-%d} into {name}", flush=True)
    sql(f"CREATE TABLE {PLAIN} (LIKE monitoring_sample INCLUDING DEFAULTS)")
    sql(f"INSERT INTO {PLAIN} SELECT * FROM monitoring_sample")
    sql(f"ALTER TABLE {PLAIN} ADD PRIMARY KEY (id)")
    for (definition,) in sql(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'monitoring_sample'::regclass "
        "AND NOT indisprimary"
    ):
        head, _, columns = definition.partition(" USING ")
        name = head.split()[2]
        sql(f"CREATE INDEX {PLAIN}_{name[-40:]} ON {PLAIN} USING {columns}")
    sql("ANALYZE monitoring_sample")
    sql(f"ANALYZE {PLAIN}")
    print(f"  loaded {PLAIN}", flush=True)


def measure(label: str, work) -> dict:
    sql("CHECKPOINT")
    (before,) = sql("SELECT pg_current_wal_lsn()")[0]
    started = time.perf_counter()
    work()
    seconds = time.perf_counter() - started
    (wal,) = sql("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [before])[0]
    print(f"  {label}: {seconds * 1000:,.1f} ms, WAL {int(wal):,} bytes", flush=True)
    return {"s": seconds, "wal": int(wal)}


def delete_hourly(day: datetime) -> int:
    """What retention did on a plain table: one DELETE per hour, each committed."""
    from django.db import connection

    removed = 0
    for hour in range(24):
        lo = day + timedelta(hours=hour)
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {PLAIN} WHERE time >= %s AND time < %s", [lo, lo + timedelta(hours=1)])
            removed += cursor.rowcount
    return removed


def size(relation: str) -> tuple[int, int]:
    return tuple(sql("SELECT pg_table_size(%s), pg_indexes_size(%s)", [relation, relation])[0])


def run(args) -> int:
    import django

    django.setup()
    from django.core.management import call_command

    from monitoring import partitions

    load_before = os.getloadavg()
    call_command("migrate", verbosity=0)
    sql("SET maintenance_work_mem = '512MB'")  # index builds of the load, not what is measured
    register_gpus(args.gpus)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    days = [today - timedelta(days=3), today - timedelta(days=2)]
    per_day = args.gpus * (86_400 // args.interval)
    print(f"{args.gpus:,} GPUs, one sample every {args.interval} s: {per_day:,} rows a day, "
          f"{2 * per_day:,} rows over 48 h in each layout", flush=True)
    started = time.perf_counter()
    load(days, args.gpus, args.interval)
    print(f"  generated in {time.perf_counter() - started:,.0f} s", flush=True)
    old = partitions.name_of("monitoring_sample", days[0].date())
    table, indexes = size(old)
    print(f"one day partition: {per_day:,} rows, table {table / 2**20:,.0f} MiB, indexes {indexes / 2**20:,.0f} MiB")
    table, indexes = size(PLAIN)
    print(f"plain table (48 h): table {table / 2**20:,.0f} MiB, indexes {indexes / 2**20:,.0f} MiB")

    counted = {}
    # What retention runs (partitions.drop_before), step by step: detach the day (the
    # only step the table's writers wait for), then drop the detached table.
    detach = measure(f"detach {old}", lambda: counted.update(detached=partitions.detach("monitoring_sample",
                                                                                         days[0].date())))
    drop_table = measure(f"drop the detached {old}",
                         lambda: counted.update(dropped=partitions.drop_detached("monitoring_sample",
                                                                                 days[0].date())))
    drop = {"s": detach["s"] + drop_table["s"], "wal": detach["wal"] + drop_table["wal"]}
    delete = measure(f"delete {days[0]:%Y-%m-%d} from {PLAIN}, 24 hourly statements",
                     lambda: counted.update(deleted=delete_hourly(days[0])))
    vacuum = measure(f"VACUUM {PLAIN} after the delete", lambda: sql(f"VACUUM {PLAIN}"))
    assert counted["detached"] and counted["dropped"], counted
    assert old not in [partitions.name_of("monitoring_sample", d) for d in partitions.days("monitoring_sample")]
    assert counted["deleted"] == per_day, counted["deleted"]
    left = sql("SELECT count(*) FROM monitoring_sample")[0][0], sql(f"SELECT count(*) FROM {PLAIN}")[0][0]
    assert left == (per_day, per_day), left

    print()
    print("| removing one day of raw samples | rows | time | WAL |")
    print("|---|---:|---:|---:|")
    print(f"| detach the day's partition (writers wait) | {per_day:,} | {detach['s'] * 1000:,.1f} ms "
          f"| {detach['wal'] / 2**10:,.1f} KiB |")
    print(f"| drop the detached table | | {drop_table['s'] * 1000:,.1f} ms | {drop_table['wal'] / 2**10:,.1f} KiB |")
    print(f"| detach + drop (what retention runs) | {per_day:,} | {drop['s'] * 1000:,.1f} ms "
          f"| {drop['wal'] / 2**10:,.1f} KiB |")
    print(f"| delete the day's rows (24 hourly DELETEs) | {per_day:,} | {delete['s']:,.1f} s "
          f"| {delete['wal'] / 2**20:,.1f} MiB |")
    print(f"| ... and the VACUUM it needs | | {vacuum['s']:,.1f} s | {vacuum['wal'] / 2**20:,.1f} MiB |")
    print(f"drop is {delete['s'] / drop['s']:,.0f}x faster than the delete "
          f"({(delete['s'] + vacuum['s']) / drop['s']:,.0f}x with its VACUUM) and writes "
          f"{delete['wal'] / max(drop['wal'], 1):,.0f}x less WAL (goal: >= 100x faster); "
          f"writers wait {delete['s'] / detach['s']:,.0f}x less than the delete takes")
    print(f"load average before/after: {' '.join(f'{x:.2f}' for x in load_before)} / "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs")
    return 0 if delete["s"] >= 100 * drop["s"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000, help="GPUs (default 10,000)")
    parser.add_argument("--interval", type=int, default=60,
                        help="seconds between a GPU's samples (default 60; the agent sends 1)")
    args = parser.parse_args()
    if args.gpus < 1 or not 1 <= args.interval <= 3600 or 86_400 % args.interval:
        parser.error("--gpus must be positive and --interval divide a day (1 to 3600 s)")
    admin, name = configure()
    try:
        return run(args)
    finally:
        drop_database(admin, name)


if __name__ == "__main__":
    sys.exit(main())
