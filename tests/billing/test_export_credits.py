import csv
import io
from decimal import Decimal

import pytest
from billing_support import DEC, at
from django.core.management import CommandError, call_command

from billing import invoices
from billing.models import Invoice


def _export(api, user, fmt="focus", start="2026-11-01", end="2026-12-01"):
    body = b"".join(api(user).get(f"/api/v1/costs/export/?format={fmt}&start={start}&end={end}").streaming_content)
    return list(csv.DictReader(io.StringIO(body.decode())))


@pytest.fixture
def november(play, bob, acme, meter, ops):
    play(bob, acme, runs=[(at(3, 10), at(3, 12), "terminate")], labels={"project": "llm", "cost-centre": "R&D"})
    meter(now=at(20))
    invoices.add_adjustment(actor=ops, team=acme, amount=Decimal("-1.50"), reason="downtime credit", now=at(20))
    invoices.add_adjustment(actor=ops, team=acme, amount=Decimal("0.25"), reason="support hours", now=at(20))
    meter(now=at(20))
    return Invoice.objects.get(team=acme)


def test_credits_and_adjustments_are_focus_rows_and_the_export_sums_to_the_invoice(november, api, alice):
    rows = _export(api, alice)
    assert sum(Decimal(r["BilledCost"]) for r in rows) == november.total == Decimal("2.75")
    extra = [(r["ChargeCategory"], r["BilledCost"], r["ChargeFrequency"]) for r in rows if r["ChargeCategory"] != "Usage"]
    assert extra == [("Credit", "-1.50", "One-Time"), ("Adjustment", "0.25", "One-Time")]


def test_the_csv_export_sums_to_the_invoice_too(november, api, alice):
    rows = _export(api, alice, fmt="csv")
    assert sum(Decimal(r["billed_cost"]) for r in rows) == november.total
    assert {r["charge_type"] for r in rows} == {"usage", "credit", "adjustment"}


def test_every_row_of_an_issued_month_carries_the_invoice_id(november, api, alice, ops):
    invoices.issue_invoice(actor=ops, invoice=november, now=DEC)
    november.refresh_from_db()
    rows = _export(api, alice)
    assert {r["InvoiceId"] for r in rows} == {november.number}


def test_tags_come_from_the_instance_labels(november, api, alice):
    usage = [r for r in _export(api, alice) if r["ChargeCategory"] == "Usage"]
    assert {r["Tags"] for r in usage} == {'{"cost-centre":"R&D","project":"llm"}'}


def test_reconcile_costs_passes_and_fails_on_a_cent(november, ops):
    out = io.StringIO()
    call_command("reconcile_costs", "--month", "2026-11", stdout=out)
    assert "1 team-months reconcile to the cent" in out.getvalue()
    Invoice.objects.filter(pk=november.pk).update(total=november.total + Decimal("0.01"))
    with pytest.raises(CommandError, match="differ: Acme 2026-11"):
        call_command("reconcile_costs", "--month", "2026-11", stdout=io.StringIO())


def test_bad_labels_are_a_400(api, bob, acme, fleet):
    body = {"team": acme.pk, "name": "job", "gpu_model": "H100-80GB", "gpu_count": 1, "pricing_model": "on_demand",
            "labels": {"bad key!": "x"}}
    response = api(bob).post("/api/v1/instances/", body, format="json")
    assert response.status_code == 400 and "labels" in response.json()
