"""What a SKU costs per hour, decided once. Operators' catalog periods (on-demand,
3-year, idle capacity) and the spot steps are read as ``pricing.Schedule``s by
``schedules``; ``in_effect`` is the price at a moment. Metering rates a window from the
schedules; run rates, launch quotes, reservations, savings hints and the spot chart ask
``in_effect``: none of them reads the price tables itself."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal

from . import pricing
from .models import Price, PriceKind, SpotPrice

ON_DEMAND, RESERVED_3Y, IDLE = PriceKind.ON_DEMAND, PriceKind.RESERVED_3Y, PriceKind.IDLE
SPOT = "spot"  # not a catalog kind: spot prices are steps, each in force until the next


def schedules(kind: str, skus: Iterable[str] | None, start: datetime, end: datetime) -> dict[str, pricing.Schedule]:
    """{SKU: its prices of ``kind``, good for any stretch inside [start, end]} for
    ``skus`` (None: every SKU the catalog prices), SKUs with none left out. Catalog
    periods are few and read whole; spot steps are read from the one in force at
    ``start``."""
    if kind == SPOT:
        found = ((sku, _spot_steps(sku, start, end)) for sku in sorted(set(skus or ())))
        return {sku: pricing.Schedule.from_steps(sku, steps) for sku, steps in found if steps}
    periods = Price.objects.filter(kind=kind)
    if skus is not None:
        periods = periods.filter(sku__in=set(skus))
    found: dict[str, list] = defaultdict(list)
    for sku, frm, until, hourly in periods.values_list("sku", "effective_from", "effective_until", "hourly"):
        found[sku].append((frm, until, hourly))
    return {sku: pricing.Schedule(sku, tuple(sorted(p))) for sku, p in found.items()}


def _spot_steps(sku: str, start: datetime, end: datetime) -> list[tuple[datetime, Decimal]]:
    """The step in force at ``start`` and those after it up to ``end``."""
    steps = list(SpotPrice.objects.filter(sku=sku, time__lte=start).order_by("-time").values_list("time", "hourly")[:1])
    if end > start:
        steps += SpotPrice.objects.filter(sku=sku, time__gt=start, time__lte=end).order_by("time").values_list(
            "time", "hourly")
    return steps


def in_effect(kind: str, skus: Iterable[str], at: datetime) -> dict[str, Decimal]:
    """{SKU: price per GPU-hour of ``kind`` in effect at ``at``}; a SKU with none is
    left out."""
    out = {}
    for sku, schedule in schedules(kind, skus, at, at).items():
        for start, end, price in schedule.periods:
            if start <= at and (end is None or at < end):
                out[sku] = price
    return out
