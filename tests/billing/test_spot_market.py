import random
from decimal import Decimal

from billing_support import at

from audit.models import AuditEvent
from billing import price_changes
from billing.models import SpotPrice
from billing.prices import SPOT, in_effect


def test_the_simulated_market_moves_within_bounds_and_keeps_history(prices):
    SpotPrice.objects.all().delete()  # no operator price: the demo's market sets them
    rng = random.Random(7)
    for hour in range(48):
        price_changes.move_spot_market(now=at(3, 0).replace(hour=0) + hour * (at(3, 1) - at(3, 0)), rng=rng)
    h100 = list(SpotPrice.objects.filter(sku="H100-80GB").values_list("hourly", flat=True))
    assert len(h100) == 48
    assert all(Decimal("0.50") <= p <= Decimal("1.80") for p in h100)
    assert len(set(h100)) > 10


def test_the_simulated_market_never_overwrites_an_operators_price(prices):
    rng = random.Random(7)
    for hour in range(5):
        price_changes.move_spot_market(now=at(3, hour), rng=rng)
    assert list(SpotPrice.objects.filter(sku="H100-80GB").values_list("hourly", "source")) == [
        (Decimal("0.72"), "operator")
    ]


def test_the_simulated_market_is_not_scheduled_unless_a_demo_asks(settings):
    from billing import tasks

    settings.SPOT_MARKET_SIMULATION = False
    assert "billing.spot-market" not in tasks.schedule()
    settings.SPOT_MARKET_SIMULATION = True
    assert tasks.schedule()["billing.spot-market"] == (900, "billing.tasks.move_spot_market")


def test_an_operator_sets_a_spot_price_and_it_is_audited(prices, api, ops):
    response = api(ops).post("/api/v1/spot-prices/", {"sku": "A100-80GB", "hourly": "0.50"})
    assert response.status_code == 201
    assert in_effect(SPOT, ["A100-80GB"], SpotPrice.objects.latest("time").time)["A100-80GB"] == Decimal("0.50")
    assert AuditEvent.objects.filter(action="billing.spot_price.set", actor_name="ops").exists()


def test_only_operators_set_spot_prices(prices, api, alice):
    assert api(alice).post("/api/v1/spot-prices/", {"sku": "A100-80GB", "hourly": "0.01"}).status_code == 403


def test_everyone_reads_the_price_history(prices, api, bob):
    assert api(bob).get("/api/v1/spot-prices/?sku=H100-80GB").json()["count"] == 1
