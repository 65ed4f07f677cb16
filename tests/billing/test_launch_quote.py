from decimal import Decimal

import pytest
from billing_support import at

from billing import reservations
from instances.models import GpuModel


def _quote(api, user, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return api(user).get(f"/api/v1/launch-quote/?{query}")


def test_on_demand_quote_has_the_price_and_free_capacity(prices, api, bob):
    body = _quote(api, bob, gpu_model="H100-80GB", gpu_count=4).json()
    assert (body["price_per_hour"], body["free"], body["free_on_one_host"], body["fits"]) == ("8.00", 16, 8, True)
    assert body["note"].startswith("On-demand: 2.00/h")


def test_spot_quote_says_what_spot_means(prices, api, bob):
    body = _quote(api, bob, gpu_model="H100-80GB", pricing_model="spot", gpu_count=2).json()
    assert body["price_per_hour"] == "1.44" and "2 minutes' notice" in body["note"]


def test_a_slice_quote_counts_slices(prices, api, bob):
    body = _quote(api, bob, gpu_model="A100-80GB", slice_profile="1g.10gb", gpu_count=3).json()
    assert (body["sku"], body["price_per_hour"], body["free"]) == ("A100-80GB:mig:1g.10gb", "0.54", 14)


def test_a_reserved_quote_uses_the_teams_free_reserved_gpus_first(prices, api, alice, acme):
    reservations.purchase_reservation(actor=alice, team=acme, gpu_model=GpuModel.objects.get(name="H100-80GB"),
                                  gpu_count=2, term="1y", start=at(1), now=at(1))
    body = _quote(api, alice, gpu_model="H100-80GB", pricing_model="reserved", gpu_count=3, team=acme.pk).json()
    assert Decimal(body["price_per_hour"]) == 2 * Decimal("1.20") + Decimal("2.00")
    assert "2 of your team's 2 reserved H100-80GB GPUs are free" in body["note"]


def test_an_unpriced_sku_quotes_no_price(prices, api, bob):
    body = _quote(api, bob, gpu_model="A100-80GB", slice_profile="1g.10gb", pricing_model="spot").json()
    assert body["price_per_hour"] is None and "no spot price" in body["note"]
    from billing.models import Price

    Price.objects.filter(sku="H200-141GB").delete()
    assert "cannot be launched" in _quote(api, bob, gpu_model="H200-141GB").json()["note"]


@pytest.mark.parametrize("params", [{"gpu_model": "B200"}, {"gpu_model": "H100-80GB", "slice_profile": "1g.10gb"},
                                    {"gpu_model": "H100-80GB", "gpu_count": 0}])
def test_bad_quotes_are_a_400(prices, api, bob, params):
    assert _quote(api, bob, **params).status_code == 400


def test_another_teams_quote_is_a_404(prices, api, bob, globex):
    assert _quote(api, bob, gpu_model="H100-80GB", team=globex.pk).status_code == 404


def test_the_launch_page_lists_prices_capacity_and_what_each_pricing_means(prices, client, bob):
    client.force_login(bob)
    page = client.get("/instances/new/").content.decode()
    assert 'id="offers"' in page and "A100-80GB:mig:1g.10gb" in page and "0.18" in page
    assert "<strong>Reserved</strong>" in page and "<strong>Spot</strong>" in page
    assert "instances/launch.js" in page
