"""Savings fixtures: a catalog where smaller shapes cost less, and minute telemetry
written for an instance's devices as if its agent had reported it."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from billing import price_changes as billing_price_changes
from billing.models import Price
from instances import lifecycle as instance_lifecycle
from instances.models import GpuHold, SliceProfile
from monitoring.models import Rollup1m

SINCE = datetime(2026, 1, 1, tzinfo=UTC)
PRICES = {"H100-80GB": "3.00", "A100-80GB": "2.00", "H200-141GB": "4.00", "A100-80GB:mig:1g.10gb": "0.40",
          "H100-80GB:mig:1g.10gb": "0.50"}
GB = 2**30


@pytest.fixture
def catalog(fleet, ops):
    SliceProfile.objects.create(gpu_model=fleet["h100"], kind="mig", name="1g.10gb", memory_gb=10, slices_per_gpu=7)
    Price.objects.all().delete()
    for sku, hourly in PRICES.items():
        billing_price_changes.set_price(actor=ops, sku=sku, kind="on_demand", hourly=hourly, effective_from=SINCE, now=SINCE)
    return PRICES


@pytest.fixture
def running(launch, catalog):
    """Launch and run an instance for ``team`` from two hours ago."""

    def _running(actor, team, name, model="H100-80GB", count=1, **kwargs):
        start = timezone.now() - timedelta(hours=2)
        instance = launch(actor, team, name=name, model=model, count=count, at=start - timedelta(seconds=30), **kwargs)
        if instance.state != "running":
            instance_lifecycle.mark_running(instance=instance, at=start)
        instance.refresh_from_db()
        return instance

    return _running


@pytest.fixture
def telemetry():
    """Minute rollups for each device the instance holds, over the last ``minutes``:
    ``mem_gb`` used (average; the peak 5% above) and ``activity`` percent (SM, tensor)."""

    def _write(instance, *, minutes=90, mem_gb=10.0, activity=50.0, dram=None):
        end = timezone.now().replace(second=0, microsecond=0)
        rows = []
        for hold in GpuHold.objects.filter(instance=instance, end=None):
            for k in range(minutes):
                rows.append(Rollup1m(
                    bucket=end - timedelta(minutes=k + 1), gpu_id=hold.gpu_id, slice_id=hold.slice_id,
                    instance=instance, team_id=instance.team_id, samples=60, observed_s=60.0,
                    mem_used_avg=mem_gb * GB, mem_used_max=mem_gb * GB * 1.05, gpu_util_avg=activity,
                    sm_occupancy_pct_avg=activity, tensor_active_pct_avg=activity,
                    dram_bw_util_pct_avg=activity if dram is None else dram,
                ))
        Rollup1m.objects.bulk_create(rows)

    return _write


MJ_PER_KWH = 3.6e9


@pytest.fixture
def metered(alice, acme, running):
    """An instance of 2 GPUs whose counters rose by 1.8 kWh and 0.9 kWh over 90 minutes
    (readings at uneven steps: the counter, not power × time)."""
    instance = running(alice, acme, "train", count=2)
    end = timezone.now().replace(second=0, microsecond=0)
    rows = []
    for hold, total_kwh in zip(GpuHold.objects.filter(instance=instance), (1.8, 0.9), strict=True):
        counter, step = 10**12, total_kwh * MJ_PER_KWH / 90
        for k in range(90, 0, -1):
            delta = step * (1.5 if k % 2 else 0.5)
            counter += int(delta)
            rows.append(Rollup1m(bucket=end - timedelta(minutes=k), gpu_id=hold.gpu_id, instance=instance,
                                 team_id=acme.pk, samples=60, observed_s=60, energy_mj_delta=int(delta),
                                 energy_mj_last=counter))
    Rollup1m.objects.bulk_create(rows)
    return instance
