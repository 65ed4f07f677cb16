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


def group_costs(groups, *, now: datetime) -> dict[int, GroupCost]:
    """Each group's cost, for a page of groups in two queries: this month's charges by
    group (the cost explorer's own grouping) and the price now of their held instances."""
    ids = [g.pk for g in groups]
    start = pricing.month_start(now)
    month = billing_costs.in_range(Charge.objects.filter(instance__scaling_member__group__in=ids), start,
                                   pricing.next_month(start))
    spent = {int(row["key"]): row["billed_cost"] for row in billing_costs.grouped(month, "scaling_group")}
    held = list(Instance.objects.filter(scaling_member__group__in=ids, state__in=HOLDING_STATES).select_related(
        "gpu_model", "slice_profile__gpu_model", "scaling_member"))
    per_hour = dict.fromkeys(ids, Decimal("0"))
    prices = catalog.instance_costs(held, now=now)
    for instance in held:
        price = getattr(prices.get(instance.pk), "price_per_hour", None)
        if price is not None:
            per_hour[instance.scaling_member.group_id] += price
    unit = currency()
    return {pk: GroupCost(spent.get(pk, Decimal("0.00")), per_hour[pk], unit) for pk in ids}


def group_cost(group: ScalingGroup, *, now: datetime) -> GroupCost:
    return group_costs([group], now=now)[group.pk]


def daily(group: ScalingGroup, *, now: datetime, days: int = 14) -> tuple[list[date], dict[str, list[Decimal]]]:
    """The group's cost per UTC day over the last ``days``, by pricing category."""
    end = pricing.floor_day(now) + timedelta(days=1)
    return billing_costs.daily_by_category(charges(group), end - timedelta(days=days), end)
