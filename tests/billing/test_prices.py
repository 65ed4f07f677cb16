from datetime import timedelta
from decimal import Decimal

from billing_support import CATALOG_START, at

from audit.models import AuditEvent
from billing import price_changes
from billing.models import Charge, Price
from billing.prices import ON_DEMAND, in_effect


def test_a_new_price_ends_the_open_one_where_it_starts(prices, ops):
    price_changes.set_price(actor=ops, sku="H100-80GB", kind="on_demand", hourly=Decimal("1.50"),
                       effective_from=at(10), now=at(1))
    periods = list(Price.objects.filter(sku="H100-80GB", kind="on_demand").values_list("effective_from", "effective_until", "hourly"))
    assert periods == [(CATALOG_START, at(10), Decimal("2.000000")), (at(10), None, Decimal("1.500000"))]


def test_a_price_for_a_while_resumes_the_old_one_after(prices, ops):
    price_changes.set_price(actor=ops, sku="H100-80GB", kind="on_demand", hourly=Decimal("1.50"),
                       effective_from=at(10), effective_until=at(12), now=at(1))
    assert in_effect(ON_DEMAND, ["H100-80GB"], at(11))["H100-80GB"] == Decimal("1.50")
    assert in_effect(ON_DEMAND, ["H100-80GB"], at(13))["H100-80GB"] == Decimal("2.00")


def test_a_price_change_mid_run_splits_the_charge(prices, play, meter, ops, bob, acme):
    price_changes.set_price(actor=ops, sku="H100-80GB", kind="on_demand", hourly=Decimal("3.00"),
                       effective_from=at(3, 12), now=at(1))
    play(bob, acme, runs=[(at(3, 10), at(3, 14), "terminate")])
    meter()
    charges = Charge.objects.order_by("unit_price").values_list("unit_price", "billed_cents")
    assert list(charges) == [(Decimal("2.000000"), 400), (Decimal("3.000000"), 600)]


def test_a_price_never_changes_what_was_already_metered(prices, play, meter, ops, bob, acme):
    play(bob, acme, runs=[(at(3, 10), at(3, 14), "terminate")])
    meter(now=at(4))
    price_changes.set_price(actor=ops, sku="H100-80GB", kind="on_demand", hourly=Decimal("9.00"),
                       effective_from=at(4), now=at(4))
    meter(now=at(5))
    assert Charge.objects.get().billed_cost == Decimal("8.00")


def test_setting_a_price_is_audited(prices, ops):
    price_changes.set_price(actor=ops, sku="A100-80GB", kind="on_demand", hourly=Decimal("1.10"),
                       effective_from=at(10), now=at(1))
    events = AuditEvent.objects.filter(action="billing.price.set", actor_name="ops")
    assert [e.details["hourly"] for e in events if e.details["sku"] == "A100-80GB"] == ["1.00", "1.10"]


def test_only_operators_set_prices(prices, api, alice):
    later = (at(1) + timedelta(days=400)).isoformat()
    response = api(alice).post("/api/v1/prices/", {"sku": "H100-80GB", "hourly": "1.00", "effective_from": later})
    assert response.status_code == 403


def test_everyone_reads_the_catalog(prices, api, bob):
    assert api(bob).get("/api/v1/prices/?sku=H100-80GB").json()["count"] == 2
