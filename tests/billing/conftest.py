"""Billing fixtures: a catalog in effect since 2026-01-01 and a way to play an
instance's lifecycle at chosen times. Prices are round so that a test's expected
amounts can be worked out by hand."""

from datetime import timedelta

import pytest
from billing_support import CATALOG_START, DEC, NOV, ON_DEMAND, SPOT, THREE_YEAR

from billing import meter_runs, price_changes
from billing.models import Price, SpotPrice
from instances import lifecycle as instance_lifecycle
from instances import preemption as instance_preemption


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    # The shared fixtures create users with passwords; billing tests never log in by password.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def prices(fleet, ops):
    # Billing tests work from this catalog alone, not the fleet's flat one.
    Price.objects.all().delete()
    SpotPrice.objects.all().delete()
    for sku, hourly in ON_DEMAND.items():
        price_changes.set_price(actor=ops, sku=sku, kind="on_demand", hourly=hourly, effective_from=CATALOG_START,
                           now=CATALOG_START)
    for sku, hourly in THREE_YEAR.items():
        price_changes.set_price(actor=ops, sku=sku, kind="reserved_3y", hourly=hourly, effective_from=CATALOG_START,
                           now=CATALOG_START)
    for sku, hourly in SPOT.items():
        price_changes.set_spot_price(actor=ops, sku=sku, hourly=hourly, now=CATALOG_START)
    return ON_DEMAND


@pytest.fixture
def play(launch, prices):
    """Launch an instance and walk it through ``runs`` = [(start, end or None, how)],
    how in stop / terminate / preempt; each run starts running at ``start``."""

    def _play(actor, team, name="job", runs=(), model="H100-80GB", count=1, pricing="on_demand", **kwargs):
        first = runs[0][0]
        instance = launch(actor, team, name=name, model=model, count=count, pricing=pricing,
                          at=first - timedelta(seconds=30), **kwargs)
        for i, (start, end, how) in enumerate(runs):
            if i:
                instance_lifecycle.start_instance(actor=actor, instance=instance, at=start - timedelta(seconds=30),
                                                 provision=False)
            instance_lifecycle.mark_running(instance=instance, at=start)
            if end is None:
                continue
            if how == "stop":
                instance_lifecycle.stop_instance(actor=actor, instance=instance, at=end, finish=False)
                instance_lifecycle.finish_stop(instance=instance, at=end)
            elif how == "preempt":
                instance_preemption.preempt_instance(instance=instance, at=end)
            else:
                instance_lifecycle.terminate_instance(actor=actor, instance=instance, at=end)
        instance.refresh_from_db()
        return instance

    return _play


@pytest.fixture
def meter(ops):
    def _meter(start=NOV, end=DEC, now=DEC):
        return meter_runs.meter_window(actor=ops, start=start, end=end, now=now)

    return _meter
