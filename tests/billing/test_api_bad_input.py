"""Every bad input answers a 4xx that names the field, and writes nothing."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from billing.models import Budget, Price, Reservation, SpotPrice

SOON = (timezone.now() + timedelta(days=2)).replace(microsecond=0).isoformat()
PAST = (timezone.now() - timedelta(days=2)).replace(microsecond=0).isoformat()
MONTH = f"{timezone.now():%Y-%m}"


@pytest.fixture
def nothing_written(db):
    before = (Reservation.objects.count(), Budget.objects.count(), Price.objects.count(), SpotPrice.objects.count(),
              AuditEvent.objects.exclude(action__endswith="denied").count())
    yield
    after = (Reservation.objects.count(), Budget.objects.count(), Price.objects.count(), SpotPrice.objects.count(),
             AuditEvent.objects.exclude(action__endswith="denied").count())
    assert after == before


@pytest.mark.parametrize(("body", "field"), [
    ({"gpu_count": 0}, "gpu_count"),
    ({"gpu_count": -3}, "gpu_count"),
    ({"gpu_model": "Z100-1GB"}, "gpu_model"),
    ({"start": PAST}, "start"),
    ({"start": "next tuesday"}, "start"),
    ({"term": "5y"}, "term"),
])
def test_a_bad_reservation_is_refused(prices, nothing_written, api, alice, acme, body, field):
    data = {"team": acme.pk, "gpu_model": "H100-80GB", "gpu_count": 2, "term": "1y", "start": SOON} | body
    response = api(alice).post("/api/v1/reservations/", data)
    assert response.status_code == 400
    assert field in response.json()


@pytest.mark.parametrize(("body", "field"), [
    ({"currency": "EUR"}, "currency"),
    ({"amount": "-10.00"}, "amount"),
    ({"amount": "0"}, "amount"),
    ({"month": "2026-13"}, "month"),
    ({"month": "2020-01"}, "month"),
    ({"actual_thresholds": [0, 80]}, "actual_thresholds"),
])
def test_a_bad_budget_is_refused(nothing_written, api, alice, acme, body, field):
    data = {"team": acme.pk, "month": MONTH, "amount": "1000.00"} | body
    response = api(alice).post("/api/v1/budgets/", data, format="json")
    assert response.status_code == 400
    assert field in response.json()


@pytest.mark.parametrize(("body", "field"), [
    ({"effective_from": PAST}, "effective_from"),
    ({"sku": "Z100-1GB"}, "sku"),
    ({"hourly": "0"}, "hourly"),
    ({"hourly": "-1"}, "hourly"),
    ({"hourly": "1.0000001"}, "hourly"),
    ({"kind": "forever"}, "kind"),
])
def test_a_bad_price_is_refused(prices, nothing_written, api, ops, body, field):
    data = {"sku": "H100-80GB", "kind": "on_demand", "hourly": "2.50", "effective_from": SOON} | body
    response = api(ops).post("/api/v1/prices/", data)
    assert response.status_code == 400
    assert field in response.json()


def test_overlapping_price_periods_are_refused(prices, api, ops):
    later = (timezone.now() + timedelta(days=9)).replace(microsecond=0).isoformat()
    api(ops).post("/api/v1/prices/", {"sku": "H100-80GB", "hourly": "2.50", "effective_from": later})
    count = Price.objects.count()
    response = api(ops).post("/api/v1/prices/", {"sku": "H100-80GB", "hourly": "2.40", "effective_from": SOON})
    assert response.status_code == 400
    assert "Overlaps" in response.json()["effective_from"][0]
    assert Price.objects.count() == count


@pytest.mark.parametrize("query", [
    "start=2026-02-30", "start=yesterday", "end=2026-11-01&start=2026-12-01", "start=2026-11-01T00:00:00",
    "group_by=week", "start=2016-01-01&end=2026-12-01",
])
def test_a_malformed_cost_range_is_refused(api, alice, query):
    response = api(alice).get(f"/api/v1/costs/?{query}")
    assert response.status_code == 400
    assert set(response.json()) & {"start", "end", "group_by"}


@pytest.mark.parametrize("query", ["format=xlsx", "start=2026-11-01&end=2026-10-01", "end=soon"])
def test_a_malformed_export_is_refused_and_not_audited(api, alice, query):
    response = api(alice).get(f"/api/v1/costs/export/?{query}")
    assert response.status_code == 400
    assert not AuditEvent.objects.filter(action="billing.export").exists()


def test_a_bad_spot_price_is_refused(prices, nothing_written, api, ops):
    response = api(ops).post("/api/v1/spot-prices/", {"sku": "H100-80GB", "hourly": "-0.5"})
    assert response.status_code == 400 and "hourly" in response.json()
