"""The demo as alice finds it: months of history, last month issued, this month in
draft, and every figure reconciling to the cent."""

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.utils import timezone

from billing import budgets, pricing
from billing.models import Charge, Invoice, PricingCategory, Reservation


@pytest.fixture
def demo(seeded_demo_module, db):
    """The demo, seeded once for this module."""


def test_the_demo_bills_acme_and_globex_across_all_pricing_models(demo):
    now = timezone.now()
    last = pricing.month_start(pricing.month_start(now) - pricing.DAY).date()
    for team in ("Acme", "Globex"):
        assert Invoice.objects.get(team__name=team, month=last).status == "issued"
        assert Invoice.objects.get(team__name=team, month=pricing.month_start(now).date()).status == "draft"
        assert set(Charge.objects.filter(team__name=team, month=last).values_list("pricing_category", flat=True)) == set(
            PricingCategory.values)
        assert Reservation.objects.filter(team__name=team).exists()
    assert Charge.objects.filter(note__contains="first hour").exists()
    assert Invoice.objects.filter(status="issued").count() >= 6
    for invoice in Invoice.objects.filter(status="issued"):  # as the hourly task issues: early on the 1st after
        assert invoice.period_end <= invoice.issued_at <= min(invoice.period_end + timedelta(hours=1), now), invoice
    _reconciles_to_the_cent()
    out = io.StringIO()
    call_command("reconcile_costs", stdout=out)  # raises CommandError on any cent of difference
    assert "team-months reconcile to the cent" in out.getvalue()
    assert out.getvalue().count(" ok\n") >= 8


def _reconciles_to_the_cent():
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(User.objects.get(username="alice"))
    issued = Invoice.objects.filter(team__name="Acme", status="issued").latest("month")
    start, end = issued.period_start.date().isoformat(), issued.period_end.date().isoformat()
    body = b"".join(client.get(f"/api/v1/costs/export/?format=focus&start={start}&end={end}").streaming_content)
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert sum(Decimal(r["BilledCost"]) for r in rows) == issued.total
    costs = client.get(f"/api/v1/costs/?group_by=pricing_category&start={start}&end={end}").json()
    assert Decimal(costs["total"]) == issued.total
    draft = Invoice.objects.get(team__name="Acme", status="draft")
    assert draft.subtotal == budgets.month_to_date(draft.team)


def test_seeding_twice_adds_nothing(demo):
    before = (Invoice.objects.filter(status="issued").count(), Reservation.objects.count(), Charge.objects.count())
    call_command("seed_demo", stdout=io.StringIO(), stderr=io.StringIO())
    after = (Invoice.objects.filter(status="issued").count(), Reservation.objects.count(), Charge.objects.count())
    assert after == before
