"""The team rule "Spot price above max price" (metric spot_vs_max, every team's default)."""

from decimal import Decimal

from django.utils import timezone

from alerting import periodic, services
from alerting.models import Alert, AlertRule
from billing import price_changes as billing_price_changes
from instances import lifecycle as instance_lifecycle


def _active(**filters):
    return list(Alert.objects.filter(state__in=("open", "acknowledged"), **filters))


def _spot(launch, bob, acme, max_price="0.50"):
    instance = launch(bob, acme, name="sweep", pricing="spot", max_price=max_price)
    return instance_lifecycle.mark_running(instance=instance)


def test_every_team_starts_with_the_rule(acme, globex):
    assert AlertRule.objects.filter(metric="spot_vs_max", name="Spot price above max price").count() == 2


def test_a_spot_price_above_the_max_opens_the_teams_alert_and_resolves_when_it_falls(launch, bob, acme, ops):
    instance = _spot(launch, bob, acme)
    billing_price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly="0.60")
    periodic.evaluate()
    [alert] = _active(kind="spot_max")
    assert (alert.team_id, alert.instance_id, alert.value, alert.category) == (acme.pk, instance.pk, 120.0, "billing")
    assert "0.60/GPU-hour at " in alert.message and "UTC, 120% of sweep's max price 0.50" in alert.message
    billing_price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly="0.45", now=timezone.now())
    periodic.evaluate()
    assert not _active(kind="spot_max")


def test_a_team_may_warn_before_the_max_is_reached(launch, bob, alice, acme, ops, globex, charlie):
    _spot(launch, bob, acme)
    services.create_rule(actor=alice, team=acme, name="spot near max", metric="spot_vs_max", comparison=">=",
                         threshold=80, hold_s=0, severity="info")
    billing_price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly=Decimal("0.42"))  # 84% of 0.50
    periodic.evaluate()
    assert [a.rule.name for a in _active(kind="spot_max")] == ["spot near max"]
    assert not _active(team=globex)
