"""The periodic health evaluation at fleet scale (SQLite in a temporary directory).

    .venv/bin/python bench/health_evaluate.py [--gpus 1000] [--unhealthy 10] [--runs 5]

Builds ``--gpus`` GPUs (8 per host) with a latest reading and health facts each, and
``--unhealthy`` of them with a fault (an XID 79, a pending row remap, a narrow PCIe link
in turn). Reports the first evaluation (every verdict written, alerts opened, failed
GPUs cordoned) and the steady one (nothing changed) in time and queries. It runs every
30 s (monitoring.tasks.evaluate_health).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SOUND = {"ecc_corrected_aggregate": 0, "ecc_uncorrected_aggregate": 0, "remap_correctable": 0,
         "remap_uncorrectable": 0, "remap_pending": 0, "remap_failed": 0, "pcie_gen": 5, "pcie_gen_max": 5,
         "pcie_width": 16, "pcie_width_max": 16}


def build(gpus: int, unhealthy: int) -> None:
    from django.utils import timezone

    from instances.models import Gpu, GpuModel, Host, Region
    from monitoring.models import GpuEvent, GpuHealth, GpuLatest

    now = timezone.now()
    region = Region.objects.create(name="bench-1")
    model = GpuModel.objects.create(name="H200-141GB", memory_gb=141, power_limit_w=700)
    hosts = Host.objects.bulk_create([Host(name=f"h{i:05d}", region=region) for i in range((gpus + 7) // 8)])
    rows = Gpu.objects.bulk_create([Gpu(host=hosts[i // 8], index=i % 8, uuid=f"GPU-bench-{i}", model=model,
                                        memory_total=141 * 2**30) for i in range(gpus)])
    GpuLatest.objects.bulk_create([GpuLatest(uuid=g.uuid, host_id=g.host_id, gpu=g, time=now, last_seen=now,
                                             metrics={"gpu_util": 50, "clocks_event_reasons": 0}) for g in rows])
    facts = []
    for i, g in enumerate(rows):
        fault = i % 3 if i < unhealthy else None
        f = dict(SOUND, remap_pending=1) if fault == 1 else dict(SOUND, pcie_width=8) if fault == 2 else SOUND
        facts.append(GpuHealth(gpu=g, facts=f, facts_at=now))
        if fault == 0:
            GpuEvent.objects.create(kind="xid", host_id=g.host_id, gpu=g, uuid=g.uuid, code=79, time=now)
    GpuHealth.objects.bulk_create(facts)


def timed(fn) -> tuple[float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        start = time.perf_counter()
        fn()
        took = time.perf_counter() - start
    return took, len(ctx.captured_queries)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--unhealthy", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as var:
        os.environ["GPUCONSOLE_VAR_DIR"] = var
        os.environ["INPROCESS_SCHEDULER"] = "false"
        os.environ.pop("REDIS_URL", None)
        os.environ.pop("DATABASE_URL", None)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuconsole.settings")
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from instances.models import Gpu
        from monitoring import verdicts

        build(args.gpus, args.unhealthy)
        first, first_q = timed(verdicts.evaluate)
        steady = [timed(verdicts.evaluate) for _ in range(args.runs)]
        cordoned = Gpu.objects.filter(cordoned_at__isnull=False).count()
        print(f"{args.gpus:,} GPUs, {args.unhealthy} unhealthy ({cordoned} cordoned as failed)")
        print(f"first evaluation: {first * 1000:,.0f} ms, {first_q} queries")
        times = [t for t, _ in steady]
        print(f"steady evaluation: median {statistics.median(times) * 1000:,.0f} ms "
              f"(max {max(times) * 1000:,.0f} ms), {steady[-1][1]} queries, {args.runs} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
