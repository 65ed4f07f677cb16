"""Benchmark: meter and invoice one month for N instances on PostgreSQL, side by side
with one hand-written SQL aggregate over the same usage rows, in the same run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpc_bench_billing \\
        .venv/bin/python bench/billing.py [--instances 10000] [--teams 40] [--seed 1]

The database named in DATABASE_URL is dropped and created afresh (its name must start
with ``gpc_bench``), and dropped again at the end unless ``--keep``. Lifecycles are generated straight into the tables (the lifecycle
services are not what is measured): launches spread over the month, runs from seconds
to days, stops and restarts, terminations, spot preemptions (some in the first hour),
reservations for a third of the teams, an hourly spot market and a mid-month price
change. Then, timed:

  meter    billing.meter_runs.meter_window over the month (events → usage → charges,
           drafts refreshed)
  invoice  billing.invoices.issue_months: every team's invoice of the month refreshed
           from its charges and issued
  sql      one SELECT over billing_usagerecord joined with the catalog: GPU-seconds ×
           list price, summed per team and pricing model

Then, untimed against the others: cost freshness, one periodic ``meter_recent`` run in
mid-month (what the 300 s task does each time); and the store floor: the month's usage
records and charges written again by PostgreSQL itself (``INSERT … SELECT`` from the
rows metering wrote, rolled back), what storing those rows costs the database with no
client involved, as a ratio to the aggregate too; and the client floor: the window
read as metering reads it plus the same rows sent back through its COPY (rolled back),
what a client that meters in Python pays before rating anything. Where PostgreSQL runs on this machine,
the CPU seconds of the benchmark process (with the rating workers it forks, METER_WORKERS)
and of its database backend during meter + invoice are printed as well, each also as a
multiple of the store floor. The backend is the one that writes everything (the workers'
own backends only read): its CPU cannot be hidden by overlapping it with anything, so it
bounds the wall time.

Peak Python memory (tracemalloc) is taken in a second, untimed pass of meter + invoice
refresh — metering is idempotent, so the pass rebuilds the same rows.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
import sys
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlparse

import asgi_servers  # bench/, beside this script

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuconsole.settings")
os.environ.setdefault("INPROCESS_SCHEDULER", "false")

MONTH = datetime(2026, 11, 1, tzinfo=UTC)
NEXT = datetime(2026, 12, 1, tzinfo=UTC)
NOW = NEXT + timedelta(hours=6)
MODELS = {"H100-80GB": "2.99", "A100-80GB": "1.79", "H200-141GB": "3.99"}
SLICE_SKU = ("A100-80GB", "mig", "1g.10gb", "0.29")

SQL_AGGREGATE = """
SELECT u.team_id, u.pricing_model,
       SUM(EXTRACT(EPOCH FROM (u."end" - u.start)) * u.gpus * p.hourly / 3600) AS list_cost,
       SUM(EXTRACT(EPOCH FROM (u."end" - u.start)) * u.gpus) AS gpu_seconds
FROM billing_usagerecord u
JOIN billing_price p
  ON p.sku = u.sku AND p.kind = 'on_demand'
 AND p.effective_from <= u.start AND (p.effective_until IS NULL OR p.effective_until > u.start)
