"""On the demo, every recommendation's monthly saving is billing's own price difference:
the instance's price per hour now (billing's rates) and the quote for the proposed
shape, each over a 730-hour month and rounded to the cent."""

from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from billing import pricing
from billing.rates import BillingPriceBook
from instances.models import Instance
from savings import services


@pytest.fixture
def demo(seeded_demo_module, db):
    """The demo, seeded once for this module."""


def billings_difference(rec, now) -> Decimal:
    book = BillingPriceBook()
    current = book.instance_costs([rec.instance], now=now)[rec.instance.pk].price_per_hour
    proposed = (Decimal(0) if rec.kind == "stop" else
                book.quote(sku=rec.proposed_sku, pricing_model=rec.instance.pricing_model,
                           count=rec.proposed_count, team_id=rec.instance.team_id, at=now).price_per_hour)
    month = pricing.HOURS_PER_MONTH * 3600
    return pricing.to_cents(current * month) - pricing.to_cents(proposed * month)


def test_each_saving_is_billings_price_difference_to_the_cent(demo):
    now = timezone.now()
    recs = services.recommendations(Instance.objects.all(), now=now)
    assert recs, "the demo has idle or oversized instances"
    for rec in recs:
        assert rec.monthly_saving == billings_difference(rec, now) > 0, rec.instance.name


def test_the_demo_has_idle_and_oversized_instances_over_a_week_of_minutes(demo):
    now = timezone.now()
    for days in (7, 14):
        recs = services.recommendations(Instance.objects.all(), now=now, days=days)
        idle = [r for r in recs if r.kind == "stop"]
        smaller = [r for r in recs if r.kind in ("slice", "fewer")]
        assert idle and smaller, [(r.instance.name, r.kind) for r in recs]
        for rec in idle + smaller:
            assert rec.reason and rec.risk and rec.monthly_saving == billings_difference(rec, now) > 0
    by_name = {r.instance.name: r for r in recs}
    assert by_name["acme-embed-api"].proposed == "1 × H100-80GB:mig:1g.10gb (MIG)"
    chat = by_name["globex-chat-small"]
    assert (chat.kind, chat.proposed, chat.usage.devices) == ("fewer", "1 × H100-80GB", 4)
    assert chat.reason.startswith("4 GPUs, but their peak memory together") and chat.usage.minutes >= 7 * 24 * 60
    alice, charlie = (page(name) for name in ("alice", "charlie"))
    assert "acme-batch-spot" in alice and "acme-embed-api" in alice and "Peak memory 6." in alice
    assert "globex-chat-small" in charlie and "4 GPUs, but their peak memory together" in charlie
    assert "globex-chat-small" not in alice and "acme-embed-api" not in charlie


def page(username) -> str:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client.get("/savings/").content.decode()


def test_the_demo_shows_its_idle_spot_batch_with_a_reason(demo):
    recs = {r.instance.name: r for r in services.recommendations(Instance.objects.all())}
    idle = recs["acme-batch-spot"]
    assert idle.kind == "stop"
    assert "idle by real activity" in idle.reason
    assert all(r.reason and r.risk for r in recs.values())


def test_waste_by_day_is_billings_idle_cost_of_each_day(demo):
    """The savings page reads fourteen days of idle cost in one pass; each day's figures
    are billing's ``idle_cost`` over that day."""
    from billing import costs
    from billing.models import Charge
    from console.models import Team
    from savings import useful_work

    now = timezone.now()
    compared = 0
    for team in Team.objects.all():
        for day in useful_work.waste_by_day(team, now=now, days=14):
            start = pricing.floor_day(now).replace(year=day.day.year, month=day.day.month, day=day.day.day)
            summary = costs.idle_cost(Charge.objects.filter(team=team), start, start + pricing.DAY)
            assert (day.allocated, day.idle) == (summary.known_cost + summary.unknown_cost, summary.idle_cost), day
            compared += day.idle > 0
    assert compared >= 10, "the demo's days have idle cost to compare"
