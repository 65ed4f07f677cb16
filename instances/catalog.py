"""What instances need to know about prices, without importing billing.

Imports point one way (billing -> instances), yet a launch must refuse a SKU nobody has
priced, and instance pages show what an instance costs. So billing registers a
``PriceBook`` when the app loads (``billing.apps``); instances ask it through the
functions here. With no book registered (a deployment without billing) nothing is
refused and no cost is shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Protocol


@dataclass(frozen=True)
class InstanceCost:
    """``price_per_hour``: what the instance costs per hour now (None: not billed now);
    ``month_to_date``: its metered cost this month, up to ``as_of``; ``so_far``: what it
    has cost this month at the moment asked, billing's figure (metered, plus the price
    per hour from ``since``: where metering stopped, or its run began if later)."""

    price_per_hour: Decimal | None
    month_to_date: Decimal
    as_of: datetime | None
    note: str = ""  # how the price is made up, where that is not obvious (reserved)
    since: datetime | None = None
    so_far: Decimal | None = None


@dataclass(frozen=True)
class Quote:
    """What ``count`` GPUs (or slices) of a SKU under a pricing model would cost per hour
    if launched now (None: no price), and one line saying how that price is made."""

    price_per_hour: Decimal | None
    per_gpu_hour: Decimal | None
    note: str


@dataclass(frozen=True)
class SpotOutlook:
    """A SKU's spot price now, its range over the last ``days`` days, the on-demand price
    and what spot saves against it (whole percent), with the chart of that range."""

    price: Decimal
    low: Decimal
    high: Decimal
    on_demand: Decimal | None
    saving_pct: int | None
    days: int
    figure: dict


class PriceBook(Protocol):
    def quote(self, *, sku: str, pricing_model: str, count: int, team_id: int | None, at: datetime) -> Quote:
        """The price of launching now."""

    def missing_price(self, *, sku: str, pricing_model: str, at: datetime) -> str | None:
        """Why ``sku`` cannot be launched under ``pricing_model`` at ``at``, or None."""

    def instance_costs(self, instances: Iterable, *, now: datetime) -> dict[int, InstanceCost]:
        """{instance id: its cost} for the given instances, in a few queries."""

    def spot_outlook(self, *, sku: str, at: datetime) -> SpotOutlook | None:
        """The spot price of ``sku`` now and lately, or None where it has none."""


_book: PriceBook | None = None


def register(book: PriceBook | None) -> None:
    global _book
    _book = book


def missing_price(*, sku: str, pricing_model: str, at: datetime) -> str | None:
    return None if _book is None else _book.missing_price(sku=sku, pricing_model=pricing_model, at=at)


def instance_costs(instances: Iterable, *, now: datetime) -> dict[int, InstanceCost]:
    return {} if _book is None else _book.instance_costs(instances, now=now)


def quote(*, sku: str, pricing_model: str, count: int, team_id: int | None, at: datetime) -> Quote | None:
    if _book is None:
        return None
    return _book.quote(sku=sku, pricing_model=pricing_model, count=count, team_id=team_id, at=at)


def spot_outlook(*, sku: str, at: datetime) -> SpotOutlook | None:
    return None if _book is None else _book.spot_outlook(sku=sku, at=at)
