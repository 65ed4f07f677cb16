"""Commitment advice: per team and GPU model, the 1-year reservation size that would
have cost least over the last days of the team's on-demand usage of whole GPUs
(``billing.costs.savings_hints``, billing's own arithmetic), with what it rests on:
coverage (the share of those GPU-seconds it would have covered), utilisation (the share
of its reserved GPU-seconds that usage would have filled, the forecast if usage goes on
as it did) and the break-even utilisation (a 1-year GPU costs 60% of on-demand, so it
pays off above 60% use). ``backtest`` replays the window through the real metering with
and without it, in a transaction that is always rolled back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Sum

from billing import costs, metering, pricing
from billing.models import Charge, Reservation, Term, UsageRecord
from instances.models import GpuModel, Instance, PricingModel


@dataclass(frozen=True)
class CommitmentAdvice:
    gpu_model: str
    gpus: int
    days: int
    on_demand_cost: Decimal
    with_reservation: Decimal
    saving: Decimal
    reserved_hourly: Decimal
    coverage_pct: float
    utilisation_pct: float
    break_even_pct: float


def advise(team, *, now: datetime, days: int = 30) -> list[CommitmentAdvice]:
    usage = UsageRecord.objects.filter(team=team)
    start = now - timedelta(days=days)
    out = []
    for hint in costs.savings_hints(usage, now, days):
        spans = [(max(s, start), min(e, now), g) for s, e, g in usage.filter(
            sku=hint.gpu_model, pricing_model="on_demand", end__gt=start, start__lt=now).values_list(
            "start", "end", "gpus")]
        profile = pricing.concurrency_profile(spans)
        used = sum(level * secs for level, secs in profile.items())
        covered = sum(min(level, hint.gpus) * secs for level, secs in profile.items())
        out.append(CommitmentAdvice(
            hint.gpu_model, hint.gpus, days, hint.on_demand_cost, hint.with_reservation, hint.saving,
            hint.reserved_hourly, 100 * covered / used if used else 0.0,
            100 * covered / (hint.gpus * pricing.seconds(start, now)), float(pricing.ONE_YEAR_FACTOR * 100)))
    return out


@dataclass(frozen=True)
class Backtest:
    start: datetime
    end: datetime
    without: Decimal
    with_reservation: Decimal


def backtest(team, advice: CommitmentAdvice, *, now: datetime, days: int) -> Backtest:
    """The team's charges over the last ``days`` whole UTC days, metered as they were and
    metered again with the advised reservation in force from the window's start (and the
    team's on-demand whole-GPU instances of the model billed as reserved). Nothing stays:
    the transaction is rolled back."""
    end = pricing.floor_day(now)
    start = end - timedelta(days=days)
    with transaction.atomic():
        without = _metered_total(team, start, end, now)
        model = GpuModel.objects.get(name=advice.gpu_model)
        listed = Decimal(advice.reserved_hourly)
        Reservation.objects.create(team=team, gpu_model=model, gpu_count=advice.gpus, term=Term.ONE_YEAR,
                                   start=start, end=pricing.term_end(start, "1y"), hourly=listed, created_at=start)
        Instance.objects.filter(team=team, gpu_model=model, slice_profile=None,
                                pricing_model=PricingModel.ON_DEMAND).update(pricing_model=PricingModel.RESERVED)
        with_reservation = _metered_total(team, start, end, now)
        transaction.set_rollback(True)
    return Backtest(start, end, without, with_reservation)


def _metered_total(team, start: datetime, end: datetime, now: datetime) -> Decimal:
    metering.meter(start, end, now=now)
    cents = Charge.objects.filter(team=team, period_start__gte=start, period_start__lt=end).aggregate(
        c=Sum("billed_cents"))["c"]
    return pricing.from_cents(cents)
