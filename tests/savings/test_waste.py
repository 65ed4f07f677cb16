"""Allocated vs effective cost and waste % per day, from billing's idle cost."""

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from billing import meter_runs as billing_meter_runs
from billing import pricing
from savings import useful_work


def test_an_idle_instance_is_all_waste_and_a_busy_one_none(alice, acme, ops, running, telemetry):
    telemetry(running(alice, acme, "held"), mem_gb=70, activity=0)
    telemetry(running(alice, acme, "train"), mem_gb=70, activity=90)
    now = timezone.now()
    billing_meter_runs.meter_window(actor=ops, start=pricing.floor_day(now - timedelta(hours=3)), end=now, now=now)
    today = useful_work.waste_by_day(acme, now=now, days=1)[-1]
    assert today.allocated > 0
    assert today.idle == today.allocated / 2 == today.effective
    assert today.waste_pct == Decimal("50.0")


def test_a_day_without_charges_has_no_waste_to_show(acme):
    [day] = useful_work.waste_by_day(acme, now=timezone.now(), days=1)
    assert (day.allocated, day.waste_pct) == (0, None)


def test_useful_work_gives_achieved_tflops_mfu_and_cost_per_pflop_hour(alice, acme, ops, running):
    from instances.models import GpuHold
    from monitoring.models import Rollup1h

    instance = running(alice, acme, "train", count=2)
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    Rollup1h.objects.bulk_create([
        Rollup1h(bucket=hour, gpu_id=h.gpu_id, instance=instance, team_id=acme.pk, samples=3600, observed_s=3600,
                 tensor_active_pct_avg=50.0, sm_clock_mhz_avg=1980.0)
        for h in GpuHold.objects.filter(instance=instance)])
    now = timezone.now()
    billing_meter_runs.meter_window(actor=ops, start=pricing.floor_day(now - timedelta(days=1)), end=now, now=now)
    [row] = useful_work.work(acme, now=now, days=2)
    assert row.mfu_pct == 49.0  # 50% tensor activity at the top clock × calibration 0.98
    assert row.tflops == 969.6  # two H100s at 0.49 × 989.4 each
    # 2 GPUs × 2 h × 3.00, a cent more when the two hours straddle midnight UTC (each
    # day's charge is rounded to the cent on its own, half up)
    straddles = pricing.floor_day(now) > instance.created_at
    assert row.cost in ((Decimal("12.00"), Decimal("12.01")) if straddles else (Decimal("12.00"),))
    assert row.per_pflop_hour == (row.cost / Decimal("0.9696")).quantize(Decimal("0.01"))  # 12.38 for 12.00
