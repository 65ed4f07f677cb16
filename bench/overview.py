"""Overview render and chart query time at fleet scale.

    .venv/bin/python bench/overview.py [--gpus 1000] [--runs 7]

Builds a scratch database (SQLite in a temporary directory, or DATABASE_URL's
server with a database of its own) holding a fleet of ``--gpus`` GPUs (8 per host)
with live readings, half of them held by one team's instances, and 30 days of
1-hour / 7 days of 1-minute rollups for a sample of GPUs. Then, side by side:

* the overview page, full stack through the test client, for an operator (fleet
  view) and for a member of the big team (tiles), with a tenth of the fleet as the
  peer: query counts must match, times are reported with their ratio;
* the metrics API for one GPU over 24 h, 7 d and 30 d: tier, points per series
  and time, as ratios to the 24 h query.

Goals (docs/benchmarks.md, "Browser console"): overview ≤ 300 ms in a fixed number
of queries; a 30-day chart ≤ 2,000 points per series in ≤ 500 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def configure(var_dir: str) -> str | None:
    """Point Django at a scratch database; returns the PostgreSQL database to drop."""
    os.environ["GPUCONSOLE_VAR_DIR"] = var_dir
    os.environ["INPROCESS_SCHEDULER"] = "false"
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuconsole.settings")
    url = os.environ.get("DATABASE_URL")
    if not url:
        return None
    import psycopg

    parts = urlsplit(url)
    name = f"bench_overview_{os.getpid()}"
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = urlunsplit(parts._replace(path="/" + name))
    return urlunsplit(parts._replace(path="/postgres")) + "#" + name


def drop(target: str | None) -> None:
    if not target:
        return
    import psycopg
    from django.db import connections

    connections.close_all()
    admin, name = target.split("#")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def build_fleet(gpus: int, *, tag: str) -> dict:
    """``gpus`` GPUs on hosts of 8, every one reporting; half held by Acme's instances."""
    from django.utils import timezone

    from console.models import Team
    from instances.models import Gpu, GpuModel, Host, Instance, Region, State
    from monitoring.models import GpuLatest

    now = timezone.now()
    region, _ = Region.objects.get_or_create(name=f"bench-{tag}")
    model, _ = GpuModel.objects.get_or_create(
        name="H100-80GB", defaults={"memory_gb": 80, "power_limit_w": 700}
    )
    acme = Team.objects.get(slug="acme")
    hosts = Host.objects.bulk_create(
        Host(name=f"{tag}-host-{h:04d}", region=region) for h in range((gpus + 7) // 8)
    )
    instances = Instance.objects.bulk_create(
        Instance(
            team=acme,
            name=f"{tag}-job-{k}",
            gpu_model=model,
            gpu_count=8,
            pricing_model="on_demand",
            state=State.RUNNING,
            host=hosts[k],
        )
        for k in range(len(hosts) // 2)
    )
    rows = []
    for n in range(gpus):
        host = hosts[n // 8]
        holder = instances[n // 8] if n // 8 < len(instances) else None
        rows.append(
            Gpu(
                host=host,
                index=n % 8,
                uuid=f"GPU-{tag}-{n:05d}",
                model=model,
                memory_total=80 * 2**30,
                instance=holder,
                team=acme if holder else None,
            )
        )
    made = Gpu.objects.bulk_create(rows)
    GpuLatest.objects.bulk_create(
        GpuLatest(
            gpu=g,
            uuid=g.uuid,
            host=g.host,
            instance=g.instance,
            team=g.team,
            time=now,
            last_seen=now,
            metrics={
                "gpu_util": (g.pk * 37) % 100,
                "mem_used": 40 * 2**30,
                "mem_total": 80 * 2**30,
                "power_mw": 350_000,
                "power_limit_mw": 700_000,
                "temp_c": 60,
                "clocks_event_reasons": 1,
            },
        )
        for g in made
    )
    return {"gpus": made, "hosts": hosts}


def build_history(gpus: list, *, sample: int) -> None:
    """30 days of 1-hour rollups for ``sample`` GPUs and 7 days of 1-minute rollups for
    the first, as the rollup tasks would leave them."""
    from datetime import timedelta

    from django.utils import timezone

    from monitoring.catalog import GAUGES
    from monitoring.models import Rollup1h, Rollup1m

    now = timezone.now().replace(minute=0, second=0, microsecond=0)

    def stats(k: int) -> dict:
        out = {}
        for name in GAUGES:
            value = float((k * 13) % 100)
            out |= {
                f"{name}_min": value * 0.8,
                f"{name}_avg": value,
                f"{name}_max": min(value * 1.2, 100),
            }
        return out

    for gpu in gpus[:sample]:
        Rollup1h.objects.bulk_create(
            (
                Rollup1h(
                    gpu=gpu,
                    instance=gpu.instance,
                    team=gpu.team,
                    bucket=now - timedelta(hours=h),
                    samples=3600,
                    observed_s=3600,
                    **stats(h),
                )
                for h in range(1, 30 * 24 + 1)
            ),
            batch_size=2000,
        )
    first = gpus[0]
    Rollup1m.objects.bulk_create(
        (
            Rollup1m(
                gpu=first,
                instance=first.instance,
                team=first.team,
                bucket=now - timedelta(minutes=m),
                samples=60,
                observed_s=60,
                **stats(m),
            )
            for m in range(1, 7 * 24 * 60 + 1)
        ),
        batch_size=2000,
    )


def timed(call, runs: int) -> tuple[list[float], int]:
    """Milliseconds of each run (the first warms caches and is dropped) and the queries of the last."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    call()
    times = []
    for _ in range(runs):
        with CaptureQueriesContext(connection) as ctx:
            started = time.perf_counter()
            response = call()
            times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.status_code
    return times, len(ctx)


def overview(users: dict, runs: int) -> dict:
    from django.test import Client

    out = {}
    for who in ("ops", "bob"):
        client = Client()
        client.force_login(users[who])
        times, queries = timed(lambda c=client: c.get("/"), runs)
        out[who] = {"median_ms": statistics.median(times), "max_ms": max(times), "queries": queries}
    return out


def charts(user, uuid: str, runs: int) -> dict:
    from datetime import timedelta

    from django.utils import timezone
    from rest_framework.test import APIClient

    from monitoring.charts import GPU_METRICS

    client = APIClient()
    client.force_authenticate(user)
    metrics = "&".join(f"metric={m}" for m in GPU_METRICS)
    out = {}
    for label, span in (
        ("24h", timedelta(days=1)),
        ("7d", timedelta(days=7)),
        ("30d", timedelta(days=30)),
    ):
        end = timezone.now()
        url = f"/api/v1/gpus/{uuid}/metrics/?{metrics}&start={(end - span).timestamp():.0f}&end={end.timestamp():.0f}"
        times, queries = timed(lambda u=url: client.get(u), runs)
        body = client.get(url).json()
        points = max(len(s["t"]) for s in body["series"].values())
        out[label] = {
            "tier": body["tier"],
            "points": points,
            "median_ms": statistics.median(times),
            "max_ms": max(times),
            "queries": queries,
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000, help="fleet size (default 1000)")
    parser.add_argument(
        "--runs", type=int, default=7, help="timed runs of each request (default 7)"
    )
    parser.add_argument(
        "--history-gpus", type=int, default=50, help="GPUs with 30 days of rollups (default 50)"
    )
    args = parser.parse_args()
    if args.gpus < 80 or args.runs < 1:
        parser.error("--gpus must be at least 80 and --runs at least 1")

    with tempfile.TemporaryDirectory(prefix="bench-overview-") as var:
        target = configure(var)
        try:
            return run(args)
        finally:
            drop(target)


def run(args) -> int:
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from console.models import Membership, Team

    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    ops = User.objects.create_user("ops", is_staff=True)
    bob = User.objects.create_user("bob")
    acme = Team.objects.create(name="Acme", slug="acme")
    Membership.objects.create(team=acme, user=bob, role="member")
    users = {"ops": ops, "bob": bob}

    peer_gpus = args.gpus // 10
    build_fleet(peer_gpus, tag="small")
    small = overview(users, args.runs)
    big_fleet = build_fleet(args.gpus - peer_gpus, tag="big")
    big = overview(users, args.runs)
    build_history(big_fleet["gpus"], sample=args.history_gpus)
    setup_s = time.perf_counter() - started
    chart = charts(ops, big_fleet["gpus"][0].uuid, args.runs)

    from django.db import connection

    print(
        f"Overview and charts, {connection.vendor}, {args.runs} timed runs each (setup {setup_s:.0f} s)"
    )
    print(f"{'page':28} {'GPUs':>6} {'queries':>8} {'median ms':>10} {'max ms':>8}")
    for who, label in (("ops", "overview, operator (fleet)"), ("bob", "overview, member (tiles)")):
        for size, result in ((peer_gpus, small[who]), (args.gpus, big[who])):
            print(
                f"{label:28} {size:>6} {result['queries']:>8} {result['median_ms']:>10.1f} {result['max_ms']:>8.1f}"
            )
        ratio = big[who]["median_ms"] / small[who]["median_ms"]
        same = "same" if big[who]["queries"] == small[who]["queries"] else "DIFFERENT"
        print(f"{'':28} ratio {args.gpus}/{peer_gpus} GPUs: time ×{ratio:.2f}, queries {same}")
    print(f"\n{'chart of one GPU':28} {'tier':>6} {'points':>8} {'median ms':>10} {'max ms':>8}")
    for label, result in chart.items():
        print(
            f"{label:28} {result['tier']:>6} {result['points']:>8} {result['median_ms']:>10.1f} {result['max_ms']:>8.1f}"
            f"   ×{result['median_ms'] / chart['24h']['median_ms']:.2f} of 24 h"
        )
    goals = [
        big["ops"]["median_ms"] <= 300 and big["ops"]["queries"] == small["ops"]["queries"],
        big["bob"]["median_ms"] <= 300 and big["bob"]["queries"] == small["bob"]["queries"],
        chart["30d"]["points"] <= 2000 and chart["30d"]["median_ms"] <= 500,
    ]
    print(
        "\ngoals: overview ≤ 300 ms in fixed queries (operator, member), 30 d chart ≤ 2,000 points in ≤ 500 ms:",
        ", ".join("met" if ok else "MISSED" for ok in goals),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
