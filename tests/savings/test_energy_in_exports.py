"""The FOCUS export carries x_EnergyKWh and x_CarbonKgCO2e per charge row, and its
energy adds up to the counters' increase while the instance was billed (within 0.1%)."""

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import meter_runs as billing_meter_runs
from billing import pricing
from monitoring.models import Rollup1m
from savings import energy

MJ_PER_KWH = 3.6e9


def _focus(api, user, start, end):
    body = b"".join(api(user).get(f"/api/v1/costs/export/?format=focus&start={start:%Y-%m-%d}"
                                  f"&end={end:%Y-%m-%d}").streaming_content)
    return list(csv.DictReader(io.StringIO(body.decode())))


def test_export_energy_is_the_counters_increase(alice, ops, fleet, acme, metered, api):
    energy.set_footprint(actor=ops, region=fleet["region"], pue="1.10", grid_g_co2e_per_kwh="300")
    now = timezone.now()
    day = pricing.floor_day(now - timedelta(hours=3))
    billing_meter_runs.meter_window(actor=ops, start=day, end=now, now=now)
    rows = [r for r in _focus(api, alice, day, day + timedelta(days=2)) if r["ResourceName"] == "train"]
    assert rows
    # A charge row with no reading in its period exports blank (the run began before the
    # first counter reading: the day before, when this runs in the first hours after 00:00 UTC).
    kwh = sum(Decimal(r["x_EnergyKWh"] or 0) for r in rows)
    increase = 0
    for gpu in set(Rollup1m.objects.filter(instance=metered).values_list("gpu_id", flat=True)):
        mine = list(Rollup1m.objects.filter(instance=metered, gpu_id=gpu).order_by("bucket"))
        increase += mine[-1].energy_mj_last - (mine[0].energy_mj_last - mine[0].energy_mj_delta)
    assert float(kwh) == pytest.approx(increase / MJ_PER_KWH, rel=0.001)
    kg = sum(Decimal(r["x_CarbonKgCO2e"] or 0) for r in rows)
    assert float(kg) == pytest.approx(increase / MJ_PER_KWH * 1.1 * 0.3, rel=0.001)


def test_reconcile_costs_reads_the_exported_energy_against_the_counters(alice, ops, acme, metered, api):
    from django.core.management import call_command

    from billing import reconcile

    now = timezone.now()
    billing_meter_runs.meter_window(actor=ops, start=pricing.floor_day(now - timedelta(hours=3)), end=now, now=now)
    assert reconcile.energy_differs() == []
    out = io.StringIO()
    call_command("reconcile_costs", stdout=out)
    assert "reconcile to the cent" in out.getvalue()


def test_an_export_energy_off_from_the_counters_is_named(ops, acme, metered, monkeypatch):
    from billing import exports, reconcile

    now = timezone.now()
    billing_meter_runs.meter_window(actor=ops, start=pricing.floor_day(now - timedelta(hours=3)), end=now, now=now)
    monkeypatch.setattr(exports, "_energy_source", lambda rows: {r["id"]: (1000.0, None) for r in rows})
    lines = reconcile.energy_differs()  # two months in the first three hours of one
    assert lines and all(line.startswith("Acme") and "energy in the FOCUS export" in line for line in lines)
