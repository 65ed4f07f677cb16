"""Listing endpoints cost a fixed number of queries, however many rows they show."""

import pytest
from billing_support import at

from billing import meter_runs


@pytest.fixture
def three_months(play, meter, bob, acme):
    for month in (9, 10, 11):
        play(bob, acme, f"job-{month}", runs=[(at(3, 10, month=month), at(3, 12, month=month), "terminate")])
    meter(start=at(1, month=9), end=at(1, month=12), now=at(2, month=12))
    meter_runs.issue_due_invoices(now=at(2, month=12))


def test_the_invoice_list_is_a_fixed_number_of_queries(three_months, api, alice, django_assert_max_num_queries):
    with django_assert_max_num_queries(6):
        assert api(alice).get("/api/v1/invoices/").json()["count"] == 3


def test_an_invoice_detail_is_a_fixed_number_of_queries(three_months, api, alice, django_assert_max_num_queries):
    from billing.models import Invoice

    invoice = Invoice.objects.filter(status="issued").first()
    with django_assert_max_num_queries(6):
        assert api(alice).get(f"/api/v1/invoices/{invoice.pk}/").status_code == 200


def test_costs_by_instance_is_a_fixed_number_of_queries(three_months, api, bob, django_assert_max_num_queries):
    with django_assert_max_num_queries(5):
        body = api(bob).get("/api/v1/costs/?group_by=instance&start=2026-09-01&end=2026-12-01").json()
    assert len(body["rows"]) == 3