WHERE u.period_start >= %s AND u.period_start < %s
GROUP BY u.team_id, u.pricing_model
"""


def fresh_database(url: str, *, create: bool = True) -> None:
    import psycopg

    parts = urlparse(url)
    name = parts.path.lstrip("/")
    if not name.startswith("gpc_bench"):
        sys.exit(f"refusing to drop {name!r}: the benchmark database's name must start with gpc_bench")
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if create:
            conn.execute(f'CREATE DATABASE "{name}"')


def lognormal_seconds(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    return int(min(high, max(low, rng.lognormvariate(math.log(median), sigma))))


def lifecycle(rng: random.Random, pricing_model: str, launched: datetime):
    """Events (time, from, to, by_platform) of one instance, up to NOW."""
    events = [(launched, "", "pending", False)]
    t, state = launched, "pending"
    for _ in range(rng.randint(1, 6)):
        t += timedelta(seconds=rng.randint(20, 180))
        if t >= NOW:
            break
        events.append((t, state, "running", False))
        state = "running"
        length = lognormal_seconds(rng, 6 * 3600, 1.8, 5, 12 * 86400)
        end = t + timedelta(seconds=length)
        if end >= NOW:
            return events, state, t
        roll = rng.random()
        if pricing_model == "spot" and roll < 0.35:
            events.append((end, state, "preempted", True))
            return events, "preempted", end
        if roll < 0.25:
            events.append((end, state, "terminated", False))
            return events, "terminated", end
        events.append((end, state, "stopping", False))
        events.append((end + timedelta(seconds=30), "stopping", "stopped", False))
        t, state = end + timedelta(seconds=30), "stopped"
        t += timedelta(seconds=lognormal_seconds(rng, 12 * 3600, 1.5, 60, 10 * 86400))
        if t >= NOW:
            return events, state, events[-1][0]
        events.append((t, state, "pending", False))
        state = "pending"
    return events, state, events[-1][0]


def generate(n: int, teams_n: int, seed: int) -> dict:
    from billing import reservations
    from billing.models import Price, SpotPrice
    from console.models import Team
    from instances.models import (
        GpuModel,
        Host,
        Instance,
        LifecycleEvent,
        Region,
        SliceKind,
        SliceProfile,
    )

    rng = random.Random(seed)
    region = Region.objects.create(name="bench-1")
    models = {name: GpuModel.objects.create(name=name, memory_gb=80) for name in MODELS}
    profile = SliceProfile.objects.create(gpu_model=models["A100-80GB"], kind=SliceKind.MIG, name="1g.10gb",
                                          memory_gb=10, slices_per_gpu=7)
    hosts = [Host.objects.create(name=f"bench-host-{i}", region=region) for i in range(20)]
    teams = Team.objects.bulk_create(Team(name=f"Team {i}", slug=f"team-{i}") for i in range(teams_n))
    catalog_start = MONTH - timedelta(days=30)
    prices = [Price(sku=sku, kind="on_demand", hourly=Decimal(p), effective_from=catalog_start) for sku, p in MODELS.items()]
    prices.append(Price(sku=":".join(SLICE_SKU[:3]), kind="on_demand", hourly=Decimal(SLICE_SKU[3]),
                        effective_from=catalog_start))
    Price.objects.bulk_create(prices)
    h100 = Price.objects.get(sku="H100-80GB")
    h100.effective_until = MONTH + timedelta(days=15)
    h100.save()
    Price.objects.create(sku="H100-80GB", kind="on_demand", hourly=Decimal("2.79"), effective_from=h100.effective_until)
    spot, t = [], catalog_start
    levels = {sku: Decimal(p) * Decimal("0.4") for sku, p in MODELS.items()}
    while t <= NOW:
        for sku, p in MODELS.items():
            levels[sku] = min(max(levels[sku] * (1 + Decimal(rng.randint(-600, 600)) / 10000), Decimal(p) / 4),
                              Decimal(p) * Decimal("0.9")).quantize(Decimal("0.0001"))
            spot.append(SpotPrice(sku=sku, hourly=levels[sku], time=t))
        t += timedelta(hours=1)
    SpotPrice.objects.bulk_create(spot, batch_size=5000)
    for team in teams[: teams_n // 3]:
        reservations.purchase_reservation(actor="bench", team=team, gpu_model=models["H100-80GB"],
                                      gpu_count=rng.choice([4, 8, 16, 32]), term="1y",
                                      start=MONTH - timedelta(days=rng.randint(0, 25)), now=catalog_start)
    instances, plans = [], []
    for i in range(n):
        pricing_model = rng.choices(["on_demand", "reserved", "spot"], weights=[60, 25, 15])[0]
        model = rng.choice(list(MODELS))
        sliced = model == "A100-80GB" and pricing_model == "on_demand" and rng.random() < 0.3
        launched = MONTH - timedelta(days=5) + timedelta(seconds=rng.randint(0, 34 * 86400))
        events, state, changed = lifecycle(rng, pricing_model, launched)
        instances.append(Instance(
            team=rng.choice(teams), name=f"bench-{i}", gpu_model=models[model],
            slice_profile=profile if sliced else None, gpu_count=rng.choice([1, 1, 2, 4, 8]),
            pricing_model=pricing_model, state=state, host=rng.choice(hosts), created_at=launched,
            state_changed_at=changed,
        ))
        plans.append(events)
    Instance.objects.bulk_create(instances, batch_size=5000)
    rows = []
    for instance, events in zip(instances, plans, strict=True):
        rows += [LifecycleEvent(instance=instance, time=t, from_state=a, to_state=b, gpu_count=instance.gpu_count,
                                host_id=instance.host_id, by_platform=p) for t, a, b, p in events]
    LifecycleEvent.objects.bulk_create(rows, batch_size=5000)
    return {"teams": len(teams), "instances": len(instances), "events": len(rows), "spot_prices": len(spot)}


def meter_and_invoice() -> tuple[float, float]:
    from billing import invoices, meter_runs

    t0 = time.perf_counter()
    result = meter_runs.meter_window(actor="bench", start=MONTH, end=NEXT, now=NOW)
    t1 = time.perf_counter()
    invoices.issue_months(actor="bench", before=NEXT.date(), now=NOW)
    print(f"rated in {result.workers} process{'es' if result.workers > 1 else ''} (METER_WORKERS, docs/billing.md)")
    return t1 - t0, time.perf_counter() - t1


def sql_aggregate() -> tuple[float, list]:
    from django.db import connection

    t0 = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(SQL_AGGREGATE, [MONTH, NEXT])
        rows = cursor.fetchall()
    return time.perf_counter() - t0, rows


def store_floor() -> float:
    """Seconds PostgreSQL takes to store the month's usage records and charges again,
    from the rows metering wrote (INSERT … SELECT, rolled back): the part of metering no
    client-side work can remove."""
    from django.db import connection, transaction

    from billing.models import Charge, UsageRecord

    with transaction.atomic():
        t0 = time.perf_counter()
        with connection.cursor() as cursor:
            for model in (UsageRecord, Charge):
                columns = ", ".join(connection.ops.quote_name(f.column) for f in model._meta.concrete_fields
                                    if not f.primary_key)
                table = model._meta.db_table
                cursor.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {table} "
                               "WHERE period_start >= %s AND period_start < %s", [MONTH, NEXT])
        elapsed = time.perf_counter() - t0
        transaction.set_rollback(True)
    return elapsed


def client_floor() -> tuple[float, float]:
    """Seconds (read, write) of the input and output metering cannot do without, with no
    rating at all: the month's instances and events read exactly as metering reads them
    (``metering._events``, the same statements and grouping), then the usage records and
    charges it wrote sent back through the same binary COPY from tuples already in memory
    (rolled back). What any client that meters in Python pays before it computes a cent."""
    from django.db import transaction

    from billing import metering
    from billing.models import Charge, UsageRecord
    from console import bulk

    written = {model: (names, bulk.fetch(model.objects.filter(period_start__gte=MONTH, period_start__lt=NEXT)
                                         .order_by("id").values_list(*names)))
               for model, names in ((UsageRecord, metering.USAGE_COLUMNS), (Charge, metering.CHARGE_COLUMNS))}
    with transaction.atomic():
        t0 = time.perf_counter()
        metering._events(metering._candidates(MONTH, NEXT), MONTH, NEXT)
        t1 = time.perf_counter()
        for model, (names, rows) in written.items():
            bulk.copy(model, names, rows)
        t2 = time.perf_counter()
        transaction.set_rollback(True)
    return t1 - t0, t2 - t1


def backend_cpu() -> float | None:
    """CPU seconds used so far by this connection's PostgreSQL backend, where it runs on
    this machine (None elsewhere)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    return asgi_servers.process_cpu(pid)


