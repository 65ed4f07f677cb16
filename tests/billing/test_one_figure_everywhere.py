"""The launch quote, the run rate, metering and the spot chart price one scenario the
same: one price lookup (billing.prices) and one coverage rule (pricing.allocate)."""

from datetime import timedelta
from decimal import Decimal

from billing_support import at

from billing import price_changes, rates, reservations
from billing.models import Charge
from instances import lifecycle as instance_lifecycle
from instances.models import GpuModel

T = at(3, 10)


def _metered(instance, meter) -> Decimal:
    meter(now=T + timedelta(hours=2))
    cents = sum(Charge.objects.filter(instance=instance).values_list("billed_cents", flat=True))
    return Decimal(cents) / 100


def test_a_reserved_launch_costs_what_its_quote_said(prices, play, meter, ops, alice, acme):
    h100 = GpuModel.objects.get(name="H100-80GB")
    # Two reservations at different prices: 1 GPU at 1.20 (60% of 2.00), then 2 at 1.80
    # (60% of 3.00); a reserved instance already running holds the older one.
    reservations.purchase_reservation(actor=alice, team=acme, gpu_model=h100, gpu_count=1, term="1y", start=at(1),
                                      now=at(1))
    price_changes.set_price(actor=ops, sku="H100-80GB", kind="on_demand", hourly="3.00", effective_from=at(2),
                            now=at(1, 12))
    reservations.purchase_reservation(actor=alice, team=acme, gpu_model=h100, gpu_count=2, term="1y", start=at(2),
                                      now=at(1, 12))
    play(alice, acme, name="first", runs=[(at(3), None, "")], pricing="reserved")
    quote = rates.BillingPriceBook().quote(sku="H100-80GB", pricing_model="reserved", count=3, team_id=acme.pk, at=T)
    # What the older reservation is taken by is not on offer: 2 × 1.80 + 1 × 3.00.
    assert quote.price_per_hour == Decimal("6.60")
    launched = play(alice, acme, name="second", runs=[(T, None, "")], pricing="reserved", count=3)
    assert rates.run_rate(team_ids=[acme.pk], now=T + timedelta(minutes=30)).instances[launched.pk] == quote.price_per_hour
    instance_lifecycle.terminate_instance(actor=alice, instance=launched, at=T + timedelta(hours=1))
    assert _metered(launched, meter) == quote.price_per_hour


def test_a_spot_launch_costs_what_its_quote_and_chart_said(prices, play, meter, ops, bob, acme):
    price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly="0.90", now=at(3, 5))
    quote = rates.BillingPriceBook().quote(sku="H100-80GB", pricing_model="spot", count=2, team_id=acme.pk, at=T)
    outlook = rates.spot_outlook("H100-80GB", T)
    assert quote.price_per_hour == 2 * outlook.price == Decimal("1.80")
    assert Decimal(outlook.figure["data"][0]["y"][-1]) == outlook.price
    launched = play(bob, acme, name="spot", runs=[(T, None, "")], pricing="spot", count=2)
    assert rates.run_rate(team_ids=[acme.pk], now=T + timedelta(minutes=30)).instances[launched.pk] == quote.price_per_hour
    instance_lifecycle.terminate_instance(actor=bob, instance=launched, at=T + timedelta(hours=1))
    assert _metered(launched, meter) == quote.price_per_hour
