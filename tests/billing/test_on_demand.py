from decimal import Decimal

from billing_support import at

from billing.models import Charge


def test_it_bills_per_second_at_the_list_price(play, meter, bob, acme):
    play(bob, acme, runs=[(at(3, 10), at(3, 12, 30), "stop")], count=2)
    meter()
    charge = Charge.objects.get()
    assert (charge.priced_seconds, charge.billed_cost) == (2 * 9000, Decimal("10.00"))


def test_a_run_shorter_than_a_minute_pays_for_a_minute(play, meter, bob, acme):
    play(bob, acme, runs=[(at(3, 10), at(3, 10, 0, 20), "terminate")])
    meter()
    charge = Charge.objects.get()
    assert (charge.consumed_seconds, charge.priced_seconds) == (20, 60)
    assert charge.billed_cost == Decimal("0.03")


def test_each_short_run_has_its_own_minimum(play, meter, bob, acme):
    play(bob, acme, runs=[(at(3, 10), at(3, 10, 0, 10), "stop"), (at(3, 11), at(3, 11, 0, 50), "stop")])
    meter()
    assert Charge.objects.get().priced_seconds == 120


def test_a_run_across_midnight_is_split_by_day(play, meter, bob, acme):
    play(bob, acme, runs=[(at(3, 23), at(4, 1), "stop")])
    meter()
    assert [c.billed_cost for c in Charge.objects.order_by("period_start")] == [Decimal("2.00"), Decimal("2.00")]
