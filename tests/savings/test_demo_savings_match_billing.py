"""On the demo, every recommendation's monthly saving is billing's own price difference:
the instance's price per hour now (billing's rates) and the quote for the proposed
shape, each over a 730-hour month and rounded to the cent."""

import io
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.utils import timezone

from billing import pricing
from billing.rates import BillingPriceBook
from instances.models import Instance
from savings import services


@pytest.fixture
def demo(db, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("seed_demo", stdout=io.StringIO(), stderr=io.StringIO())


def test_each_saving_is_billings_price_difference_to_the_cent(demo):
    now = timezone.now()
    recs = services.recommendations(Instance.objects.all(), now=now)
    assert recs, "the demo has idle or oversized instances"
    book = BillingPriceBook()
    for rec in recs:
        current = book.instance_costs([rec.instance], now=now)[rec.instance.pk].price_per_hour
        proposed = (Decimal(0) if rec.kind == "stop" else
                    book.quote(sku=rec.proposed_sku, pricing_model=rec.instance.pricing_model,
                               count=rec.proposed_count, team_id=rec.instance.team_id, at=now).price_per_hour)
        month = pricing.HOURS_PER_MONTH * 3600
        expected = pricing.to_cents(current * month) - pricing.to_cents(proposed * month)
        assert rec.monthly_saving == expected > 0, rec.instance.name


def test_the_demo_shows_its_idle_spot_batch_with_a_reason(demo):
    recs = {r.instance.name: r for r in services.recommendations(Instance.objects.all())}
    idle = recs["acme-batch-spot"]
    assert idle.kind == "stop"
    assert "idle by real activity" in idle.reason
    assert all(r.reason and r.risk for r in recs.values())
