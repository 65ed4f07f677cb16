from decimal import Decimal

import pytest
from billing_support import at

from billing import budgets


@pytest.fixture
def november(play, meter, bob, acme):
    play(bob, acme, "a", runs=[(at(3, 10), at(3, 12), "terminate")])
    play(bob, acme, "b", runs=[(at(4, 10), at(4, 11), "terminate")], pricing="spot")
    meter(now=at(2, month=12))


@pytest.mark.parametrize(("group_by", "rows"), [
    ("day", [("2026-11-03", "4.00"), ("2026-11-04", "0.72")]),
    ("instance", [("a", "4.00"), ("b", "0.72")]),
    ("model", [("H100-80GB", "4.72")]),
    ("pricing_category", [("Standard", "4.00"), ("Dynamic", "0.72")]),
    ("team", [("Acme", "4.72")]),
])
def test_costs_group_by(november, api, bob, group_by, rows):
    body = api(bob).get(f"/api/v1/costs/?group_by={group_by}&start=2026-11-01&end=2026-12-01").json()
    assert [(r["label"], r["billed_cost"]) for r in body["rows"]] == rows
    assert (body["total"], body["currency"]) == ("4.72", "USD")


def test_month_to_date_is_what_was_metered_this_month(november, acme, play, meter, bob):
    play(bob, acme, "c", runs=[(at(1, 0, month=12), None, "")])
    meter(start=at(1, month=12), end=at(2, month=12), now=at(1, 3, month=12))
    assert budgets.month_to_date(acme, now=at(1, 3, month=12)) == Decimal("6.00")


def test_the_savings_hint_prices_a_reservation_at_actual_usage(play, meter, bob, acme):
    from billing import costs
    from billing.models import UsageRecord

    play(bob, acme, runs=[(at(2), at(30), "terminate")], count=3)
    meter(now=at(2, month=12))
    hint = costs.savings_hints(UsageRecord.objects.filter(team=acme), at(1, month=12))[0]
    # 28 of 30 days at 3 GPUs: reserving all 3 at 1.20 beats 2.00 on-demand.
    assert (hint.gpu_model, hint.gpus) == ("H100-80GB", 3)
    assert (hint.on_demand_cost, hint.with_reservation, hint.saving) == (
        Decimal("4032.00"), Decimal("2592.00"), Decimal("1440.00"))
