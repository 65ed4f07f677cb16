"""A group's cost is its instances' metered charges: the same figure on its page, in its
API and in the cost explorer grouped by scaling group."""

from datetime import timedelta
from decimal import Decimal

from django.test import Client
from django.utils import timezone

from billing import meter_runs as billing_meter_runs
from instances import lifecycle as instance_lifecycle
from scaling import services


def _metered_group(group, now):
    start = now - timedelta(hours=3)
    services.push_queue_depth(group=group, queue_depth=20, now=start)
    services.evaluate_group(group, now=start, provision=False)
    for instance in services.active_instances(group):
        instance_lifecycle.mark_running(instance=instance, at=start + timedelta(seconds=90))
    billing_meter_runs.meter_window(actor="system", start=start, end=now, now=now)


def test_page_api_and_cost_explorer_agree(api, group, acme, bob, launch):
    now = timezone.now()
    outside = launch(bob, acme, name="outside", at=now - timedelta(hours=2))  # not in the group
    instance_lifecycle.mark_running(instance=outside, at=now - timedelta(hours=2))
    _metered_group(group, now)
    body = api(bob).get(f"/api/v1/scaling-groups/{group.pk}/").json()
    month = Decimal(body["cost"]["month_to_date"])
    assert month > 0 and body["running"] == 2
    assert Decimal(body["cost"]["per_hour"]) == Decimal("2.00")  # two H100s at 1.00 per GPU-hour

    explorer = api(bob).get("/api/v1/costs/", {"group_by": "scaling_group", "team": acme.pk}).json()
    rows = {row["key"]: row for row in explorer["rows"]}
    assert Decimal(rows[str(group.pk)]["billed_cost"]) == month
    assert rows[str(group.pk)]["label"] == "workers"
    assert "none" in rows  # the instance outside the group

    client = Client()
    client.force_login(bob)
    page = client.get(f"/scaling-groups/{group.pk}/").content.decode()
    assert f'id="cost-month">{month:,.2f} USD' in page
    assert 'id="cost-per-hour">2.00 USD' in page
