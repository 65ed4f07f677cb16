from decimal import Decimal

from billing_support import DEC, at

from billing import budgets
from billing.models import Charge, Invoice, Price, UnratedUsage


def test_usage_with_no_price_is_held_and_every_other_team_bills_on(play, bob, charlie, acme, globex, meter):
    play(bob, acme, name="a", runs=[(at(3, 10), at(3, 12), "terminate")])
    play(charlie, globex, name="g", runs=[(at(3, 10), at(3, 12), "terminate")], model="H200-141GB")
    Price.objects.filter(sku="H200-141GB").delete()  # the catalog lost a price after launch
    result = meter()
    assert result.unrated == 1
    held = UnratedUsage.objects.get()
    assert (held.team, held.sku, held.gpu_seconds) == (globex, "H200-141GB", 7200)
    assert "No on-demand price for H200-141GB" in held.reason
    assert Invoice.objects.get(team=acme).total == Decimal("4.00")
    assert not Charge.objects.filter(team=globex).exists()


def test_held_usage_is_billed_once_priced_and_metered_again(play, charlie, globex, meter, ops):
    play(charlie, globex, name="g", runs=[(at(3, 10), at(3, 12), "terminate")], model="H200-141GB")
    Price.objects.filter(sku="H200-141GB").delete()
    meter()
    Price.objects.create(sku="H200-141GB", kind="on_demand", hourly=Decimal("3.60"), effective_from=at(1))
    meter()
    assert not UnratedUsage.objects.exists()
    assert Invoice.objects.get(team=globex).total == Decimal("7.20")


def test_operators_see_held_usage_and_teams_do_not(play, charlie, globex, meter, api, ops, alice):
    play(charlie, globex, name="g", runs=[(at(3, 10), at(3, 12), "terminate")], model="H200-141GB")
    Price.objects.filter(sku="H200-141GB").delete()
    meter()
    rows = api(ops).get("/api/v1/unrated-usage/").json()["results"]
    assert [(r["sku"], r["team"], r["gpu_hours"]) for r in rows] == [("H200-141GB", globex.pk, "2.0000")]
    assert api(alice).get("/api/v1/unrated-usage/").status_code == 403


def test_a_reserved_instance_without_a_list_price_is_held_too(play, bob, acme, meter):
    play(bob, acme, name="r", runs=[(at(3, 10), at(3, 11), "terminate")], pricing="reserved", count=2)
    Price.objects.filter(sku="H100-80GB").delete()
    meter(now=DEC)
    assert UnratedUsage.objects.get().gpu_seconds == 7200
    assert budgets.month_to_date(acme, at(4)) == Decimal("0.00")
