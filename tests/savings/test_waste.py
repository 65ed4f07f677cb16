"""Allocated vs effective cost and waste % per day, from billing's idle cost."""

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from billing import pricing
from billing import services as billing_services
from savings import useful_work


def test_an_idle_instance_is_all_waste_and_a_busy_one_none(alice, acme, ops, running, telemetry):
    telemetry(running(alice, acme, "held"), mem_gb=70, activity=0)
    telemetry(running(alice, acme, "train"), mem_gb=70, activity=90)
    now = timezone.now()
    billing_services.meter_window(actor=ops, start=pricing.floor_day(now - timedelta(hours=3)), end=now, now=now)
    today = useful_work.waste_by_day(acme, now=now, days=1)[-1]
    assert today.allocated > 0
    assert today.idle == today.allocated / 2 == today.effective
    assert today.waste_pct == Decimal("50.0")


def test_a_day_without_charges_has_no_waste_to_show(acme):
    [day] = useful_work.waste_by_day(acme, now=timezone.now(), days=1)
    assert (day.allocated, day.waste_pct) == (0, None)
