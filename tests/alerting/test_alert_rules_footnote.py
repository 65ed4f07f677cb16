"""The rules page's footnote says what the rules watch: spot price against a spot
instance's max price is watched (instances have a max price, and a default rule for it)."""

from alerting.services import ensure_default_rules


def test_the_footnote_says_spot_max_prices_are_watched(client, alice, acme):
    ensure_default_rules(acme)
    client.force_login(alice)
    page = client.get("/alerts/rules/").content.decode()
    assert "Spot price above max price" in page
    assert "cannot be watched yet" not in page and "instances have no maximum price" not in page
    assert "max price is watched by the spot price rules" in page
