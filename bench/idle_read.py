"""Idle cost's telemetry read at a team's scale: whole hours from the 1-hour rollups'
idle seconds against every minute from the 1-minute rollups, side by side in one run.

    DATABASE_URL=postgres://… .venv/bin/python bench/idle_read.py [--gpus 256] [--days 28] [--runs 5]

Builds a scratch database on DATABASE_URL's server (dropped at the end) holding one
team's ``--gpus`` GPUs (instances of 8), and ``--days`` days of 1-minute rollups for
each, up to half an hour into the current hour: real activity varies minute by minute,
a tenth of the minutes idle, GPM metrics on half the GPUs. The 1-hour rollups are made
by the 1-hour tier's own builder (``rollups.build_1h``) from those minutes.

Then, alternating run by run, the two reads billing makes for the cost explorer and
the savings page (``monitoring.activity``): the period by GPU (``activity_by_gpu``) and
the last 14 days by instance and day (``activity_by_instance_and_day``), once with the
whole hours read from the hours (what the console does) and once from the minutes
(the 1-hour tier's ``idle_from`` cleared: what it did before hours carried idle
seconds). Both must answer the same figures; the times are reported with their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from overview import build_fleet, configure, drop  # noqa: E402  (bench/overview.py)


def sql(statement: str, params=None):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else None


def load_minutes(instances: list, start: datetime, end: datetime) -> int:
    """One 1-minute rollup per held GPU and minute of [start, end), written by the
    database itself (each day into its own partition)."""
    from monitoring import partitions

    days = {start.date() + timedelta(days=k) for k in range((end - start).days + 1)}
    partitions.ensure("monitoring_rollup1m", days, now=end)
    minutes = int((end - start).total_seconds() // 60)
    ids = [i.pk for i in instances]
    sql(
        "INSERT INTO monitoring_rollup1m (bucket, gpu_id, instance_id, team_id, samples, observed_s, "
        "gpu_util_avg, sm_occupancy_pct_avg, tensor_active_pct_avg, power_mw_avg) "
        "SELECT %s + s.n * interval '1 minute', g.id, g.instance_id, g.team_id, 60, 60.0, "
        "(g.id * 7 + s.n * 13) %% 101, "
        "CASE WHEN g.id %% 2 = 0 THEN ((g.id * 3 + s.n * 17) %% 101) * 0.9 END, "
        "CASE WHEN g.id %% 2 = 0 THEN ((g.id + s.n * 11) %% 101) * 0.5 END, 350000 "
        "FROM generate_series(0, %s) AS s(n) CROSS JOIN instances_gpu g WHERE g.instance_id = ANY(%s)",
        [start, minutes - 1, ids],
    )
    sql("ANALYZE monitoring_rollup1m")
    return sql("SELECT count(*) FROM monitoring_rollup1m")[0][0]


def timed(call, runs: int) -> tuple[list[float], object]:
    times, answer = [], None
    for _ in range(runs):
        began = time.perf_counter()
        answer = call()
        times.append(time.perf_counter() - began)
    return times, answer


def run(args) -> int:
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from console.models import Team
    from instances.models import Instance
    from monitoring import rollups
    from monitoring.activity import activity_by_gpu, activity_by_instance_and_day, exact_hours
    from monitoring.models import Rollup1h, RollupCursor

    load_before = os.getloadavg()
    call_command("migrate", verbosity=0)
    User.objects.create_user("ops", is_staff=True)
    Team.objects.create(name="Acme", slug="acme")
    build_fleet(args.gpus * 2, tag="idle")  # half of it held by Acme's instances
    instances = list(Instance.objects.filter(team__slug="acme"))
    now = datetime.now(UTC).replace(minute=30, second=0, microsecond=0)
    hour = now.replace(minute=0)
    start = hour - timedelta(days=args.days)
    began = time.perf_counter()
    minutes = load_minutes(instances, start, now)
    loaded = time.perf_counter() - began
    began = time.perf_counter()
    rollups.build_1h(start, hour, now=now)
    built = time.perf_counter() - began
    hours = Rollup1h.objects.count()
    RollupCursor.objects.create(name="1h", idle_from=start, done_until=hour)
    sql("ANALYZE monitoring_rollup1h")
    print(f"{len(instances)} instances, {args.gpus} GPUs, {args.days} days: {minutes:,} minute rollups "
          f"(loaded in {loaded:.0f} s), {hours:,} hour rollups (built in {built:.1f} s)", flush=True)

    ids = [i.pk for i in instances]
    reads = {
        f"{args.days} days by GPU": lambda: activity_by_gpu(ids, start, now),
        "14 days by instance and day": lambda: activity_by_instance_and_day(ids, now - timedelta(days=14), now),
    }

    def from_minutes(call):
        RollupCursor.objects.filter(name="1h").update(idle_from=None)
        try:
            return call()
        finally:
            RollupCursor.objects.filter(name="1h").update(idle_from=start)

    assert exact_hours(start, now) == (start, hour)
    results = {}
    for label, call in reads.items():
        hourly, minutely = [], []
        for _ in range(args.runs):  # alternating, so both see the same machine
            times, from_hours = timed(call, 1)
            hourly += times
            times, answer = timed(lambda c=call: from_minutes(c), 1)
            minutely += times
            assert answer == from_hours, f"{label}: the hours and the minutes disagree"
        results[label] = (hourly, minutely, len(from_hours))

    from django.db import connection

    print(f"\nIdle seconds read, {connection.vendor}, {args.runs} alternating runs each; both answer the same figures")
    print("| read | keys | from hours (median, min) | from minutes (median, min) | minutes ÷ hours |")
    print("|---|---:|---:|---:|---:|")
    for label, (hourly, minutely, keys) in results.items():
        ratio = statistics.median(minutely) / statistics.median(hourly)
        print(f"| {label} | {keys:,} | {statistics.median(hourly) * 1000:,.0f} ms, {min(hourly) * 1000:,.0f} ms "
              f"| {statistics.median(minutely) * 1000:,.0f} ms, {min(minutely) * 1000:,.0f} ms | {ratio:.1f}× |")
    print(f"load average before/after: {' '.join(f'{x:.2f}' for x in load_before)} / "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=256, help="the team's GPUs, a multiple of 8 (default 256)")
    parser.add_argument("--days", type=int, default=28,
                        help="days of minute rollups, within their 30-day retention (default 28)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each read and layout (default 5)")
    args = parser.parse_args()
    if args.gpus < 8 or args.gpus % 8 or not 1 <= args.days <= 29 or args.runs < 1:
        parser.error("--gpus is a positive multiple of 8, --days 1 to 29, --runs at least 1")
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        parser.error("bench/idle_read.py measures PostgreSQL: set DATABASE_URL=postgres://…")
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as var:
        target = configure(var)
        try:
            return run(args)
        finally:
            drop(target)


if __name__ == "__main__":
    sys.exit(main())
