"""One definition of each figure a team's month is described by, used by every page,
API and export check (``reconcile_costs``):

- ``month_to_date``: the month's rated charges (usage and unused commitment), **before
  credits**: what the cost explorer, budgets and forecasts count;
- ``credits``: the month's invoice corrections and adjustments (a credit is negative);
- ``month_to_date_after_credits``: the two together: the invoice total;
- ``run_rate_per_hour``: what running instances and reservations bill per hour now;
- ``forecast``: month-end spend before credits, never below month to date plus the run
  rate to month end (``billing.forecast``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.utils import timezone

from . import costs, forecast, pricing, rates
from .models import Charge, Invoice


@dataclass(frozen=True)
class TeamMonth:
    team_id: int
    month: date
    current: bool
    month_to_date: Decimal
    credits: Decimal
    invoice: Invoice | None
    run_rate_per_hour: Decimal | None
    committed_per_hour: Decimal | None
    forecast: forecast.Forecast | None
    as_of: datetime | None

    @property
    def month_to_date_after_credits(self) -> Decimal:
        return self.month_to_date + self.credits


def team_month(team_id: int, month: date | None = None, *, now: datetime | None = None,
               rate: rates.RunRate | None = None) -> TeamMonth:
    """The figures of ``team_id``'s ``month`` (default: the current month, UTC)."""
    now = now or timezone.now()
    start = pricing.month_start(month or now)
    current = start <= now < pricing.next_month(start)
    charges = Charge.objects.filter(team_id=team_id)
    usage = costs.total(costs.in_range(charges, start, pricing.next_month(start)))
    invoice = Invoice.objects.filter(team_id=team_id, month=start.date()).first()
    credits = invoice.adjustments if invoice is not None else Decimal("0.00")
    run_rate = committed = outlook = None
    if current:
        rate = rate or rates.run_rate(team_ids=[team_id], now=now)
        run_rate, committed = rate.team(team_id), rate.team_committed(team_id)
        outlook = costs.forecast(charges, now, run_rate, committed)
    return TeamMonth(
        team_id=team_id, month=start.date(), current=current, month_to_date=usage, credits=credits, invoice=invoice,
        run_rate_per_hour=run_rate, committed_per_hour=committed, forecast=outlook,
        as_of=rates.metered_until(now) if current else None,
    )
