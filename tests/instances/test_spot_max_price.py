from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from billing import price_changes as billing_price_changes
from instances import lifecycle, preemption
from instances.models import Instance, NoticeStatus, PreemptionNotice

# The fleet fixture prices H100 at 1.00 on-demand and 0.40 spot per GPU-hour.
SPOT = {"name": "sweep", "gpu_model": "H100-80GB", "gpu_count": 2, "pricing_model": "spot"}


def test_a_spot_launch_keeps_its_max_price_and_the_api_shows_it(api, bob, acme, fleet):
    response = api(bob).post("/api/v1/instances/", {"team": acme.pk, "max_price": "0.55"} | SPOT, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["max_price"] == "0.550000"
    assert AuditEvent.objects.get(action="instance.launch").details["max_price"] == "0.550000"


@pytest.mark.parametrize(
    ("max_price", "says"),
    [
        ("-1", "more than zero"),
        ("0", "more than zero"),
        ("0.0000001", "no more than 6 decimal places"),
        ("cheap", "A valid number is required"),
        ("NaN", "A valid number is required"),
        ("101", "more than 100 times the on-demand price"),
        ("0.30", "The spot price now (0.40 per GPU-hour) is above 0.30"),
        ("1" + "0" * 20, "no more than 14 digits"),
    ],
)
def test_a_bad_max_price_is_a_clear_400_and_nothing_is_written(api, bob, acme, fleet, max_price, says):
    response = api(bob).post("/api/v1/instances/", {"team": acme.pk, "max_price": max_price} | SPOT, format="json")
    assert response.status_code == 400
    assert says in response.json()["max_price"][0]
    assert not Instance.objects.exists()


@pytest.mark.parametrize("pricing", ["on_demand", "reserved"])
def test_a_max_price_is_for_spot_only(api, bob, acme, fleet, pricing):
    body = {"team": acme.pk, "max_price": "0.50"} | SPOT | {"pricing_model": pricing}
    response = api(bob).post("/api/v1/instances/", body, format="json")
    assert response.status_code == 400
    assert response.json()["max_price"] == ["A max price applies to spot launches only."]


def test_the_service_checks_a_max_price_given_as_a_float_or_text(launch, bob, acme):
    assert launch(bob, acme, pricing="spot", max_price=0.5).max_price == Decimal("0.5")
    with pytest.raises(Exception, match="not a price"):
        launch(bob, acme, name="two", pricing="spot", max_price="½")


def _running_spot(launch, bob, acme, max_price="0.50", name="sweep"):
    instance = launch(bob, acme, name=name, pricing="spot", max_price=max_price, count=2)
    return lifecycle.mark_running(instance=instance)


def test_a_spot_price_above_the_max_gives_notice_then_preempts(launch, bob, acme, ops):
    instance = _running_spot(launch, bob, acme)
    now = timezone.now()
    billing_price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly="0.60", now=now)
    notice = PreemptionNotice.objects.get(instance=instance)
    assert notice.status == NoticeStatus.PENDING and notice.preempt_at == now + preemption.DEFAULT_NOTICE
    assert notice.reason == "spot price 0.60/GPU-hour is above its max price 0.50"
    preemption.preempt_due(now=notice.preempt_at)
    instance.refresh_from_db()
    assert instance.state == "preempted"
    assert AuditEvent.objects.filter(action="billing.preemption.notice", target_id=str(instance.pk)).exists()


def test_a_spot_price_at_or_under_the_max_leaves_it_running(launch, bob, acme, ops):
    instance = _running_spot(launch, bob, acme)
    billing_price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly="0.50")
    billing_price_changes.set_spot_price(actor=ops, sku="A100-80GB", hourly="0.90")  # another SKU
    assert not PreemptionNotice.objects.filter(instance=instance).exists()


def test_only_instances_whose_max_is_passed_get_notice(launch, bob, acme, ops):
    low = _running_spot(launch, bob, acme, "0.45", name="low")
    high = _running_spot(launch, bob, acme, "0.90", name="high")
    no_max = lifecycle.mark_running(instance=launch(bob, acme, name="none", pricing="spot"))
    billing_price_changes.set_spot_price(actor=ops, sku="H100-80GB", hourly="0.70")
    assert set(PreemptionNotice.objects.values_list("instance__name", flat=True)) == {low.name}
    assert {high.name, no_max.name}.isdisjoint(PreemptionNotice.objects.values_list("instance__name", flat=True))


def test_a_scheduled_price_is_enforced_by_the_periodic_sweep_once(launch, bob, acme, ops):
    instance = _running_spot(launch, bob, acme)
    later = timezone.now() + timedelta(hours=1)
    billing_price_changes.import_spot_prices(actor=ops, rows=[{"sku": "H100-80GB", "hourly": "0.80",
                                                          "time": later.isoformat()}])
    assert preemption.enforce_max_prices(now=later - timedelta(seconds=1)) == []
    assert [n.instance for n in preemption.enforce_max_prices(now=later)] == [instance]
    assert preemption.enforce_max_prices(now=later + timedelta(seconds=10)) == []  # already under notice
