"""Cost per useful work, read from billing's own figures: each day's allocated cost (what
was billed for instances), its effective part (the cost of GPU-seconds with real activity)
and waste % (idle cost ÷ the cost of instances with telemetry), from ``billing.costs.idle_cost``;
and dollars per PFLOP-hour of estimated tensor work, from ``billing.costs.cost_per_pflop_hour``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from billing import costs, pricing
from billing.models import Charge


@dataclass(frozen=True)
class DayWaste:
    day: date
    allocated: Decimal
    effective: Decimal | None
    idle: Decimal
    waste_pct: Decimal | None


def waste_by_day(team, *, now: datetime, days: int) -> list[DayWaste]:
    charges = Charge.objects.filter(team=team)
    out = []
    first = pricing.floor_day(now) - timedelta(days=days - 1)
    for k in range(days):
        start = first + timedelta(days=k)
        summary = costs.idle_cost(charges, start, start + pricing.DAY)
        allocated = summary.known_cost + summary.unknown_cost
        known = summary.known_cost
        waste = (summary.idle_cost * 100 / known).quantize(Decimal("0.1")) if known > 0 else None
        out.append(DayWaste(start.date(), allocated, known - summary.idle_cost if known > 0 else None,
                            summary.idle_cost, waste))
    return out


def per_pflop_hour(team, *, now: datetime, days: int) -> list[costs.FlopsCostRow]:
    start = pricing.floor_day(now) - timedelta(days=days - 1)
    return costs.cost_per_pflop_hour(Charge.objects.filter(team=team), start, now)
