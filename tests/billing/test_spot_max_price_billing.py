from decimal import Decimal

from billing_support import at

from billing import price_changes, pricing
from billing.models import Charge
from instances import lifecycle as instance_lifecycle
from instances import preemption as instance_preemption
from instances.models import PreemptionNotice

# H100 spot is 0.72 per GPU-hour from the catalog start (billing_support.SPOT).


def test_the_spot_rate_is_the_spot_price_capped_at_the_max_price():
    assert pricing.spot_rate(Decimal("0.72"), None) == Decimal("0.72")
    assert pricing.spot_rate(Decimal("0.72"), Decimal("1.00")) == Decimal("0.72")
    assert pricing.spot_rate(Decimal("1.44"), Decimal("1.00")) == Decimal("1.00")


def _spot_with_max(launch, prices, bob, acme, max_price="1.00"):
    instance = launch(bob, acme, pricing="spot", max_price=max_price, at=at(3, 9, 59, 30))
    return instance_lifecycle.mark_running(instance=instance, at=at(3, 10))


def test_a_price_above_the_max_is_never_billed_above_it(launch, prices, meter, bob, acme, ops):
    instance = _spot_with_max(launch, prices, bob, acme)
    price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly=Decimal("1.44"), now=at(3, 11))
    notice = PreemptionNotice.objects.get(instance=instance)
    instance_preemption.preempt_due(now=notice.preempt_at)
    meter()
    # an hour at 0.72, then the 2-minute notice at the max price 1.00 (not 1.44): 0.7533…
    assert [c.billed_cost for c in Charge.objects.filter(instance=instance)] == [Decimal("0.75")]


def test_the_price_per_hour_shown_now_is_capped_too(launch, prices, bob, acme, ops, api):
    instance = _spot_with_max(launch, prices, bob, acme, max_price="0.90")
    price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly=Decimal("1.44"), now=at(3, 11))
    from instances import catalog

    cost = catalog.instance_costs([instance], now=at(3, 11, 1))[instance.pk]
    assert cost.price_per_hour == Decimal("0.90")
    cost = catalog.instance_costs([instance], now=at(3, 10, 30))[instance.pk]
    assert cost.price_per_hour == Decimal("0.72")


def test_without_a_max_price_spot_pays_the_spot_price(play, meter, bob, acme, ops):
    play(bob, acme, runs=[(at(3, 10), at(3, 11, 2), "preempt")], pricing="spot")
    price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly=Decimal("1.44"), now=at(3, 11))
    meter()
    # 3600 s × 0.72 + 120 s × 1.44 = 2764.8 price-seconds: 0.768
    assert [c.billed_cost for c in Charge.objects.all()] == [Decimal("0.77")]
