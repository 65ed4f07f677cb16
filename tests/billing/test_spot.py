from decimal import Decimal

from billing_support import at

from billing import price_changes
from billing.models import Charge


def _cost(name):
    return sum((c.billed_cost for c in Charge.objects.filter(instance__name=name)), Decimal("0.00"))


def test_spot_is_billed_at_the_price_in_effect_each_second(play, meter, bob, acme, ops):
    price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly=Decimal("1.08"), now=at(3, 11))
    play(bob, acme, runs=[(at(3, 10), at(3, 12), "terminate")], pricing="spot")
    meter()
    assert _cost("job") == Decimal("1.80")


def test_a_run_preempted_by_the_platform_in_its_first_hour_is_free(play, meter, bob, acme):
    play(bob, acme, runs=[(at(3, 10), at(3, 10, 59, 59), "preempt")], count=2, pricing="spot")
    meter()
    charge = Charge.objects.get()
    assert (charge.billed_cost, charge.priced_seconds, charge.list_cost) == (Decimal("0.00"), 2 * 3599, Decimal("4.00"))


def test_a_run_preempted_after_an_hour_pays_for_every_second(play, meter, bob, acme):
    play(bob, acme, runs=[(at(3, 10), at(3, 11), "preempt")], pricing="spot")
    meter()
    assert _cost("job") == Decimal("0.72")


def test_a_run_the_user_ends_in_its_first_hour_is_billed(play, meter, bob, acme):
    play(bob, acme, runs=[(at(3, 10), at(3, 10, 30), "terminate")], pricing="spot")
    meter()
    assert _cost("job") == Decimal("0.36")


def test_a_free_run_across_midnight_is_free_on_both_days(play, meter, bob, acme):
    play(bob, acme, runs=[(at(3, 23, 30), at(4, 0, 20), "preempt")], pricing="spot")
    meter()
    assert [c.billed_cost for c in Charge.objects.order_by("period_start")] == [Decimal("0.00"), Decimal("0.00")]
