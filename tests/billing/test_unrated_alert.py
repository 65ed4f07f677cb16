"""Usage held unrated raises an alert for operators, per SKU, until it is priced."""

from decimal import Decimal

import pytest
from billing_support import DEC, at
from django.core.exceptions import ValidationError

from alerting import services as alerting_services
from alerting.models import Alert, AlertRule
from billing import meter_runs
from billing.models import Price


def _unrated_alerts():
    return Alert.objects.filter(kind="unrated")


def test_held_usage_opens_one_operator_alert_per_sku(play, bob, charlie, acme, globex, meter):
    play(bob, acme, name="a", runs=[(at(3, 10), at(3, 12), "terminate")], model="H200-141GB")
    play(charlie, globex, name="g", runs=[(at(3, 10), at(3, 11), "terminate")], model="H200-141GB")
    Price.objects.filter(sku="H200-141GB").delete()
    meter()
    meter_runs.check_unrated(now=DEC)
    alert = _unrated_alerts().get()
    assert (alert.state, alert.team_id, alert.category, alert.value) == ("open", None, "billing", 3.0)
    assert alert.rule.name == "Fleet: usage held unrated"
    assert "3 GPU-hours of H200-141GB (on_demand) held unrated for 2 teams" in alert.message


def test_the_alert_resolves_once_the_sku_is_priced_and_metered_again(play, charlie, globex, meter):
    play(charlie, globex, name="g", runs=[(at(3, 10), at(3, 12), "terminate")], model="H200-141GB")
    Price.objects.filter(sku="H200-141GB").delete()
    meter()
    meter_runs.check_unrated(now=DEC)
    Price.objects.create(sku="H200-141GB", kind="on_demand", hourly=Decimal("3.60"), effective_from=at(1))
    meter()
    meter_runs.check_unrated(now=DEC)
    assert _unrated_alerts().get().state == "resolved"


def test_priced_usage_raises_nothing(play, bob, acme, meter):
    play(bob, acme, name="a", runs=[(at(3, 10), at(3, 12), "terminate")])
    meter()
    meter_runs.check_unrated(now=DEC)
    assert not _unrated_alerts().exists()


def test_a_team_rule_may_not_watch_unrated_usage(acme, alice):
    with pytest.raises(ValidationError) as caught:
        alerting_services.create_rule(actor=alice, team=acme, name="x", metric="unrated_usage", threshold=0)
    assert "operators only" in str(caught.value)
    assert not AlertRule.objects.filter(team=acme, metric="unrated_usage").exists()
