"""Billing demo data: a catalog (with one price change), hourly spot price history,
reservations for Acme and Globex, three months of usage history across on-demand,
reserved and spot (preemptions included, some in their first hour), then metering,
this month's drafts, budgets and an adjustment; and, once every app has written its
history (``close_months``), last months' invoices issued. Idempotent: a second run adds
nothing."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from console.models import Team
from console.request_context import recorded_at
from instances import lifecycle as instance_lifecycle
from instances import preemption as instance_preemption
from instances.models import GpuModel, Instance, SliceProfile

from . import budgets, figures, invoices, meter_runs, price_changes, pricing, reservations
from .models import (
    Adjustment,
    Budget,
    Invoice,
    InvoiceStatus,
    MeterState,
    Price,
    Reservation,
    SpotPrice,
    SpotSource,
)

HISTORY_MONTHS = 3
ISSUED_AFTER = timedelta(minutes=7)  # the hourly task's issue run, early on the 1st
DOWNTIME_CREDIT = Decimal("25.00")
DOWNTIME_REASON = "credit for host maintenance downtime"
ON_DEMAND = {
    "H100-80GB": "2.99", "A100-80GB": "1.79", "H200-141GB": "3.99", "A100-80GB:mig:1g.10gb": "0.29",
    "A100-80GB:mig:3g.40gb": "0.89", "H100-80GB:mig:1g.10gb": "0.49", "H100-80GB:vgpu:H100-20C": "0.79",
}
THREE_YEAR = {"H100-80GB": "1.49", "A100-80GB": "0.89", "H200-141GB": "1.99"}
# What low-priority jobs pay in idle capacity (jobs/): about a third of on-demand.
IDLE = {"H100-80GB": "0.99", "A100-80GB": "0.59", "H200-141GB": "1.29"}
# From the start of last month, H100s cost less (set in advance, as price changes are).
PRICE_CHANGE = ("H100-80GB", "2.79")
SPOT_SKUS = ("A100-80GB", "H100-80GB", "H200-141GB")

# team, name, model, count, pricing, slice profile, [(day, hour, minute, hours long, how)]
# ``how`` ends the run: stop, terminate or preempt (by the platform).
WORKLOADS = [
    ("Acme", "research", "H100-80GB", 2, "on_demand", None,
     [(d, 9, 0, 10, "stop") for d in (2, 3, 4, 5, 6)]),
    ("Acme", "api", "H100-80GB", 2, "on_demand", None, [(5, 0, 0, 20 * 24, "terminate")]),
    ("Acme", "train", "H100-80GB", 4, "reserved", None, [(8, 0, 0, 12 * 24, "terminate")]),
    ("Acme", "burst", "H100-80GB", 2, "reserved", None, [(12, 6, 0, 3 * 24, "terminate")]),
    ("Acme", "spot-a", "A100-80GB", 4, "spot", None, [(3, 10, 0, 0.67, "preempt")]),
    ("Acme", "spot-b", "A100-80GB", 4, "spot", None, [(16, 8, 0, 30, "preempt")]),
    ("Acme", "spot-c", "A100-80GB", 4, "spot", None, [(22, 0, 0, 48, "terminate")]),
    ("Acme", "notebook", "A100-80GB", 1, "on_demand", "1g.10gb", [(1, 8, 0, 26 * 24, "terminate")]),
    ("Acme", "smoke", "H100-80GB", 1, "on_demand", None, [(9, 12, 0, 20 / 3600, "terminate")]),
    ("Globex", "train", "H200-141GB", 8, "reserved", None, [(1, 0, 0, 9 * 24, "terminate")]),
    ("Globex", "serve", "H100-80GB", 1, "on_demand", "H100-20C", [(20, 0, 0, 15 * 24, "terminate")]),
    ("Globex", "render", "A100-80GB", 2, "spot", None, [(6, 12, 0, 0.5, "preempt")]),
    ("Globex", "batch", "H100-80GB", 2, "spot", None, [(18, 0, 0, 72, "terminate")]),
    ("Globex", "dev", "H100-80GB", 1, "on_demand", None, [(d, 9, 0, 8, "stop") for d in (10, 11, 12, 13, 14)]),
]


def seed_catalog(*, users) -> None:
    """The price catalog and spot price history: before any demo instance is launched,
    since a launch needs a price in effect."""
    now = timezone.now().replace(microsecond=0)
    current = pricing.month_start(now)
    catalog_start = _months_back(current, HISTORY_MONTHS) - timedelta(days=30)
    with transaction.atomic():
        _prices(users["ops"], catalog_start, current)
        _spot_history(catalog_start, now)


def seed(*, users, stdout=None) -> None:
    now = timezone.now().replace(microsecond=0)
    ops = users["ops"]
    current = pricing.month_start(now)
    first = _months_back(current, HISTORY_MONTHS)
    seed_catalog(users=users)
    with transaction.atomic():
        _reservations(users, first)
    with transaction.atomic():
        _history(users, first, now)
    with transaction.atomic():
        meter_runs.meter_window(actor=ops, start=first, end=now, now=now)
        MeterState.objects.update_or_create(id=1, defaults={"metered_until": now})
    with transaction.atomic():
        _budgets_and_credit(users, now)
    budgets.check_budgets(now=now, notify=False)


def close_months(*, stdout=None) -> None:
    """Month end for the demo's history, after every app has written its own: what ran
    is metered up to now, then each month that is over is issued as the hourly task
    would have issued it, early on the 1st of the next month (``ISSUED_AFTER``), oldest
    first. (Issued before another app's history reached into it, say jobs that began
    before midnight on the 1st, its usage would land as a correction on this month's
    draft.)"""
    now = timezone.now().replace(microsecond=0)
    meter_runs.meter_recent(now=now)
    issued = []
    for month in sorted({month for _, month in invoices.unissued(pricing.month_start(now).date())}):
        end = pricing.next_month(pricing.month_start(month))
        when = min(end + ISSUED_AFTER, now)
        with recorded_at(when):
            issued += invoices.issue_months(actor="system", before=end.date(), now=when)
    if stdout is not None:
        stdout.write(f"billing: {len(issued)} invoices issued; this month in draft.")


def _months_back(month: datetime, n: int) -> datetime:
    for _ in range(n):
        month = pricing.month_start(month - timedelta(days=1))
    return month


def _prices(ops, start: datetime, current: datetime) -> None:
    for kind, table in (("on_demand", ON_DEMAND), ("reserved_3y", THREE_YEAR), ("idle", IDLE)):
        for sku, hourly in table.items():
            if not Price.objects.filter(sku=sku, kind=kind).exists():
                with recorded_at(start):
                    price_changes.set_price(actor=ops, sku=sku, kind=kind, hourly=Decimal(hourly), effective_from=start,
                                       now=start)
    sku, hourly = PRICE_CHANGE
    change_at = _months_back(current, 1)
    if not Price.objects.filter(sku=sku, kind="on_demand", effective_from=change_at).exists():
        with recorded_at(change_at - timedelta(days=10)):
            price_changes.set_price(actor=ops, sku=sku, kind="on_demand", hourly=Decimal(hourly), effective_from=change_at,
                               now=change_at - timedelta(days=10))


def _spot_history(start: datetime, now: datetime) -> None:
    """An hourly random walk per SKU between 25% and 90% of on-demand (seeded, so the
    same every time)."""
    rng = random.Random(20261202)
    rows = []
    for sku in SPOT_SKUS:
        periods = Price.objects.filter(sku=sku, kind="on_demand").values_list("effective_from", "effective_until", "hourly")
        catalog = pricing.Schedule(sku, tuple(sorted(periods)))
        last = SpotPrice.objects.filter(sku=sku).order_by("-time").first()
        t = start if last is None else last.time + timedelta(hours=1)
        price = Decimal(ON_DEMAND[sku]) * Decimal("0.40") if last is None else last.hourly
        while t <= now:
            list_price = catalog.at(t)
            step = Decimal(rng.randint(-600, 600)) / 10000
            price = min(max(price * (1 + step), list_price * price_changes.SPOT_FLOOR), list_price * price_changes.SPOT_CEILING)
            price = price.quantize(Decimal("0.0001"))
            rows.append(SpotPrice(sku=sku, hourly=price, time=t, source=SpotSource.MARKET))
            t += timedelta(hours=1)
    SpotPrice.objects.bulk_create(rows, batch_size=2000, ignore_conflicts=True)


def _reservations(users, first: datetime) -> None:
    plans = [("Acme", "H100-80GB", 4, "1y", first, users["alice"]),
             ("Globex", "H200-141GB", 8, "3y", first + timedelta(days=14), users["charlie"])]
    for team_name, model, count, term, start, actor in plans:
        team = Team.objects.get(name=team_name)
        gpu_model = GpuModel.objects.get(name=model)
        if not Reservation.objects.filter(team=team, gpu_model=gpu_model, start=start).exists():
            with recorded_at(start):
                reservations.purchase_reservation(actor=actor, team=team, gpu_model=gpu_model, gpu_count=count,
                                              term=term, start=start, now=start)


def _history(users, first: datetime, now: datetime) -> None:
    actors = {"Acme": users["bob"], "Globex": users["charlie"]}
    month = first
    while month < now:
        for team_name, stem, model, count, pricing_model, profile, runs in WORKLOADS:
            name = f"{team_name.lower()}-{stem}-{month:%b}".lower()
            team = Team.objects.get(name=team_name)
            times = [(month + timedelta(days=d - 1, hours=h, minutes=m), timedelta(hours=long), how)
                     for d, h, m, long, how in runs]
            times = [(s, min(s + long, now - timedelta(hours=1)), how) for s, long, how in times
                     if s < now - timedelta(hours=2)]
            if not times or Instance.objects.filter(team=team, name=name).exists():
                continue
            _play(actors[team_name], team, name, model, count, pricing_model, profile, times)
        month = pricing.next_month(month)


def _play(actor, team, name, model, count, pricing_model, profile, runs) -> None:
    # Each action inside recorded_at(t): the audit log tells when the seeded action happened.
    gpu_model = GpuModel.objects.get(name=model)
    slice_profile = SliceProfile.objects.get(gpu_model=gpu_model, name=profile) if profile else None
    start = runs[0][0]
    with recorded_at(start - timedelta(seconds=90)):
        instance = instance_lifecycle.launch_instance(
            actor=actor, team=team, name=name, gpu_model=gpu_model, gpu_count=count, pricing_model=pricing_model,
            slice_profile=slice_profile, at=start - timedelta(seconds=90), provision=False,
        )
    for i, (s, e, how) in enumerate(runs):
        if i:
            with recorded_at(s - timedelta(seconds=90)):
                instance_lifecycle.start_instance(actor=actor, instance=instance, at=s - timedelta(seconds=90),
                                                 provision=False)
        with recorded_at(s):
            instance_lifecycle.mark_running(instance=instance, at=s)
        with recorded_at(e):
            if how == "preempt":
                instance_preemption.preempt_instance(instance=instance, reason="capacity reclaimed for on-demand", at=e)
            elif how == "stop" and i < len(runs) - 1:
                instance_lifecycle.stop_instance(actor=actor, instance=instance, at=e, finish=False)
            else:
                instance_lifecycle.terminate_instance(actor=actor, instance=instance, at=e)
        if how == "stop" and i < len(runs) - 1:
            with recorded_at(e + timedelta(seconds=45)):
                instance_lifecycle.finish_stop(instance=instance, at=e + timedelta(seconds=45))


def _budgets_and_credit(users, now: datetime) -> None:
    month = pricing.month_start(now).date()
    for team_name, factor, actor in (("Acme", Decimal("1.6"), users["alice"]), ("Globex", Decimal("0.9"), users["charlie"])):
        team = Team.objects.get(name=team_name)
        if Budget.objects.filter(team=team, month=month).exists():
            continue
        basis = figures.team_month(team.pk, now=now).forecast.point
        amount = max(Decimal(500), (basis * factor / 100).to_integral_value() * 100)
        budgets.create_budget(actor=actor, team=team, month=month, amount=amount, now=now)
    downtime_credit(actor=users["ops"], team=Team.objects.get(name="Acme"), now=now)


def downtime_credit(*, actor, team: Team, now: datetime) -> Adjustment:
    """The demo's one credit, made once: on this month's draft, or, while this month
    has not yet billed as much (early on the 1st), on last month's draft if that has,
    so that the credit takes no invoice below zero."""
    made = Adjustment.objects.filter(team=team, reason=DOWNTIME_REASON).first()
    if made is not None:
        return made
    invoice = None
    if figures.team_month(team.pk, now=now).month_to_date < DOWNTIME_CREDIT:
        last = pricing.month_start(pricing.month_start(now) - timedelta(days=1)).date()
        invoice = Invoice.objects.filter(team=team, month=last, status=InvoiceStatus.DRAFT,
                                         total__gte=DOWNTIME_CREDIT).first()
    return invoices.add_adjustment(actor=actor, team=team, amount=-DOWNTIME_CREDIT, reason=DOWNTIME_REASON,
                                   invoice=invoice, now=now)

