from decimal import Decimal

import pytest
from billing_support import NOV, at

from billing import reservations
from billing.models import Charge, ChargeType, PricingCategory
from instances.models import GpuModel


@pytest.fixture
def reservation(prices, alice, acme):
    h100 = GpuModel.objects.get(name="H100-80GB")
    return reservations.purchase_reservation(actor=alice, team=acme, gpu_model=h100, gpu_count=2, term="1y",
                                         start=at(3), now=NOV)


def _billed(**filters):
    return sum((c.billed_cost for c in Charge.objects.filter(**filters)), Decimal("0.00"))


def test_a_one_year_reservation_costs_60_percent_of_on_demand(reservation):
    assert reservation.hourly == Decimal("1.200000")


def test_a_three_year_reservation_takes_the_catalog_price(prices, alice, acme):
    h100 = GpuModel.objects.get(name="H100-80GB")
    r = reservations.purchase_reservation(actor=alice, team=acme, gpu_model=h100, gpu_count=1, term="3y", start=at(3), now=NOV)
    assert r.hourly == Decimal("0.800000")


def test_it_is_billed_whether_used_or_not(reservation, meter):
    meter(start=at(3), end=at(4), now=at(5))
    assert _billed(charge_type=ChargeType.UNUSED_COMMITMENT) == Decimal("57.60")


def test_it_covers_up_to_its_gpus_and_the_rest_is_on_demand(reservation, play, meter, bob, acme):
    play(bob, acme, runs=[(at(3, 0), at(3, 10), "terminate")], count=3, pricing="reserved")
    meter(start=at(3), end=at(4), now=at(5))
    assert _billed(pricing_category=PricingCategory.COMMITTED, charge_type=ChargeType.USAGE) == Decimal("24.00")
    assert _billed(pricing_category=PricingCategory.STANDARD) == Decimal("20.00")
    assert _billed(charge_type=ChargeType.UNUSED_COMMITMENT) == Decimal("33.60")


def test_coverage_is_shared_across_the_teams_reserved_instances(reservation, play, meter, bob, acme):
    play(bob, acme, "first", runs=[(at(3, 0), at(3, 12), "terminate")], count=2, pricing="reserved")
    play(bob, acme, "second", runs=[(at(3, 6), at(3, 18), "terminate")], count=1, pricing="reserved")
    meter(start=at(3), end=at(4), now=at(5))
    second = Charge.objects.get(instance__name="second", pricing_category=PricingCategory.COMMITTED)
    assert second.priced_seconds == 6 * 3600
    assert Charge.objects.get(instance__name="second", pricing_category=PricingCategory.STANDARD).priced_seconds == 6 * 3600


def test_another_teams_reservation_covers_nothing(reservation, play, meter, charlie, globex):
    play(charlie, globex, runs=[(at(3, 0), at(3, 1), "terminate")], pricing="reserved")
    meter(start=at(3), end=at(4), now=at(5))
    assert _billed(team=globex, pricing_category=PricingCategory.STANDARD) == Decimal("2.00")


def test_a_reserved_slice_is_billed_on_demand(reservation, play, meter, bob, acme, fleet):
    play(bob, acme, runs=[(at(3, 0), at(3, 10), "terminate")], model="A100-80GB", pricing="reserved",
         slice_profile=fleet["mig"])
    meter(start=at(3), end=at(4), now=at(5))
    charge = Charge.objects.get(instance__isnull=False)
    assert (charge.pricing_category, charge.billed_cost) == (PricingCategory.STANDARD, Decimal("1.80"))
