"""What a scaling group costs, from billing's own functions (one definition of cost):
the metered charges of the instances it launched, and the price per hour of those
billed now from billing's price book. The group page and the API both read these."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from billing import costs as billing_costs
from billing import pricing
from billing.models import Charge, currency
from instances import catalog
from instances.models import HOLDING_STATES, Instance

from .models import ScalingGroup


@dataclass(frozen=True)
class GroupCost:
    month_to_date: Decimal  # metered charges of the group's instances this month
    per_hour: Decimal  # what the group's instances billed now cost per hour
    currency: str


def charges(group: ScalingGroup):
    return Charge.objects.filter(instance__scaling_member__group=group)


def group_cost(group: ScalingGroup, *, now: datetime) -> GroupCost:
    held = Instance.objects.filter(scaling_member__group=group, state__in=HOLDING_STATES).select_related(
        "gpu_model", "slice_profile__gpu_model")
    prices = catalog.instance_costs(list(held), now=now)
    per_hour = sum((c.price_per_hour for c in prices.values() if c.price_per_hour is not None), Decimal("0"))
    return GroupCost(billing_costs.month_to_date(charges(group), now), per_hour, currency())


def daily(group: ScalingGroup, *, now: datetime, days: int = 14) -> tuple[list[date], dict[str, list[Decimal]]]:
    """The group's cost per UTC day over the last ``days``, by pricing category."""
    end = pricing.floor_day(now) + timedelta(days=1)
    return billing_costs.daily_by_category(charges(group), end - timedelta(days=days), end)