def own_cpu() -> float:
    """CPU seconds of this process and of the rating workers it has waited for."""
    return sum(usage.ru_utime + usage.ru_stime
               for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


def freshness_run() -> float:
    """Seconds of one steady-state periodic metering run in mid-month (the task runs every
    300 s and meters from its last run, less the lookback, to now): a running GPU-second
    reaches month_to_date at most one period plus one such run after it happens."""
    from billing import meter_runs
    from billing.models import MeterState

    now = MONTH + timedelta(days=20, hours=12)
    MeterState.objects.update_or_create(id=1, defaults={"metered_until": now - timedelta(seconds=300)})
    t0 = time.perf_counter()
    meter_runs.meter_recent(now=now)
    return time.perf_counter() - t0


def peak_memory() -> int:
    """Peak Python allocation of a second meter + draft refresh (same rows rebuilt)."""
    from billing import meter_runs

    tracemalloc.start()
    meter_runs.meter_window(actor="bench", start=MONTH, end=NEXT, now=NOW)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--teams", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database afterwards")
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("set DATABASE_URL to a PostgreSQL database whose name starts with gpc_bench")
    fresh_database(url)

    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.db.models import Sum

    from billing.models import Charge, Invoice, UsageRecord

    call_command("migrate", verbosity=0)
    settings.DEBUG = False  # no query log growing in memory
    t = time.perf_counter()
    made = generate(args.instances, args.teams, args.seed)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")  # statistics, as a live database has them
    print(f"generated {made} in {time.perf_counter() - t:.1f} s")

    cpu0, server0 = own_cpu(), backend_cpu()
    meter_s, invoice_s = meter_and_invoice()
    cpu1, server1 = own_cpu(), backend_cpu()
    sql_s, sql_rows = sql_aggregate()
    sql_again_s, _ = sql_aggregate()  # warm, like the second half of the run
    usage, charges = UsageRecord.objects.count(), Charge.objects.count()
    invoiced = Invoice.objects.filter(month=MONTH.date(), status="issued").aggregate(t=Sum("total"))["t"]
    billed = Charge.objects.filter(month=MONTH.date()).aggregate(c=Sum("billed_cents"))["c"]
    list_cost = sum((row[2] for row in sql_rows), Decimal(0))
    fresh_s = freshness_run()
    peak = peak_memory()
    floor_s = store_floor()
    read_s, write_s = client_floor()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(f"usage records {usage}, charges {charges}, invoices {Invoice.objects.filter(status='issued').count()}")
    print(f"meter   {meter_s:8.2f} s")
    print(f"invoice {invoice_s:8.2f} s")
    print(f"sql     {sql_s:8.2f} s (again: {sql_again_s:.2f} s)  over the same {usage} usage rows")
    print(f"ratio (meter + invoice) / sql: {(meter_s + invoice_s) / sql_s:.1f}x; invoice / sql: {invoice_s / sql_s:.2f}x")
    print(f"invoices total {invoiced}; charges sum {Decimal(billed) / 100}; usage at list price {list_cost:.2f}")
    # Either side's CPU alone bounds the wall time from below even with perfect overlap
    # of Python and the database, so each is shown against the store floor as well.
    server = ("n/a (database elsewhere)" if server0 is None or server1 is None
              else f"{server1 - server0:.2f} s = {(server1 - server0) / floor_s:.2f}x the store floor")
    print(f"CPU during meter + invoice: this process and its rating workers {cpu1 - cpu0:.2f} s = {(cpu1 - cpu0) / floor_s:.2f}x the store "
          f"floor, its PostgreSQL backend {server}")
    print(f"store floor: PostgreSQL alone re-inserting the month's {usage} usage records and {charges} charges "
          f"(INSERT … SELECT, rolled back) {floor_s:.2f} s = {floor_s / sql_s:.1f}x the aggregate")
    print(f"client floor: the window read as metering reads it {read_s:.2f} s + the same rows sent back by its COPY "
          f"{write_s:.2f} s = {read_s + write_s:.2f} s = {(read_s + write_s) / floor_s:.2f}x the store floor")
    print(f"ratio (meter + invoice) / store floor: {(meter_s + invoice_s) / floor_s:.2f}x; "
          f"/ client floor: {(meter_s + invoice_s) / (read_s + write_s):.2f}x")
    print(f"cost freshness: one periodic run (mid-month, last 2 h 5 min re-metered as their whole day) {fresh_s:.2f} s; "
          f"a GPU-second reaches month_to_date within {300 + fresh_s:.0f} s at worst, {150 + fresh_s:.0f} s on average")
    print(f"peak Python memory while metering: {peak / 2**20:.1f} MiB; process max RSS {rss_mb:.0f} MiB")
    if not args.keep:
        from django.db import connections

        from audit.sealer import sealer

        sealer.stop()  # its last look at exit would find the database gone
        connections.close_all()
        fresh_database(url, create=False)


if __name__ == "__main__":
    main()
