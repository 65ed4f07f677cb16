"""Another team's billing reads as absent; members see costs but not the bill."""

import pytest
from billing_support import at

from billing import meter_runs, reservations
from billing.models import Invoice
from instances.models import GpuModel


@pytest.fixture
def billed(play, meter, bob, acme, charlie, globex, ops):
    play(bob, acme, "acme-job", runs=[(at(3, 10), at(3, 12), "terminate")])
    play(charlie, globex, "globex-job", runs=[(at(3, 10), at(3, 11), "terminate")])
    meter(now=at(2, month=12))
    meter_runs.issue_due_invoices(now=at(2, month=12))
    return Invoice.objects.get(team=acme), Invoice.objects.get(team=globex)


def test_another_teams_invoice_is_a_404(billed, api, charlie):
    acme_invoice, _ = billed
    assert api(charlie).get(f"/api/v1/invoices/{acme_invoice.pk}/").status_code == 404
    assert [i["number"] for i in api(charlie).get("/api/v1/invoices/").json()["results"]] == ["GLOBEX-202611"]


def test_a_member_sees_costs_but_not_invoices(billed, api, bob):
    assert api(bob).get("/api/v1/invoices/").json()["count"] == 0
    body = api(bob).get("/api/v1/costs/?start=2026-11-01&end=2026-12-01&group_by=instance").json()
    assert [(r["label"], r["billed_cost"]) for r in body["rows"]] == [("acme-job", "4.00")]


def test_an_auditor_reads_both_teams_bills(billed, api, audrey):
    assert api(audrey).get("/api/v1/invoices/").json()["count"] == 2


def test_costs_of_another_team_are_a_404(billed, api, charlie, acme):
    assert api(charlie).get(f"/api/v1/costs/?team={acme.pk}&start=2026-11-01").status_code == 404


def test_a_member_cannot_export_the_bill(billed, api, bob):
    body = api(bob).get("/api/v1/costs/export/?format=csv&start=2026-11-01&end=2026-12-01")
    assert b"acme-job" not in b"".join(body.streaming_content)


def test_reservations_are_the_teams_own(prices, api, alice, charlie, acme, globex, ops):
    reservations.purchase_reservation(actor=ops, team=acme, gpu_model=GpuModel.objects.get(name="H100-80GB"),
                                  gpu_count=1, term="1y", start=at(3), now=at(1))
    assert api(alice).get("/api/v1/reservations/").json()["count"] == 1
    assert api(charlie).get("/api/v1/reservations/").json()["count"] == 0


def test_a_member_may_not_buy_a_reservation(prices, api, bob, acme):
    body = {"team": acme.pk, "gpu_model": "H100-80GB", "gpu_count": 1, "term": "1y", "start": "2030-01-01T00:00:00Z"}
    assert api(bob).post("/api/v1/reservations/", body).status_code == 403


def test_no_one_buys_for_another_team(prices, api, charlie, acme):
    body = {"team": acme.pk, "gpu_model": "H100-80GB", "gpu_count": 1, "term": "1y", "start": "2030-01-01T00:00:00Z"}
    response = api(charlie).post("/api/v1/reservations/", body)
    assert response.status_code == 400 and "team" in response.json()


def test_anonymous_sees_nothing(api):
    for url in ("/api/v1/invoices/", "/api/v1/costs/", "/api/v1/budgets/", "/api/v1/costs/export/"):
        assert api().get(url).status_code in (401, 403)
